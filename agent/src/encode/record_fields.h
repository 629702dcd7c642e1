// The one map from a record (agent/src/record/cast_record.h) to the fields of
// its castscope.v1 message. Both encoders walk it: the batch encoder writes
// the wire format (each field's number and type), the JSON-lines writer
// proto3 JSON (its name and type), both from the generated wire header. A
// field added to events.proto and to the record is written by both from one
// line here (docs/events.md, "One map from a record to its message").
//
// A visitor `v` takes:
//   v.field(WireField, value)          an integer, bool, double, string or record enum
//   v.repeated(WireField, std::span)   integers or record enums (packed on the
//                                      wire), or strings
//   v.lines(WireField, text)           a repeated string, held newline-separated
//   v.name(id field, text field, id, text)
//                                      a name the wire interns into the batch's
//                                      table and JSON writes inline
//   v.location(id field, inline field, id, location)   likewise, a source location
//   v.message(WireField, fn)           a nested message; fn(nested visitor)
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "agent/src/encode/schema_versions.h"
#include "agent/src/record/cast_record.h"
#include "agent/src/record/event_log.h"  // EventLogStats, OpMeta
#include "agent/src/record/location_table.h"
#include "agent/src/record/module_scopes.h"
#include "castscope/v1/events.wire.h"
#include "castscope/v1/transport.wire.h"

namespace castscope::record_fields {

namespace pb = v1::wire;

// The names a record carries, each as an id into the batch's tables (wire)
// and as text (JSON). Which ones apply: see names_of().
struct RecordNames {
  uint32_t op_id = 0;
  std::string_view op;
  uint32_t arg_name_id = 0;
  std::string_view arg_name;
  uint32_t location_id = 0;
  const Location* location = nullptr;
  // Casts: the record's scope (record/module_scopes.h), its module and parameter
  // (the wire sets the ids alone, JSON the texts alone).
  uint32_t module_id = 0;
  std::string_view module;
  uint32_t parameter_id = 0;
  std::string_view parameter;
};

// Which names a record has: a GradScaler update names no op, only a cast's
// numerics an argument; a cache sample has none, a kernel only its name.
struct NamedParts {
  bool op = false;
  bool arg_name = false;
  uint16_t arg_index = 0;
  bool location = false;
};

inline NamedParts names_of(const Record& r) {
  switch (r.kind) {
    case RecordKind::kCast:
      return {true, true, r.cast.arg_index, true};
    case RecordKind::kCastCounts:
      return {true, true, r.counts.key.arg_index, true};
    case RecordKind::kOp:
    case RecordKind::kOpCounts:
      return {true, false, 0, true};
    case RecordKind::kNumerics:
      return {r.numerics.kind != NumericsKind::kScalerUpdate, r.numerics.kind == NumericsKind::kCast,
              r.numerics.arg_index, true};
    case RecordKind::kKernel:
      return {true, false, 0, false};
    case RecordKind::kCacheSample:
      break;
  }
  return {};
}

// The argument's name a record carries (names_of), or an empty string.
inline const std::string& arg_name_of(const NamedParts& parts, const OpMeta& op) {
  static const std::string kNone;
  return parts.arg_name && parts.arg_index < op.arg_names.size() ? op.arg_names[parts.arg_index] : kNone;
}

// Calls each(line) for the lines of newline-separated `text` (a Location's
// stack and also_consumed_at): a repeated string field.
template <typename Each>
void for_each_line(std::string_view text, Each&& each) {
  for (size_t start = 0; start < text.size();) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    each(text.substr(start, end - start));
    start = end + 1;
  }
}

// The record's message as a field of castscope.v1.Event.
inline WireField event_field(const Record& r) {
  switch (r.kind) {
    case RecordKind::kCast:
      return pb::Event::kCast;
    case RecordKind::kOp:
      return pb::Event::kOp;
    case RecordKind::kCacheSample:
      return pb::Event::kCacheSample;
    case RecordKind::kKernel:
      return pb::Event::kKernel;
    case RecordKind::kCastCounts:
      return pb::Event::kCastCounts;
    case RecordKind::kOpCounts:
      return pb::Event::kOpCounts;
    case RecordKind::kNumerics:
      break;
  }
  return pb::Event::kNumerics;
}

// The device types set in a one-bit-per-type mask (OpFields::autocast_enabled).
struct DeviceSet {
  DeviceKind devices[8];
  size_t size = 0;
  explicit DeviceSet(uint8_t mask) {
    for (uint32_t d = 1; d <= static_cast<uint32_t>(pb::DeviceType_MAX); ++d)
      if (mask & (1u << d)) devices[size++] = static_cast<DeviceKind>(d);
  }
  std::span<const DeviceKind> span() const { return {devices, size}; }
};

template <typename V>
void cast_fields(const Record& r, const RecordNames& names, V& v) {
  using F = pb::CastEvent;
  const CastFields& c = r.cast;
  v.field(F::kSeq, r.seq);
  v.field(F::kTsNs, r.ts_ns);
  v.field(F::kThread, r.thread);
  v.field(F::kArgIndex, c.arg_index);
  v.field(F::kListIndex, c.list_index);
  v.field(F::kPolicy, r.policy);
  v.field(F::kSrcDtype, c.src);
  v.field(F::kDstDtype, c.dst);
  v.field(F::kOutcome, c.outcome);
  v.repeated(F::kShape, std::span<const int64_t>(c.shape, c.ndim < kMaxShapeDims ? c.ndim : kMaxShapeDims));
  v.field(F::kShapeTruncated, c.ndim > kMaxShapeDims);
  v.field(F::kBytes, c.bytes);
  v.field(F::kDeviceType, r.device);
  v.field(F::kOpSeq, c.float8_scaled ? uint64_t{0} : c.op_seq);
  v.field(F::kRole, c.role);
  v.field(F::kCache, c.cache);
  v.field(F::kSourceVersion, c.source_version);
  v.field(F::kCachedVersion, c.cached_version);
  v.field(F::kMode, c.mode);
  v.field(F::kPhase, c.phase);
  v.name(F::kOpId, F::kOp, names.op_id, names.op);
  v.name(F::kArgNameId, F::kArgName, names.arg_name_id, names.arg_name);
  v.location(F::kLocationId, F::kLocation, names.location_id, *names.location);
  v.field(F::kRoundTrip, c.round_trip);
  v.field(F::kMaker, c.maker);
  // A cast in a module call (the wire has its id, JSON its text); none outside one.
  if (names.module_id != 0 || !names.module.empty()) v.name(F::kModuleId, F::kModule, names.module_id, names.module);
  if (names.parameter_id != 0 || !names.parameter.empty())
    v.name(F::kParameterId, F::kParameter, names.parameter_id, names.parameter);
  if (c.float8_scaled) {
    v.message(F::kFloat8, [&](auto& float8) {
      using S = pb::Float8Scaling;
      float8.field(S::kScaleLog2Min, int32_t{c.float8_log2[kScaleLog2Min]});
      float8.field(S::kScaleLog2Max, int32_t{c.float8_log2[kScaleLog2Max]});
      float8.field(S::kAmaxLog2Min, int32_t{c.float8_log2[kAmaxLog2Min]});
      float8.field(S::kAmaxLog2Max, int32_t{c.float8_log2[kAmaxLog2Max]});
      float8.field(S::kZeroAmax, uint32_t{c.zero_amax});
    });
  }
}

template <typename V>
void op_fields(const Record& r, const RecordNames& names, V& v) {
  using F = pb::OpEvent;
  const OpFields& op = r.op;
  v.field(F::kSeq, r.seq);
  v.field(F::kTsNs, r.ts_ns);
  v.field(F::kThread, r.thread);
  v.field(F::kPolicy, r.policy);
  v.field(F::kDeviceType, r.device);
  v.repeated(F::kInputDtypes,
             std::span<const DType>(op.input_dtypes, op.num_inputs < kMaxOpInputDtypes ? op.num_inputs : kMaxOpInputDtypes));
  v.field(F::kOutputDtype, op.output);
  v.field(F::kCpuDurationNs, op.cpu_duration_ns);
  v.field(F::kOutcome, op.ok ? v1::enums::OpOutcome::kOk : v1::enums::OpOutcome::kError);
  v.field(F::kAutocastDtype, op.autocast_dtype);
  v.field(F::kMode, op.mode);
  v.field(F::kPhase, op.phase);
  v.repeated(F::kAutocastEnabled, DeviceSet(op.autocast_enabled).span());
  v.field(F::kAutocastNesting, op.autocast_nesting);
  v.name(F::kOpId, F::kOp, names.op_id, names.op);
  v.location(F::kLocationId, F::kLocation, names.location_id, *names.location);
  v.field(F::kProbeReason, op.probe);
  if (op.gemm_calls > 0) {
    v.message(F::kGemm, [&](auto& gemm) {
      using G = pb::GemmDescription;
      gemm.field(G::kCompute, op.gemm_compute);
      gemm.field(G::kAType, op.gemm_a);
      gemm.field(G::kBType, op.gemm_b);
      gemm.field(G::kDType, op.gemm_d);
      gemm.field(G::kCalls, op.gemm_calls);
      gemm.field(G::kMixed, op.gemm_mixed);
    });
  }
}

template <typename V>
void cast_counts_fields(const Record& r, const RecordNames& names, V& v) {
  using F = pb::CastCounts;
  const CountFields& c = r.counts;
  v.field(F::kSeq, r.seq);
  v.field(F::kFirstTsNs, c.first_ts_ns);
  v.field(F::kLastTsNs, c.last_ts_ns);
  v.field(F::kThread, c.key.thread);
  v.name(F::kOpId, F::kOp, names.op_id, names.op);
  v.name(F::kArgNameId, F::kArgName, names.arg_name_id, names.arg_name);
  v.location(F::kLocationId, F::kLocation, names.location_id, *names.location);
  v.field(F::kArgIndex, c.key.arg_index);
  v.field(F::kPolicy, c.key.policy);
  v.field(F::kDeviceType, c.key.device);
  v.field(F::kSrcDtype, c.key.src);
  v.field(F::kDstDtype, c.key.dst);
  v.field(F::kOutcome, c.key.outcome);
  v.field(F::kRole, c.key.role);
  v.field(F::kCache, c.key.cache);
  v.field(F::kMode, c.key.mode);
  v.field(F::kPhase, c.key.phase);
  v.field(F::kCount, c.count);
  v.field(F::kBytes, c.sum);
  v.field(F::kIteration, c.iteration);
  v.field(F::kMaxVersionGap, c.max_version_gap);
  v.field(F::kMaker, c.key.maker);
  v.field(F::kRoundTrips, c.extra);
}

// An op counter's key keeps the output dtype in `src` and the region's
// lower-precision dtype in `dst` (CounterKey).
template <typename V>
void op_counts_fields(const Record& r, const RecordNames& names, V& v) {
  using F = pb::OpCounts;
  const CountFields& c = r.counts;
  v.field(F::kSeq, r.seq);
  v.field(F::kFirstTsNs, c.first_ts_ns);
  v.field(F::kLastTsNs, c.last_ts_ns);
  v.field(F::kThread, c.key.thread);
  v.name(F::kOpId, F::kOp, names.op_id, names.op);
  v.location(F::kLocationId, F::kLocation, names.location_id, *names.location);
  v.field(F::kPolicy, c.key.policy);
  v.field(F::kDeviceType, c.key.device);
  v.field(F::kMode, c.key.mode);
  v.field(F::kPhase, c.key.phase);
  v.field(F::kOutputDtype, c.key.src);
  v.field(F::kAutocastDtype, c.key.dst);
  v.repeated(F::kAutocastEnabled, DeviceSet(c.key.autocast_enabled).span());
  v.field(F::kProbeReason, c.key.probe);
  v.field(F::kCalls, c.count);
  v.field(F::kErrors, c.extra);
  v.field(F::kCpuDurationNs, c.sum);
  v.field(F::kIteration, c.iteration);
}

template <typename V>
void kernel_fields(const Record& r, const RecordNames& names, V& v) {
  using F = pb::KernelEvent;
  const KernelFields& k = r.kernel;
  v.field(F::kSeq, r.seq);
  v.field(F::kTsNs, r.ts_ns);
  v.field(F::kDurationNs, k.duration_ns);
  v.field(F::kActivity, k.activity);
  v.field(F::kDevice, k.device);
  v.field(F::kStream, k.stream);
  v.field(F::kLaunchedBy, k.launched_by);
  v.field(F::kLaunchSeq, k.launch_seq);
  v.field(F::kBytes, k.bytes);
  v.field(F::kCorrelationId, k.correlation_id);
  v.name(F::kNameId, F::kName, names.op_id, names.op);
}

template <typename V>
void cache_sample_fields(const Record& r, V& v) {
  using F = pb::CacheSample;
  const CacheSampleFields& s = r.sample;
  v.field(F::kSeq, r.seq);
  v.field(F::kTsNs, r.ts_ns);
  v.field(F::kTrigger, s.trigger);
  v.field(F::kIteration, s.iteration);
  v.field(F::kLiveCasts, s.live_casts);
  v.field(F::kLiveBytes, s.live_bytes);
  v.field(F::kOrphanedCasts, s.orphaned_casts);
  v.field(F::kOrphanedBytes, s.orphaned_bytes);
  v.field(F::kCacheHits, s.cache_hits);
  v.field(F::kReleasedCasts, s.released_casts);
}

template <typename V>
void numerics_fields(const Record& r, const RecordNames& names, V& v) {
  using F = pb::NumericsSummary;
  const NumericsFields& n = r.numerics;
  v.field(F::kSeq, r.seq);
  v.field(F::kFirstTsNs, r.ts_ns);
  v.field(F::kLastTsNs, n.last_ts_ns);
  v.field(F::kKind, n.kind);
  v.field(F::kThread, r.thread);
  v.name(F::kOpId, F::kOp, names.op_id, names.op);
  v.name(F::kArgNameId, F::kArgName, names.arg_name_id, names.arg_name);
  v.location(F::kLocationId, F::kLocation, names.location_id, *names.location);
  v.field(F::kArgIndex, n.arg_index);
  v.field(F::kDeviceType, r.device);
  v.field(F::kSrcDtype, n.src);
  v.field(F::kDstDtype, n.dst);
  v.field(F::kMode, n.mode);
  v.field(F::kPhase, n.phase);
  v.field(F::kIteration, n.iteration);
  v.field(F::kTensors, n.tensors);
  v.field(F::kValues, n.values);
  v.field(F::kOverflowed, n.overflowed);
  v.field(F::kUnderflowed, n.underflowed);
  v.field(F::kNonfinite, n.nonfinite);
  v.field(F::kNan, n.nan);
  v.field(F::kMaxAbsLog2, n.max_abs_log2);
  v.field(F::kFirstNonfiniteSeq, n.first_nonfinite_seq);
  const bool update = n.kind == NumericsKind::kScalerUpdate;
  v.field(F::kScale, update ? n.scale : 0.0);
  v.field(F::kFoundInf, n.found_inf);
  v.field(F::kSaturated, update ? uint64_t{0} : n.saturated);
}

// Every field of `r`'s message, in the message's order on the wire.
template <typename V>
void record_fields(const Record& r, const RecordNames& names, V& v) {
  switch (r.kind) {
    case RecordKind::kCast:
      return cast_fields(r, names, v);
    case RecordKind::kOp:
      return op_fields(r, names, v);
    case RecordKind::kCastCounts:
      return cast_counts_fields(r, names, v);
    case RecordKind::kOpCounts:
      return op_counts_fields(r, names, v);
    case RecordKind::kKernel:
      return kernel_fields(r, names, v);
    case RecordKind::kCacheSample:
      return cache_sample_fields(r, v);
    case RecordKind::kNumerics:
      return numerics_fields(r, names, v);
  }
}

// castscope.v1.AgentStats: the event log's counts and who is recording.
struct StatsValues {
  const EventLogStats& stats;
  uint64_t ts_ns;
  std::string_view gpu_timing;
  uint32_t pid;
  std::string_view torch_version;
  int32_t rank, local_rank, world_size;
};

template <typename V>
void stats_fields(const StatsValues& s, V& v) {
  using F = pb::AgentStats;
  v.field(F::kSchemaVersion, static_cast<v1::enums::SchemaVersion>(kSchemaVersion));
  v.field(F::kEventsRecorded, s.stats.recorded);
  v.field(F::kEventsDropped, s.stats.dropped);
  v.field(F::kInternalErrors, s.stats.internal_errors);
  v.field(F::kPid, s.pid);
  v.field(F::kTorchVersion, s.torch_version);
  v.field(F::kTsNs, s.ts_ns);
  v.field(F::kRank, s.rank);
  v.field(F::kLocalRank, s.local_rank);
  v.field(F::kWorldSize, s.world_size);
  v.field(F::kGpuTiming, s.gpu_timing);
  v.field(F::kGpuRecordsDropped, s.stats.gpu_records_dropped);
  v.repeated(F::kOverlayErrors, std::span<const std::string>(s.stats.overlay_errors));
}

// castscope.v1.AgentIdentity, from batch_encoder.h's AgentIdentity.
template <typename Identity, typename V>
void identity_fields(const Identity& id, V& v) {
  using F = pb::AgentIdentity;
  v.field(F::kRunId, std::string_view(id.run_id));
  v.field(F::kAgentId, std::string_view(id.agent_id));
  v.field(F::kPid, id.pid);
  v.field(F::kRank, id.rank);
  v.field(F::kLocalRank, id.local_rank);
  v.field(F::kWorldSize, id.world_size);
  v.field(F::kHostname, std::string_view(id.hostname));
  v.field(F::kTorchVersion, std::string_view(id.torch_version));
  v.field(F::kCommand, std::string_view(id.command));
  v.field(F::kPolicyHash, std::string_view(id.policy_hash));
  v.repeated(F::kPolicyFiles, std::span<const std::string>(id.policy_files));
  v.field(F::kCastscopeVersion, std::string_view(id.castscope_version));
  v.field(F::kAggregate, id.aggregate);
}

// castscope.v1.SourceLocation; stack and also_consumed_at are held as lines.
template <typename V>
void location_fields(const Location& l, V& v) {
  using F = pb::SourceLocation;
  v.field(F::kKind, l.kind);
  v.field(F::kFile, std::string_view(l.file));
  v.field(F::kLine, l.line);
  v.field(F::kFunction, std::string_view(l.function));
  v.lines(F::kStack, l.stack);
  v.field(F::kInsideDisabledAutocast, l.inside_disabled_autocast);
  v.lines(F::kAlsoConsumedAt, l.also_consumed_at);
  v.field(F::kSourceText, std::string_view(l.source_text));
}

}  // namespace castscope::record_fields
