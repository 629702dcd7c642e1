// Fixed-size records the hot path writes into per-thread rings.
//
// Strings never appear here: ops are interned at registration (OpTable), and
// enums are proto/castscope/v1/events.proto's, generated with the same values
// so the exporter maps them without tables.
#pragma once

#include <cstddef>
#include <cstdint>

#include "castscope/v1/events.enums.h"
#include "common/numerics/no_magnitude.h"

namespace castscope {

// The schema's enums, generated from events.proto (castscope/v1/events.enums.h):
// a record holds the wire value, so the encoder writes it without a table.
using CastPolicy = v1::enums::CastPolicy;
using DType = v1::enums::DType;
using DeviceKind = v1::enums::DeviceType;  // not DeviceType: c10 has one
using CastOutcome = v1::enums::CastOutcome;
using Role = v1::enums::Role;
using CacheOutcome = v1::enums::CacheOutcome;
using ExecutionMode = v1::enums::ExecutionMode;
using Phase = v1::enums::Phase;
using SampleTrigger = v1::enums::CacheSample_Trigger;
using ProbeReason = v1::enums::ProbeReason;
using GpuActivity = v1::enums::GpuActivity;
using LaunchedBy = v1::enums::LaunchedBy;
using GemmCompute = v1::enums::GemmCompute;  // cuBLASLt's compute type of a matmul
using NumericsKind = v1::enums::NumericsSummary_Kind;
using CastMaker = v1::enums::CastMaker;

// The agent's own policy, no wire value: castscope leaves the native kernel in
// place, so no record carries it. Far above the schema's values so that a
// policy added to the .proto cannot alias it.
inline constexpr CastPolicy kKeepNativePolicy = static_cast<CastPolicy>(100);
static_assert(kKeepNativePolicy > v1::enums::CastPolicy_MAX && v1::enums::proto_name(kKeepNativePolicy).empty());

// OpFields::autocast_enabled holds one bit per device type in a uint8_t.
static_assert(static_cast<int>(v1::enums::DeviceType_MAX) < 8);

// OpFields::ok is OP_OUTCOME_OK or OP_OUTCOME_ERROR on the wire; a third
// outcome would need a record field.
static_assert(v1::enums::OpOutcome_MAX == v1::enums::OpOutcome::kError);

// kCastCounts / kOpCounts: aggregate mode's counters (cast_counters.h),
// flushed as records; never written by the hot path itself.
// kNumerics: a numerics window's counts at one site, or a GradScaler update
// (agent/src/numerics); written at the window's end or at the update.
enum class RecordKind : uint8_t {
  kCast = 1,
  kOp = 2,
  kCacheSample = 3,
  kKernel = 4,
  kCastCounts = 5,
  kOpCounts = 6,
  kNumerics = 7
};

inline constexpr int kMaxShapeDims = 6;
inline constexpr int kMaxOpInputDtypes = 8;

// CastFields::float8_log2's elements (events.proto Float8Scaling).
enum Float8Log2 : int { kScaleLog2Min, kScaleLog2Max, kAmaxLog2Min, kAmaxLog2Max };

struct CastFields {
  union {
    uint64_t op_seq;
    // A conversion to float8 made with its maker's scale (float8_scaled; no
    // op of castscope's owns it, op_seq would be 0): floor(log2) of its
    // scale's and amax's extremes (nonzero amaxes), indexed by Float8Log2;
    // kNoMagnitude: none (every amax zero).
    int16_t float8_log2[4];
  };
  uint64_t bytes;
  int64_t shape[kMaxShapeDims];
  uint32_t source_version;  // c10's version counters are 32-bit
  uint32_t cached_version;
  uint32_t location;  // LocationTable id, shared with the op
  uint16_t arg_index;
  int16_t list_index;  // -1: not an element of a list
  DType src;
  DType dst;
  CastOutcome outcome;
  uint8_t ndim;  // may exceed kMaxShapeDims: then the shape is truncated
  Role role;
  CacheOutcome cache;
  ExecutionMode mode;
  Phase phase;
  bool round_trip;
  CastMaker maker;
  bool float8_scaled;
  uint16_t zero_amax;  // float8_scaled: scale elements whose amax was zero (saturates)
};

struct OpFields {
  uint64_t cpu_duration_ns;
  uint32_t location;
  DType input_dtypes[kMaxOpInputDtypes];
  uint8_t num_inputs;
  DType output;
  DType autocast_dtype;
  bool ok;
  ExecutionMode mode;
  Phase phase;
  uint8_t autocast_enabled;  // bit (1 << DeviceKind) per device type with autocast on
  uint8_t autocast_nesting;  // saturates at 255
  ProbeReason probe;
  // The op's matmuls as cuBLASLt's logger described them (gemm_calls 0: none
  // seen, or the logger is off); agent/src/gpu/cublaslt_logger.h.
  GemmCompute gemm_compute;
  DType gemm_a, gemm_b, gemm_d;
  uint8_t gemm_calls;  // saturates at 255
  bool gemm_mixed;     // a later matmul had another compute type or A type
};

struct CacheSampleFields {
  uint64_t iteration;
  uint64_t live_casts;
  uint64_t live_bytes;
  uint64_t orphaned_casts;  // of the live ones, those whose source is gone
  uint64_t orphaned_bytes;
  uint64_t cache_hits;      // since the start
  uint64_t released_casts;  // since the start
  SampleTrigger trigger;
};

// A GPU activity (agent/src/gpu). The record's ts_ns is its start on the
// GPU in the agent's clock, op_id its interned name, thread the recording
// (CUPTI buffer) thread.
struct KernelFields {
  uint64_t duration_ns;
  uint64_t launch_seq;  // the cast or op record it was launched under; 0: none
  uint64_t bytes;       // memcpy / memset
  uint32_t correlation_id;
  uint32_t stream;
  uint32_t device;
  GpuActivity activity;
  LaunchedBy launched_by;
};

// What makes two events one counter in aggregate mode: every field a report
// groups sites by. Casts use all of it but probe; ops leave arg_index, outcome, role
// and cache at 0 and keep their output dtype in `src` and the region's
// lower-precision dtype in `dst`. No implicit padding, so keys compare
// bytewise.
struct CounterKey {
  uint32_t op_id;
  uint32_t location;
  uint32_t thread;
  uint16_t arg_index;
  RecordKind kind;  // kCast or kOp: what was folded
  CastPolicy policy;
  DeviceKind device;
  ExecutionMode mode;
  Phase phase;
  DType src;
  DType dst;
  CastOutcome outcome;
  Role role;
  CacheOutcome cache;
  union {
    uint8_t autocast_enabled;  // ops: OpFields::autocast_enabled
    CastMaker maker;           // casts: CastFields::maker
  };
  ProbeReason probe;  // ops
};
static_assert(sizeof(CounterKey) == 28, "CounterKey must have no padding: keys compare bytewise");

// A numerics window's counts at one site (events.proto NumericsSummary).
// The record's op_id, device and thread are the site's; ts_ns its first check.
struct NumericsFields {
  uint64_t tensors;
  uint64_t values;
  uint64_t overflowed;
  uint64_t underflowed;
  uint64_t nonfinite;
  uint64_t nan;
  uint64_t first_nonfinite_seq;
  uint64_t iteration;
  uint64_t last_ts_ns;
  union {
    double scale;        // scaler updates
    uint64_t saturated;  // casts (to float8): values clipped to the format's largest
  };
  uint32_t location;
  uint16_t arg_index;
  int16_t max_abs_log2;  // kNoMagnitude: none
  NumericsKind kind;
  DType src;
  DType dst;
  ExecutionMode mode;
  Phase phase;
  bool found_inf;  // scaler updates
};

// One counter: the events of one key between two flushes.
struct CountFields {
  CounterKey key;
  uint32_t reserved;  // keeps the sums 8-byte aligned; 0
  uint64_t count;     // events folded
  uint64_t sum;       // casts: source bytes; ops: CPU ns
  uint64_t first_ts_ns;
  uint64_t last_ts_ns;
  uint64_t iteration;       // optimizer steps seen at the first event
  uint64_t extra;           // casts: round trips; ops: calls that raised
  int64_t max_version_gap;  // stale hits: source_version - cached_version, the largest
};

// 128 bytes: two cache lines, no pointers, trivially copyable.
struct Record {
  uint64_t seq;
  uint64_t ts_ns;
  uint32_t op_id;
  uint32_t thread;  // castscope's id of the recording thread, unique per process
  RecordKind kind;
  CastPolicy policy;
  DeviceKind device;
  // Casts and ops: the innermost nn.Module the event happened in, or the
  // parameter a cast's source is (ModuleScopes, record/module_scopes.h); 0: none.
  uint32_t scope;
  union {
    CastFields cast;
    OpFields op;
    CacheSampleFields sample;
    KernelFields kernel;
    CountFields counts;
    NumericsFields numerics;
  };
};

static_assert(sizeof(Record) <= 128, "Record must stay within two cache lines");
static_assert(offsetof(Record, cast) == 32, "scope sits in the header's padding");

}  // namespace castscope
