// Agent records for the unit tests of the torch-free libraries (the encoders,
// the event log): the head every record kind shares, in one call; the test
// sets the kind's own fields. Header-only, so a test links nothing more.
#pragma once

#include <cstdint>

#include "agent/src/record/cast_record.h"

namespace castscope::testing {

// A zeroed Record of `kind` with the shared fields set.
inline Record record_head(RecordKind kind, uint64_t seq, uint64_t ts_ns, uint32_t thread = 0, uint32_t op_id = 0,
                          CastPolicy policy = {}, DeviceKind device = {}) {
  Record r{};
  r.seq = seq;
  r.ts_ns = ts_ns;
  r.thread = thread;
  r.op_id = op_id;
  r.kind = kind;
  r.policy = policy;
  r.device = device;
  return r;
}

// The encoders' usual cast: argument 1 of the op at seq - 1, 256 bytes,
// float32 to bfloat16 under lower_precision_fp on the CPU, cast; the test
// adds shape, role, cache and the rest.
inline Record fp32_to_bf16_cast(uint64_t seq, uint64_t ts_ns, uint32_t thread, uint32_t op_id) {
  Record r = record_head(RecordKind::kCast, seq, ts_ns, thread, op_id, CastPolicy::kLowerPrecisionFp, DeviceKind::kCpu);
  r.cast.op_seq = seq - 1;
  r.cast.bytes = 256;
  r.cast.arg_index = 1;
  r.cast.list_index = -1;
  r.cast.src = DType::kFloat32;
  r.cast.dst = DType::kBfloat16;
  r.cast.outcome = CastOutcome::kCast;
  return r;
}

}  // namespace castscope::testing
