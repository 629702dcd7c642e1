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

}  // namespace castscope::testing
