// How the store packs small fields into integer columns (the writer packs,
// the reader unpacks, validation guarantees the ranges). Fewer columns per
// row is what lets SQLite take a million rows a second. Each packed column's
// layout is declared once here, as PackedField lists: the C++ pack/unpack
// below and the SQL of the views cast_rows and op_rows (store_schema.cc
// generates them) both read these declarations.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "castscope/v1/events.pb.h"
#include "server/src/batch/event_limits.h"

namespace castscope::collector {

// One field of a packed column: bits [shift, shift + bits), holding the
// value minus `offset` (list_index is stored + 1, so that -1 is 0).
struct PackedField {
  std::string_view name;  // the view column that unpacks it
  int shift = 0;
  int bits = 0;
  int offset = 0;
  constexpr uint64_t mask() const { return (uint64_t{1} << bits) - 1; }
  constexpr int64_t unpack(int64_t column) const {
    return static_cast<int64_t>((static_cast<uint64_t>(column) >> shift) & mask()) + offset;
  }
  constexpr uint64_t pack(int64_t value) const { return (static_cast<uint64_t>(value - offset) & mask()) << shift; }
};

// The field as SQL over `column` (a column name or qualified name).
inline std::string packed_field_sql(std::string_view column, const PackedField& field) {
  std::string sql = "((" + std::string(column) + " >> " + std::to_string(field.shift) + ") & " +
                    std::to_string(field.mask()) + ")";
  if (field.offset != 0)
    sql = "(" + sql + (field.offset < 0 ? " - " : " + ") + std::to_string(field.offset < 0 ? -field.offset : field.offset) + ")";
  return sql;
}

// casts.slot: where in its op a cast happened, and on which thread. thread
// in bits 0-23, arg_index in bits 24-39, list_index + 1 in bits 40-62 (so
// -1, "not a list", is 0). validate_batch checks the ranges (batch/event_limits.h).
inline constexpr PackedField kSlotThread{"thread", 0, 24};
inline constexpr PackedField kSlotArgIndex{"arg_index", 24, 16};
inline constexpr PackedField kSlotListIndex{"list_index", 40, 23, -1};
inline constexpr PackedField kCastSlotFields[] = {kSlotThread, kSlotArgIndex, kSlotListIndex};
static_assert(kSlotThreadLimit == kSlotThread.mask() + 1 && kSlotArgIndexLimit == kSlotArgIndex.mask() + 1 &&
              kSlotListIndexLimit == static_cast<int32_t>(kSlotListIndex.mask()));

inline int64_t pack_cast_slot(const castscope::v1::CastEvent& c) {
  return static_cast<int64_t>(kSlotThread.pack(c.thread()) | kSlotArgIndex.pack(c.arg_index()) |
                              kSlotListIndex.pack(c.list_index()));
}

inline void unpack_cast_slot(int64_t column, castscope::v1::CastEvent& c) {
  c.set_thread(static_cast<uint32_t>(kSlotThread.unpack(column)));
  c.set_arg_index(static_cast<uint32_t>(kSlotArgIndex.unpack(column)));
  c.set_list_index(static_cast<int32_t>(kSlotListIndex.unpack(column)));
}

// Enum fields of a cast and an op, kCodeBits each, first field lowest. Enum
// values must be below kCodeLimit (validate_batch checks; batch/event_limits.h).

// The enum field at `index` of a codes column.
inline constexpr PackedField code_field(std::string_view name, int index) { return {name, index * kCodeBits, kCodeBits}; }

inline constexpr int code_at(int64_t packed, int index) { return static_cast<int>(code_field("", index).unpack(packed)); }
inline constexpr uint64_t pack_code(int index, int value) { return code_field("", index).pack(value); }

// casts.codes (and cast_counts.codes, without flags): the fields by index.
// flags: bit 0 shape_truncated, bit 1 round_trip.
enum CastCode : int {
  kCastPolicy = 0, kCastSrcDtype, kCastDstDtype, kCastOutcome, kCastDeviceType, kCastRole, kCastCache, kCastMode,
  kCastPhase, kCastFlags
};
inline constexpr int kCastFlagShapeTruncated = 1, kCastFlagRoundTrip = 2;
inline constexpr PackedField kCastCodeFields[] = {
    code_field("policy", kCastPolicy),   code_field("src_dtype", kCastSrcDtype), code_field("dst_dtype", kCastDstDtype),
    code_field("outcome", kCastOutcome), code_field("device_type", kCastDeviceType), code_field("role", kCastRole),
    code_field("cache", kCastCache),     code_field("mode", kCastMode),          code_field("phase", kCastPhase),
    {"shape_truncated", kCastFlags * kCodeBits, 1}, {"round_trip", kCastFlags * kCodeBits + 1, 1},
    {"maker", kCastFlags * kCodeBits + 2, 7}};
// The maker sits above the two flags, up to the sign bit (since schema 18; an
// older row reads 0, CAST_MAKER_UNSPECIFIED: autocast's).
inline constexpr PackedField kCastMakerField = kCastCodeFields[std::size(kCastCodeFields) - 1];
static_assert(kCastMakerField.shift + kCastMakerField.bits == 63 && v1::CastMaker_MAX <= kCastMakerField.mask());

// A cast's key: every field but the flags (CastEvent and CastCounts name them alike).
template <typename CastOrCounts>
uint64_t pack_cast_key(const CastOrCounts& c) {
  return pack_code(kCastPolicy, c.policy()) | pack_code(kCastSrcDtype, c.src_dtype()) |
         pack_code(kCastDstDtype, c.dst_dtype()) | pack_code(kCastOutcome, c.outcome()) |
         pack_code(kCastDeviceType, c.device_type()) | pack_code(kCastRole, c.role()) | pack_code(kCastCache, c.cache()) |
         pack_code(kCastMode, c.mode()) | pack_code(kCastPhase, c.phase()) | kCastMakerField.pack(c.maker());
}

inline int64_t pack_cast_codes(const castscope::v1::CastEvent& c) {
  return static_cast<int64_t>(pack_cast_key(c) | pack_code(kCastFlags, (c.shape_truncated() ? kCastFlagShapeTruncated : 0) |
                                                                           (c.round_trip() ? kCastFlagRoundTrip : 0)));
}

// ops.codes (and op_counts.codes, outcome OK: errors are counted apart).
enum OpCode : int {
  kOpPolicy = 0, kOpDeviceType, kOpOutputDtype, kOpOutcome, kOpAutocastDtype, kOpMode, kOpPhase, kOpProbeReason
};
inline constexpr PackedField kOpCodeFields[] = {
    code_field("policy", kOpPolicy),       code_field("device_type", kOpDeviceType),
    code_field("output_dtype", kOpOutputDtype), code_field("outcome", kOpOutcome),
    code_field("autocast_dtype", kOpAutocastDtype), code_field("mode", kOpMode),
    code_field("phase", kOpPhase),         code_field("probe_reason", kOpProbeReason)};

// An op's codes with `outcome` (OpEvent and OpCounts name the other fields alike).
template <typename OpOrCounts>
int64_t pack_op_key(const OpOrCounts& o, int outcome) {
  return static_cast<int64_t>(pack_code(kOpPolicy, o.policy()) | pack_code(kOpDeviceType, o.device_type()) |
                              pack_code(kOpOutputDtype, o.output_dtype()) | pack_code(kOpOutcome, outcome) |
                              pack_code(kOpAutocastDtype, o.autocast_dtype()) | pack_code(kOpMode, o.mode()) |
                              pack_code(kOpPhase, o.phase()) | pack_code(kOpProbeReason, o.probe_reason()));
}

inline int64_t pack_op_codes(const castscope::v1::OpEvent& o) { return pack_op_key(o, o.outcome()); }

// cast_counts.codes and op_counts.codes: a counter's key packed as casts.codes
// and ops.codes, so readers fold them with the same code (no flags; ops'
// outcome OK: errors are counted apart).
inline int64_t pack_cast_counts_codes(const castscope::v1::CastCounts& c) { return static_cast<int64_t>(pack_cast_key(c)); }
inline int64_t pack_op_counts_codes(const castscope::v1::OpCounts& o) {
  return pack_op_key(o, castscope::v1::OP_OUTCOME_OK);
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

// ops.autocast_enabled, op_counts.autocast_enabled: bit d set when
// DeviceType d is enabled. Order is not kept (it is a set).
template <typename OpOrCounts>
int64_t pack_device_mask(const OpOrCounts& op) {
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
// them), one byte each: compute, a_type, b_type, d_type, calls, mixed. 0: the
// op has none (logger off, or no cuBLAS matmul). Each field below
// kGemmFieldLimit (validate_batch checks; batch/event_limits.h).
enum GemmField : int { kGemmCompute = 0, kGemmAType, kGemmBType, kGemmDType, kGemmCalls, kGemmMixed };
inline constexpr PackedField gemm_field_of(std::string_view name, int index) { return {name, 8 * index, 8}; }
inline constexpr PackedField kGemmFields[] = {
    gemm_field_of("gemm_compute", kGemmCompute), gemm_field_of("gemm_a_type", kGemmAType),
    gemm_field_of("gemm_b_type", kGemmBType),    gemm_field_of("gemm_d_type", kGemmDType),
    gemm_field_of("gemm_calls", kGemmCalls),     gemm_field_of("gemm_mixed", kGemmMixed)};
static_assert(kGemmFieldLimit == kGemmFields[0].mask() + 1);

inline constexpr int gemm_field(int64_t packed, int index) {
  return static_cast<int>(kGemmFields[index].unpack(packed));
}
// The description without its counts (calls, mixed): what tells two apart.
inline constexpr int64_t gemm_kind(int64_t packed) {
  return packed & static_cast<int64_t>((uint64_t{1} << kGemmFields[kGemmCalls].shift) - 1);
}

inline int64_t pack_gemm(const castscope::v1::OpEvent& op) {
  if (!op.has_gemm()) return 0;
  const castscope::v1::GemmDescription& g = op.gemm();
  return static_cast<int64_t>(kGemmFields[kGemmCompute].pack(g.compute()) | kGemmFields[kGemmAType].pack(g.a_type()) |
                              kGemmFields[kGemmBType].pack(g.b_type()) | kGemmFields[kGemmDType].pack(g.d_type()) |
                              kGemmFields[kGemmCalls].pack(g.calls()) | kGemmFields[kGemmMixed].pack(g.mixed()));
}

inline void unpack_gemm(int64_t packed, castscope::v1::OpEvent& op) {
  namespace v1 = castscope::v1;
  if (packed == 0) return;
  v1::GemmDescription& g = *op.mutable_gemm();
  g.set_compute(static_cast<v1::GemmCompute>(gemm_field(packed, kGemmCompute)));
  g.set_a_type(static_cast<v1::DType>(gemm_field(packed, kGemmAType)));
  g.set_b_type(static_cast<v1::DType>(gemm_field(packed, kGemmBType)));
  g.set_d_type(static_cast<v1::DType>(gemm_field(packed, kGemmDType)));
  g.set_calls(static_cast<uint32_t>(gemm_field(packed, kGemmCalls)));
  g.set_mixed(gemm_field(packed, kGemmMixed) != 0);
}

// kernels.codes: activity, launched_by.
enum KernelCode : int { kKernelActivity = 0, kKernelLaunchedBy };
inline constexpr PackedField kKernelCodeFields[] = {code_field("activity", kKernelActivity),
                                                     code_field("launched_by", kKernelLaunchedBy)};

inline int64_t pack_kernel_codes(const castscope::v1::KernelEvent& k) {
  return static_cast<int64_t>(pack_code(kKernelActivity, k.activity()) | pack_code(kKernelLaunchedBy, k.launched_by()));
}

// Typed reads of the packed codes columns, so that readers name fields
// instead of indices and casts: CastCodes{row.codes}.src_dtype().
struct CastCodes {  // casts.codes, cast_counts.codes (no flags)
  int64_t packed = 0;
  v1::CastPolicy policy() const { return static_cast<v1::CastPolicy>(code_at(packed, kCastPolicy)); }
  v1::DType src_dtype() const { return static_cast<v1::DType>(code_at(packed, kCastSrcDtype)); }
  v1::DType dst_dtype() const { return static_cast<v1::DType>(code_at(packed, kCastDstDtype)); }
  v1::CastOutcome outcome() const { return static_cast<v1::CastOutcome>(code_at(packed, kCastOutcome)); }
  v1::DeviceType device_type() const { return static_cast<v1::DeviceType>(code_at(packed, kCastDeviceType)); }
  v1::Role role() const { return static_cast<v1::Role>(code_at(packed, kCastRole)); }
  v1::CacheOutcome cache() const { return static_cast<v1::CacheOutcome>(code_at(packed, kCastCache)); }
  v1::ExecutionMode mode() const { return static_cast<v1::ExecutionMode>(code_at(packed, kCastMode)); }
  v1::Phase phase() const { return static_cast<v1::Phase>(code_at(packed, kCastPhase)); }
  bool shape_truncated() const { return (code_at(packed, kCastFlags) & kCastFlagShapeTruncated) != 0; }
  bool round_trip() const { return (code_at(packed, kCastFlags) & kCastFlagRoundTrip) != 0; }
  v1::CastMaker maker() const { return static_cast<v1::CastMaker>(kCastMakerField.unpack(packed)); }
};

struct OpCodes {  // ops.codes, op_counts.codes (outcome OK)
  int64_t packed = 0;
  v1::CastPolicy policy() const { return static_cast<v1::CastPolicy>(code_at(packed, kOpPolicy)); }
  v1::DeviceType device_type() const { return static_cast<v1::DeviceType>(code_at(packed, kOpDeviceType)); }
  v1::DType output_dtype() const { return static_cast<v1::DType>(code_at(packed, kOpOutputDtype)); }
  v1::OpOutcome outcome() const { return static_cast<v1::OpOutcome>(code_at(packed, kOpOutcome)); }
  v1::DType autocast_dtype() const { return static_cast<v1::DType>(code_at(packed, kOpAutocastDtype)); }
  v1::ExecutionMode mode() const { return static_cast<v1::ExecutionMode>(code_at(packed, kOpMode)); }
  v1::Phase phase() const { return static_cast<v1::Phase>(code_at(packed, kOpPhase)); }
  v1::ProbeReason probe_reason() const { return static_cast<v1::ProbeReason>(code_at(packed, kOpProbeReason)); }
};

struct KernelCodes {  // kernels.codes
  int64_t packed = 0;
  v1::GpuActivity activity() const { return static_cast<v1::GpuActivity>(code_at(packed, kKernelActivity)); }
  v1::LaunchedBy launched_by() const { return static_cast<v1::LaunchedBy>(code_at(packed, kKernelLaunchedBy)); }
};

inline void unpack_cast_codes(int64_t packed, castscope::v1::CastEvent& c) {
  const CastCodes codes{packed};
  c.set_policy(codes.policy());
  c.set_src_dtype(codes.src_dtype());
  c.set_dst_dtype(codes.dst_dtype());
  c.set_outcome(codes.outcome());
  c.set_device_type(codes.device_type());
  c.set_role(codes.role());
  c.set_cache(codes.cache());
  c.set_mode(codes.mode());
  c.set_phase(codes.phase());
  c.set_shape_truncated(codes.shape_truncated());
  c.set_round_trip(codes.round_trip());
  c.set_maker(codes.maker());
}

inline void unpack_op_codes(int64_t packed, castscope::v1::OpEvent& o) {
  const OpCodes codes{packed};
  o.set_policy(codes.policy());
  o.set_device_type(codes.device_type());
  o.set_output_dtype(codes.output_dtype());
  o.set_outcome(codes.outcome());
  o.set_autocast_dtype(codes.autocast_dtype());
  o.set_mode(codes.mode());
  o.set_phase(codes.phase());
  o.set_probe_reason(codes.probe_reason());
}

inline void unpack_kernel_codes(int64_t packed, castscope::v1::KernelEvent& k) {
  const KernelCodes codes{packed};
  k.set_activity(codes.activity());
  k.set_launched_by(codes.launched_by());
}

// casts.float8: CastEvent.float8's powers of two, 16 bits each, offset by
// -32768 so that NUMERICS_NO_MAGNITUDE (a zero amax) is 0; 0 in all four:
// no scaling known (casts.float8_zero_amax then 0 too). Its zero_amax is
// the column casts.float8_zero_amax.
enum Float8Field : int { kFloat8ScaleMin = 0, kFloat8ScaleMax, kFloat8AmaxMin, kFloat8AmaxMax };
inline constexpr PackedField float8_field_of(std::string_view name, int index) { return {name, 16 * index, 16, -32768}; }
inline constexpr PackedField kFloat8Fields[] = {
    float8_field_of("scale_log2_min", kFloat8ScaleMin), float8_field_of("scale_log2_max", kFloat8ScaleMax),
    float8_field_of("amax_log2_min", kFloat8AmaxMin), float8_field_of("amax_log2_max", kFloat8AmaxMax)};

inline int64_t pack_float8(const castscope::v1::CastEvent& c) {
  if (!c.has_float8()) return 0;
  const castscope::v1::Float8Scaling& f = c.float8();
  return static_cast<int64_t>(
      kFloat8Fields[kFloat8ScaleMin].pack(f.scale_log2_min()) | kFloat8Fields[kFloat8ScaleMax].pack(f.scale_log2_max()) |
      kFloat8Fields[kFloat8AmaxMin].pack(f.amax_log2_min()) | kFloat8Fields[kFloat8AmaxMax].pack(f.amax_log2_max()));
}

inline int32_t float8_field(int64_t packed, int index) { return static_cast<int32_t>(kFloat8Fields[index].unpack(packed)); }

inline void unpack_float8(int64_t packed, int64_t zero_amax, castscope::v1::CastEvent& c) {
  if (packed == 0 && zero_amax == 0) return;
  castscope::v1::Float8Scaling& f = *c.mutable_float8();
  f.set_scale_log2_min(float8_field(packed, kFloat8ScaleMin));
  f.set_scale_log2_max(float8_field(packed, kFloat8ScaleMax));
  f.set_amax_log2_min(float8_field(packed, kFloat8AmaxMin));
  f.set_amax_log2_max(float8_field(packed, kFloat8AmaxMax));
  f.set_zero_amax(static_cast<uint32_t>(zero_amax));
}

// The packed columns of each table, for the views (store_schema.cc).
struct PackedColumn {
  std::string_view table, column;
  std::span<const PackedField> fields;
};
inline constexpr PackedColumn kPackedColumns[] = {
    {"casts", "slot", kCastSlotFields},
    {"casts", "codes", kCastCodeFields},
    {"ops", "codes", kOpCodeFields},
    {"ops", "gemm", kGemmFields},
    {"casts", "float8", kFloat8Fields},
};

}  // namespace castscope::collector
