// How the store packs small fields into integer columns (the writer packs,
// the reader unpacks, validation guarantees the ranges). Fewer columns per
// row is what lets SQLite take a million rows a second; the views cast_rows
// and op_rows in the schema (store_schema.cc) unpack them again for SQL users.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "castscope/v1/events.pb.h"
#include "server/src/batch/event_limits.h"

namespace castscope::collector {

// casts.slot: where in its op a cast happened, and on which thread. thread
// in bits 0-23, arg_index in bits 24-39, list_index + 1 in bits 40-62 (so
// -1, "not a list", is 0). validate_batch checks the ranges (batch/event_limits.h).
// SQL for the three fields, from the column `slot` (the views use them).
#define CASTSCOPE_SLOT_THREAD_SQL "(slot & 16777215)"
#define CASTSCOPE_SLOT_ARG_INDEX_SQL "((slot >> 24) & 65535)"
#define CASTSCOPE_SLOT_LIST_INDEX_SQL "((slot >> 40) - 1)"

inline int64_t pack_cast_slot(const castscope::v1::CastEvent& c) {
  return static_cast<int64_t>(static_cast<uint64_t>(c.thread()) | static_cast<uint64_t>(c.arg_index()) << 24 |
                              static_cast<uint64_t>(static_cast<int64_t>(c.list_index()) + 1) << 40);
}

inline void unpack_cast_slot(int64_t column, castscope::v1::CastEvent& c) {
  const auto slot = static_cast<uint64_t>(column);
  c.set_thread(static_cast<uint32_t>(slot & (kSlotThreadLimit - 1)));
  c.set_arg_index(static_cast<uint32_t>((slot >> 24) & (kSlotArgIndexLimit - 1)));
  c.set_list_index(static_cast<int32_t>(static_cast<int64_t>(slot >> 40) - 1));
}

// Enum fields of a cast and an op, kCodeBits each, first field lowest. Enum
// values must be below kCodeLimit (validate_batch checks; batch/event_limits.h).

inline int64_t pack_codes(std::initializer_list<int> values) {
  uint64_t packed = 0;
  int shift = 0;
  for (int value : values) {
    packed |= static_cast<uint64_t>(value & (kCodeLimit - 1)) << shift;
    shift += kCodeBits;
  }
  return static_cast<int64_t>(packed);
}

inline int code_at(int64_t packed, int index) {
  return static_cast<int>((static_cast<uint64_t>(packed) >> (index * kCodeBits)) & (kCodeLimit - 1));
}

// casts.codes: policy, src_dtype, dst_dtype, outcome, device_type, role, cache, mode, phase, flags
// (bit 0 shape_truncated, bit 1 round_trip).
inline constexpr int kCastFlagShapeTruncated = 1, kCastFlagRoundTrip = 2;
inline int64_t pack_cast_codes(const castscope::v1::CastEvent& c) {
  return pack_codes({c.policy(), c.src_dtype(), c.dst_dtype(), c.outcome(), c.device_type(), c.role(), c.cache(),
                     c.mode(), c.phase(),
                     (c.shape_truncated() ? kCastFlagShapeTruncated : 0) | (c.round_trip() ? kCastFlagRoundTrip : 0)});
}

inline void unpack_cast_codes(int64_t packed, castscope::v1::CastEvent& c) {
  namespace v1 = castscope::v1;
  c.set_policy(static_cast<v1::CastPolicy>(code_at(packed, 0)));
  c.set_src_dtype(static_cast<v1::DType>(code_at(packed, 1)));
  c.set_dst_dtype(static_cast<v1::DType>(code_at(packed, 2)));
  c.set_outcome(static_cast<v1::CastOutcome>(code_at(packed, 3)));
  c.set_device_type(static_cast<v1::DeviceType>(code_at(packed, 4)));
  c.set_role(static_cast<v1::Role>(code_at(packed, 5)));
  c.set_cache(static_cast<v1::CacheOutcome>(code_at(packed, 6)));
  c.set_mode(static_cast<v1::ExecutionMode>(code_at(packed, 7)));
  c.set_phase(static_cast<v1::Phase>(code_at(packed, 8)));
  c.set_shape_truncated((code_at(packed, 9) & kCastFlagShapeTruncated) != 0);
  c.set_round_trip((code_at(packed, 9) & kCastFlagRoundTrip) != 0);
}

// ops.codes: policy, device_type, output_dtype, outcome, autocast_dtype, mode, phase, probe_reason.
inline int64_t pack_op_codes(const castscope::v1::OpEvent& o) {
  return pack_codes({o.policy(), o.device_type(), o.output_dtype(), o.outcome(), o.autocast_dtype(), o.mode(),
                     o.phase(), o.probe_reason()});
}

inline void unpack_op_codes(int64_t packed, castscope::v1::OpEvent& o) {
  namespace v1 = castscope::v1;
  o.set_policy(static_cast<v1::CastPolicy>(code_at(packed, 0)));
  o.set_device_type(static_cast<v1::DeviceType>(code_at(packed, 1)));
  o.set_output_dtype(static_cast<v1::DType>(code_at(packed, 2)));
  o.set_outcome(static_cast<v1::OpOutcome>(code_at(packed, 3)));
  o.set_autocast_dtype(static_cast<v1::DType>(code_at(packed, 4)));
  o.set_mode(static_cast<v1::ExecutionMode>(code_at(packed, 5)));
  o.set_phase(static_cast<v1::Phase>(code_at(packed, 6)));
  o.set_probe_reason(static_cast<v1::ProbeReason>(code_at(packed, 7)));
}

// cast_counts.codes and op_counts.codes: a counter's key packed as casts.codes
// and ops.codes (no flags; ops' outcome OK: errors are counted apart).
inline int64_t pack_cast_counts_codes(const castscope::v1::CastCounts& c) {
  return pack_codes({c.policy(), c.src_dtype(), c.dst_dtype(), c.outcome(), c.device_type(), c.role(), c.cache(),
                     c.mode(), c.phase(), 0});
}
inline int64_t pack_op_counts_codes(const castscope::v1::OpCounts& o) {
  return pack_codes({o.policy(), o.device_type(), o.output_dtype(), castscope::v1::OP_OUTCOME_OK, o.autocast_dtype(),
                     o.mode(), o.phase(), o.probe_reason()});
}
inline int64_t pack_device_mask(const castscope::v1::OpCounts& op) {
  uint64_t mask = 0;
  for (int device : op.autocast_enabled()) mask |= uint64_t{1} << device;
  return static_cast<int64_t>(mask);
}

// ops.input_dtypes: (dtype + 1) per byte, first input in the lowest byte; 0 ends the list.
inline int64_t pack_input_dtypes(const castscope::v1::OpEvent& op) {
  uint64_t packed = 0;
  for (int i = 0; i < op.input_dtypes_size() && i < 8; ++i)
    packed |= static_cast<uint64_t>(op.input_dtypes(i) + 1) << (8 * i);
  return static_cast<int64_t>(packed);
}

inline void unpack_input_dtypes(int64_t column, castscope::v1::OpEvent& op) {
  for (auto packed = static_cast<uint64_t>(column); (packed & 0xff) != 0; packed >>= 8)
    op.add_input_dtypes(static_cast<castscope::v1::DType>((packed & 0xff) - 1));
}

// Bit d set: DeviceType d is enabled. Order is not kept (it is a set).
inline int64_t pack_device_mask(const castscope::v1::OpEvent& op) {
  uint64_t mask = 0;
  for (int device : op.autocast_enabled()) mask |= uint64_t{1} << device;
  return static_cast<int64_t>(mask);
}

inline void unpack_device_mask(int64_t column, castscope::v1::OpEvent& op) {
  const auto mask = static_cast<uint64_t>(column);
  for (int device = 0; device < 63; ++device)
    if (mask & (uint64_t{1} << device)) op.add_autocast_enabled(static_cast<castscope::v1::DeviceType>(device));
}

// ops.gemm: OpEvent.gemm (the op's matmuls as cuBLASLt's logger described
// them), one byte each: compute | a_type << 8 | b_type << 16 | d_type << 24 |
// calls << 32 | mixed << 40. 0: the op has none (logger off, or no cuBLAS
// matmul). Each field below kGemmFieldLimit (validate_batch checks; batch/event_limits.h).
#define CASTSCOPE_GEMM_FIELD_SQL(shift) "((gemm >> " #shift ") & 255)"

inline int64_t pack_gemm(const castscope::v1::OpEvent& op) {
  if (!op.has_gemm()) return 0;
  const castscope::v1::GemmDescription& g = op.gemm();
  auto byte = [](int64_t value) { return static_cast<uint64_t>(value) & (kGemmFieldLimit - 1); };
  return static_cast<int64_t>(byte(g.compute()) | byte(g.a_type()) << 8 | byte(g.b_type()) << 16 |
                              byte(g.d_type()) << 24 | byte(g.calls()) << 32 | uint64_t{g.mixed()} << 40);
}

inline int gemm_field(int64_t packed, int index) {
  return static_cast<int>((static_cast<uint64_t>(packed) >> (8 * index)) & (kGemmFieldLimit - 1));
}

inline void unpack_gemm(int64_t packed, castscope::v1::OpEvent& op) {
  namespace v1 = castscope::v1;
  if (packed == 0) return;
  v1::GemmDescription& g = *op.mutable_gemm();
  g.set_compute(static_cast<v1::GemmCompute>(gemm_field(packed, 0)));
  g.set_a_type(static_cast<v1::DType>(gemm_field(packed, 1)));
  g.set_b_type(static_cast<v1::DType>(gemm_field(packed, 2)));
  g.set_d_type(static_cast<v1::DType>(gemm_field(packed, 3)));
  g.set_calls(static_cast<uint32_t>(gemm_field(packed, 4)));
  g.set_mixed(gemm_field(packed, 5) != 0);
}

// kernels.codes: activity, launched_by.
inline int64_t pack_kernel_codes(const castscope::v1::KernelEvent& k) { return pack_codes({k.activity(), k.launched_by()}); }

inline void unpack_kernel_codes(int64_t packed, castscope::v1::KernelEvent& k) {
  k.set_activity(static_cast<castscope::v1::GpuActivity>(code_at(packed, 0)));
  k.set_launched_by(static_cast<castscope::v1::LaunchedBy>(code_at(packed, 1)));
}

}  // namespace castscope::collector
