#include "agent/src/encode/batch_encoder.h"

#include "castscope/v1/events.wire.h"
#include "castscope/v1/transport.wire.h"

namespace castscope {
namespace {

// Field numbers and enum values of proto/castscope/v1/{events,transport}.proto,
// generated (docs/events.md, "The wire header"). Record enums are generated
// from the same .proto (castscope/v1/events.enums.h), so they are written as
// they are.
namespace pb = v1::wire;

constexpr uint64_t kArgNameKey = uint64_t{1} << 63;

void encode_identity(const AgentIdentity& id, wire::Writer& out) {
  using F = pb::AgentIdentity;
  out.bytes(F::kRunId, id.run_id);
  out.bytes(F::kAgentId, id.agent_id);
  out.u64(F::kPid, id.pid);
  out.i64(F::kRank, id.rank);
  out.i64(F::kLocalRank, id.local_rank);
  out.i64(F::kWorldSize, id.world_size);
  out.bytes(F::kHostname, id.hostname);
  out.bytes(F::kTorchVersion, id.torch_version);
  out.bytes(F::kCommand, id.command);
  out.bytes(F::kPolicyHash, id.policy_hash);
  for (const auto& file : id.policy_files) out.bytes(F::kPolicyFiles, file);
  out.bytes(F::kCastscopeVersion, id.castscope_version);
  out.boolean(F::kAggregate, id.aggregate);
}

void encode_cast(const Record& record, uint32_t op_string, uint32_t arg_string, uint32_t location_id, wire::Writer& out,
                 wire::Writer& packed) {
  // In a batch, op, arg_name and location travel as ids into the batch's tables.
  using F = pb::CastEvent;
  const CastFields& cast = record.cast;
  out.u64(F::kSeq, record.seq);
  out.u64(F::kTsNs, record.ts_ns);
  out.u64(F::kThread, record.thread);
  out.u64(F::kArgIndex, cast.arg_index);
  out.i64(F::kListIndex, cast.list_index);
  out.u64(F::kPolicy, static_cast<uint64_t>(record.policy));
  out.u64(F::kSrcDtype, static_cast<uint64_t>(cast.src));
  out.u64(F::kDstDtype, static_cast<uint64_t>(cast.dst));
  out.u64(F::kOutcome, static_cast<uint64_t>(cast.outcome));
  packed.clear();
  const int dims = cast.ndim < kMaxShapeDims ? cast.ndim : kMaxShapeDims;
  for (int i = 0; i < dims; ++i) packed.varint(static_cast<uint64_t>(cast.shape[i]));
  out.packed(F::kShape, packed.data());
  out.boolean(F::kShapeTruncated, cast.ndim > kMaxShapeDims);
  out.u64(F::kBytes, cast.bytes);
  out.u64(F::kDeviceType, static_cast<uint64_t>(record.device));
  out.u64(F::kOpSeq, cast.op_seq);
  out.u64(F::kRole, static_cast<uint64_t>(cast.role));
  out.u64(F::kCache, static_cast<uint64_t>(cast.cache));
  out.i64(F::kSourceVersion, cast.source_version);
  out.i64(F::kCachedVersion, cast.cached_version);
  out.u64(F::kMode, static_cast<uint64_t>(cast.mode));
  out.u64(F::kPhase, static_cast<uint64_t>(cast.phase));
  out.u64(F::kOpId, op_string);
  out.u64(F::kArgNameId, arg_string);
  out.u64(F::kLocationId, location_id);
  out.boolean(F::kRoundTrip, cast.round_trip);
}

void encode_op(const Record& record, uint32_t op_string, uint32_t location_id, wire::Writer& out, wire::Writer& packed) {
  using F = pb::OpEvent;
  const OpFields& op = record.op;
  out.u64(F::kSeq, record.seq);
  out.u64(F::kTsNs, record.ts_ns);
  out.u64(F::kThread, record.thread);
  out.u64(F::kPolicy, static_cast<uint64_t>(record.policy));
  out.u64(F::kDeviceType, static_cast<uint64_t>(record.device));
  packed.clear();
  for (int i = 0; i < op.num_inputs && i < kMaxOpInputDtypes; ++i) packed.varint(static_cast<uint64_t>(op.input_dtypes[i]));
  out.packed(F::kInputDtypes, packed.data());
  out.u64(F::kOutputDtype, static_cast<uint64_t>(op.output));
  out.u64(F::kCpuDurationNs, op.cpu_duration_ns);
  out.u64(F::kOutcome, op.ok ? pb::OP_OUTCOME_OK : pb::OP_OUTCOME_ERROR);
  out.u64(F::kAutocastDtype, static_cast<uint64_t>(op.autocast_dtype));
  out.u64(F::kMode, static_cast<uint64_t>(op.mode));
  out.u64(F::kPhase, static_cast<uint64_t>(op.phase));
  packed.clear();
  for (uint32_t d = 1; d <= static_cast<uint32_t>(pb::DeviceType_MAX); ++d)
    if (op.autocast_enabled & (1u << d)) packed.varint(d);
  out.packed(F::kAutocastEnabled, packed.data());
  out.u64(F::kAutocastNesting, op.autocast_nesting);
  out.u64(F::kOpId, op_string);
  out.u64(F::kLocationId, location_id);
  out.u64(F::kProbeReason, static_cast<uint64_t>(op.probe));
  if (op.gemm_calls > 0) {
    using G = pb::GemmDescription;
    packed.clear();
    packed.u64(G::kCompute, static_cast<uint64_t>(op.gemm_compute));
    packed.u64(G::kAType, static_cast<uint64_t>(op.gemm_a));
    packed.u64(G::kBType, static_cast<uint64_t>(op.gemm_b));
    packed.u64(G::kDType, static_cast<uint64_t>(op.gemm_d));
    packed.u64(G::kCalls, op.gemm_calls);
    packed.boolean(G::kMixed, op.gemm_mixed);
    out.message(F::kGemm, packed.data());
  }
}

void encode_cast_counts(const Record& record, uint32_t op_string, uint32_t arg_string, uint32_t location_id,
                        wire::Writer& out) {
  using F = pb::CastCounts;
  const CountFields& c = record.counts;
  out.u64(F::kSeq, record.seq);
  out.u64(F::kFirstTsNs, c.first_ts_ns);
  out.u64(F::kLastTsNs, c.last_ts_ns);
  out.u64(F::kThread, c.key.thread);
  out.u64(F::kOpId, op_string);
  out.u64(F::kArgNameId, arg_string);
  out.u64(F::kLocationId, location_id);
  out.u64(F::kArgIndex, c.key.arg_index);
  out.u64(F::kPolicy, static_cast<uint64_t>(c.key.policy));
  out.u64(F::kDeviceType, static_cast<uint64_t>(c.key.device));
  out.u64(F::kSrcDtype, static_cast<uint64_t>(c.key.src));
  out.u64(F::kDstDtype, static_cast<uint64_t>(c.key.dst));
  out.u64(F::kOutcome, static_cast<uint64_t>(c.key.outcome));
  out.u64(F::kRole, static_cast<uint64_t>(c.key.role));
  out.u64(F::kCache, static_cast<uint64_t>(c.key.cache));
  out.u64(F::kMode, static_cast<uint64_t>(c.key.mode));
  out.u64(F::kPhase, static_cast<uint64_t>(c.key.phase));
  out.u64(F::kCount, c.count);
  out.u64(F::kBytes, c.sum);
  out.u64(F::kIteration, c.iteration);
  out.i64(F::kMaxVersionGap, c.max_version_gap);
  out.u64(F::kRoundTrips, c.extra);
}

void encode_op_counts(const Record& record, uint32_t op_string, uint32_t location_id, wire::Writer& out,
                      wire::Writer& packed) {
  using F = pb::OpCounts;
  const CountFields& c = record.counts;
  out.u64(F::kSeq, record.seq);
  out.u64(F::kFirstTsNs, c.first_ts_ns);
  out.u64(F::kLastTsNs, c.last_ts_ns);
  out.u64(F::kThread, c.key.thread);
  out.u64(F::kOpId, op_string);
  out.u64(F::kLocationId, location_id);
  out.u64(F::kPolicy, static_cast<uint64_t>(c.key.policy));
  out.u64(F::kDeviceType, static_cast<uint64_t>(c.key.device));
  out.u64(F::kMode, static_cast<uint64_t>(c.key.mode));
  out.u64(F::kPhase, static_cast<uint64_t>(c.key.phase));
  out.u64(F::kOutputDtype, static_cast<uint64_t>(c.key.src));
  out.u64(F::kAutocastDtype, static_cast<uint64_t>(c.key.dst));
  packed.clear();
  for (uint32_t d = 1; d <= static_cast<uint32_t>(pb::DeviceType_MAX); ++d)
    if (c.key.autocast_enabled & (1u << d)) packed.varint(d);
  out.packed(F::kAutocastEnabled, packed.data());
  out.u64(F::kProbeReason, static_cast<uint64_t>(c.key.probe));
  out.u64(F::kCalls, c.count);
  out.u64(F::kErrors, c.extra);
  out.u64(F::kCpuDurationNs, c.sum);
  out.u64(F::kIteration, c.iteration);
}

void encode_kernel(const Record& record, uint32_t name_string, wire::Writer& out) {
  using F = pb::KernelEvent;
  const KernelFields& kernel = record.kernel;
  out.u64(F::kSeq, record.seq);
  out.u64(F::kTsNs, record.ts_ns);
  out.u64(F::kDurationNs, kernel.duration_ns);
  out.u64(F::kActivity, static_cast<uint64_t>(kernel.activity));
  out.u64(F::kDevice, kernel.device);
  out.u64(F::kStream, kernel.stream);
  out.u64(F::kLaunchedBy, static_cast<uint64_t>(kernel.launched_by));
  out.u64(F::kLaunchSeq, kernel.launch_seq);
  out.u64(F::kBytes, kernel.bytes);
  out.u64(F::kCorrelationId, kernel.correlation_id);
  out.u64(F::kNameId, name_string);
}

void encode_cache_sample(const Record& record, wire::Writer& out) {
  using F = pb::CacheSample;
  out.u64(F::kSeq, record.seq);
  out.u64(F::kTsNs, record.ts_ns);
  out.u64(F::kTrigger, static_cast<uint64_t>(record.sample.trigger));
  out.u64(F::kIteration, record.sample.iteration);
  out.u64(F::kLiveCasts, record.sample.live_casts);
  out.u64(F::kLiveBytes, record.sample.live_bytes);
  out.u64(F::kOrphanedCasts, record.sample.orphaned_casts);
  out.u64(F::kOrphanedBytes, record.sample.orphaned_bytes);
  out.u64(F::kCacheHits, record.sample.cache_hits);
  out.u64(F::kReleasedCasts, record.sample.released_casts);
}

void encode_numerics(const Record& record, uint32_t op_string, uint32_t arg_string, uint32_t location_id,
                     wire::Writer& out) {
  using F = pb::NumericsSummary;
  const NumericsFields& n = record.numerics;
  out.u64(F::kSeq, record.seq);
  out.u64(F::kFirstTsNs, record.ts_ns);
  out.u64(F::kLastTsNs, n.last_ts_ns);
  out.u64(F::kKind, static_cast<uint64_t>(n.kind));
  out.u64(F::kThread, record.thread);
  out.u64(F::kOpId, op_string);
  out.u64(F::kArgNameId, arg_string);
  out.u64(F::kLocationId, location_id);
  out.u64(F::kArgIndex, n.arg_index);
  out.u64(F::kDeviceType, static_cast<uint64_t>(record.device));
  out.u64(F::kSrcDtype, static_cast<uint64_t>(n.src));
  out.u64(F::kDstDtype, static_cast<uint64_t>(n.dst));
  out.u64(F::kMode, static_cast<uint64_t>(n.mode));
  out.u64(F::kPhase, static_cast<uint64_t>(n.phase));
  out.u64(F::kIteration, n.iteration);
  out.u64(F::kTensors, n.tensors);
  out.u64(F::kValues, n.values);
  out.u64(F::kOverflowed, n.overflowed);
  out.u64(F::kUnderflowed, n.underflowed);
  out.u64(F::kNonfinite, n.nonfinite);
  out.u64(F::kNan, n.nan);
  out.s32(F::kMaxAbsLog2, n.max_abs_log2);
  out.u64(F::kFirstNonfiniteSeq, n.first_nonfinite_seq);
  out.f64(F::kScale, n.scale);
  out.boolean(F::kFoundInf, n.found_inf);
}

}  // namespace

uint32_t BatchEncoder::intern_string(uint64_t key, const std::string& text) {
  auto [it, inserted] = string_ids_.try_emplace(key, static_cast<uint32_t>(string_ids_.size() + 1));
  if (inserted) {
    nested_.clear();
    nested_.u64(pb::InternedString::kId, it->second);
    nested_.bytes(pb::InternedString::kText, text);
    tables_.message(pb::Batch::kStrings, nested_.data());
  }
  return it->second;
}

void BatchEncoder::define_location(uint32_t id, const Location& location) {
  if (id == 0 || !locations_defined_.insert(id).second) return;
  using F = pb::SourceLocation;
  wire::Writer source;
  source.u64(F::kKind, static_cast<uint64_t>(location.kind));
  source.bytes(F::kFile, location.file);
  source.u64(F::kLine, location.line);
  source.bytes(F::kFunction, location.function);
  for (size_t start = 0; start < location.stack.size();) {
    size_t end = location.stack.find('\n', start);
    if (end == std::string::npos) end = location.stack.size();
    source.bytes(F::kStack, std::string_view(location.stack).substr(start, end - start));
    start = end + 1;
  }
  source.boolean(F::kInsideDisabledAutocast, location.inside_disabled_autocast);
  for (size_t start = 0; start < location.also_consumed_at.size();) {
    size_t end = location.also_consumed_at.find('\n', start);
    if (end == std::string::npos) end = location.also_consumed_at.size();
    source.bytes(F::kAlsoConsumedAt, std::string_view(location.also_consumed_at).substr(start, end - start));
    start = end + 1;
  }
  if (!location.source_text.empty()) source.bytes(F::kSourceText, location.source_text);
  nested_.clear();
  nested_.u64(pb::InternedLocation::kId, id);
  nested_.message(pb::InternedLocation::kLocation, source.data());
  tables_.message(pb::Batch::kLocations, nested_.data());
}

void BatchEncoder::append_event(uint32_t kind_field, const wire::Writer& message) {
  event_.clear();
  event_.message(kind_field, message.data());
  body_.message(pb::Batch::kEvents, event_.data());
  ++events_;
}

void BatchEncoder::add(const Record& record, const OpMeta& op, uint32_t location_id, const Location& location) {
  scratch_.clear();
  if (record.kind == RecordKind::kKernel) {
    encode_kernel(record, intern_string(record.op_id, op.name), scratch_);
    append_event(pb::Event::kKernel, scratch_);
    return;
  }
  if (record.kind == RecordKind::kCacheSample) {
    encode_cache_sample(record, scratch_);
    append_event(pb::Event::kCacheSample, scratch_);
    return;
  }
  // A GradScaler update names no op.
  const bool no_op = record.kind == RecordKind::kNumerics && record.numerics.kind == NumericsKind::kScalerUpdate;
  const uint32_t op_string = no_op ? 0 : intern_string(record.op_id, op.name);
  define_location(location_id, location);
  const auto arg_string = [&](uint16_t arg) -> uint32_t {
    const std::string& arg_name = arg < op.arg_names.size() ? op.arg_names[arg] : std::string();
    return arg_name.empty() ? 0 : intern_string(kArgNameKey | (uint64_t{record.op_id} << 16) | arg, arg_name);
  };
  if (record.kind == RecordKind::kNumerics) {
    const bool cast = record.numerics.kind == NumericsKind::kCast;
    encode_numerics(record, op_string, cast ? arg_string(record.numerics.arg_index) : 0, location_id, scratch_);
    append_event(pb::Event::kNumerics, scratch_);
    return;
  }
  if (record.kind == RecordKind::kCast) {
    encode_cast(record, op_string, arg_string(record.cast.arg_index), location_id, scratch_, packed_);
    append_event(pb::Event::kCast, scratch_);
  } else if (record.kind == RecordKind::kCastCounts) {
    encode_cast_counts(record, op_string, arg_string(record.counts.key.arg_index), location_id, scratch_);
    append_event(pb::Event::kCastCounts, scratch_);
  } else if (record.kind == RecordKind::kOpCounts) {
    encode_op_counts(record, op_string, location_id, scratch_, packed_);
    append_event(pb::Event::kOpCounts, scratch_);
  } else {
    encode_op(record, op_string, location_id, scratch_, packed_);
    append_event(pb::Event::kOp, scratch_);
  }
}

void BatchEncoder::add_stats(const EventLogStats& stats, uint64_t ts_ns, const std::string& gpu_timing) {
  using F = pb::AgentStats;
  scratch_.clear();
  scratch_.u64(F::kSchemaVersion, kSchemaVersion);
  scratch_.u64(F::kEventsRecorded, stats.recorded);
  scratch_.u64(F::kEventsDropped, stats.dropped);
  scratch_.u64(F::kInternalErrors, stats.internal_errors);
  scratch_.u64(F::kPid, identity_.pid);
  scratch_.bytes(F::kTorchVersion, identity_.torch_version);
  scratch_.u64(F::kTsNs, ts_ns);
  scratch_.i64(F::kRank, identity_.rank);
  scratch_.i64(F::kLocalRank, identity_.local_rank);
  scratch_.i64(F::kWorldSize, identity_.world_size);
  scratch_.bytes(F::kGpuTiming, gpu_timing);
  scratch_.u64(F::kGpuRecordsDropped, stats.gpu_records_dropped);
  for (const std::string& error : stats.overlay_errors) scratch_.bytes(F::kOverlayErrors, error);
  append_event(pb::Event::kStats, scratch_);
  ++stats_events_;
}

std::string BatchEncoder::finish(uint64_t sequence, uint64_t recorded_total, uint64_t dropped_total, bool final) {
  using F = pb::Batch;
  wire::Writer out;
  out.u64(F::kProtocolVersion, kProtocolVersion);
  wire::Writer identity;
  encode_identity(identity_, identity);
  out.message(F::kAgent, identity.data());
  out.u64(F::kSequence, sequence);
  out.u64(F::kEventsDroppedTotal, dropped_total);
  out.u64(F::kEventsRecordedTotal, recorded_total);
  std::string encoded = out.take();
  encoded += tables_.data();
  encoded += body_.data();
  wire::Writer tail;
  tail.boolean(F::kFinal, final);
  encoded += tail.data();
  body_.clear();
  tables_.clear();
  string_ids_.clear();
  locations_defined_.clear();
  events_ = 0;
  stats_events_ = 0;
  return encoded;
}

}  // namespace castscope
