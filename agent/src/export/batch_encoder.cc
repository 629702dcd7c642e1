#include "agent/src/export/batch_encoder.h"

namespace castscope {
namespace {

// Field numbers of proto/castscope/v1/{events,transport}.proto.
namespace batch_field {
constexpr uint32_t kProtocolVersion = 1, kAgent = 2, kSequence = 3, kDroppedTotal = 4, kRecordedTotal = 5,
                   kStrings = 6, kLocations = 7, kEvents = 8, kFinal = 9;
}
namespace event_field {
constexpr uint32_t kCast = 1, kOp = 2, kStats = 3, kCacheSample = 4;
}

constexpr uint64_t kArgNameKey = uint64_t{1} << 63;

void encode_identity(const AgentIdentity& id, wire::Writer& out) {
  out.bytes(1, id.run_id);
  out.bytes(2, id.agent_id);
  out.u64(3, id.pid);
  out.i64(4, id.rank);
  out.i64(5, id.local_rank);
  out.i64(6, id.world_size);
  out.bytes(7, id.hostname);
  out.bytes(8, id.torch_version);
  out.bytes(9, id.command);
  out.bytes(10, id.policy_hash);
  for (const auto& file : id.policy_files) out.bytes(11, file);
}

void encode_cast(const Record& record, uint32_t op_string, uint32_t arg_string, uint32_t location_id, wire::Writer& out,
                 wire::Writer& packed) {
  const CastFields& cast = record.cast;
  out.u64(1, record.seq);
  out.u64(2, record.ts_ns);
  out.u64(3, record.thread);
  out.u64(5, cast.arg_index);
  out.i64(7, cast.list_index);
  out.u64(8, static_cast<uint64_t>(record.policy));
  out.u64(9, static_cast<uint64_t>(cast.src));
  out.u64(10, static_cast<uint64_t>(cast.dst));
  out.u64(11, static_cast<uint64_t>(cast.outcome));
  packed.clear();
  const int dims = cast.ndim < kMaxShapeDims ? cast.ndim : kMaxShapeDims;
  for (int i = 0; i < dims; ++i) packed.varint(static_cast<uint64_t>(cast.shape[i]));
  out.packed(12, packed.data());
  out.boolean(13, cast.ndim > kMaxShapeDims);
  out.u64(14, cast.bytes);
  out.u64(15, static_cast<uint64_t>(record.device));
  out.u64(16, cast.op_seq);
  out.u64(17, static_cast<uint64_t>(cast.role));
  out.u64(18, static_cast<uint64_t>(cast.cache));
  out.i64(19, cast.source_version);
  out.i64(20, cast.cached_version);
  out.u64(22, static_cast<uint64_t>(cast.mode));
  out.u64(23, static_cast<uint64_t>(cast.phase));
  out.u64(24, op_string);
  out.u64(25, arg_string);
  out.u64(26, location_id);
  out.boolean(27, cast.round_trip);
}

void encode_op(const Record& record, uint32_t op_string, uint32_t location_id, wire::Writer& out, wire::Writer& packed) {
  const OpFields& op = record.op;
  out.u64(1, record.seq);
  out.u64(2, record.ts_ns);
  out.u64(3, record.thread);
  out.u64(5, static_cast<uint64_t>(record.policy));
  out.u64(6, static_cast<uint64_t>(record.device));
  packed.clear();
  for (int i = 0; i < op.num_inputs && i < kMaxOpInputDtypes; ++i) packed.varint(static_cast<uint64_t>(op.input_dtypes[i]));
  out.packed(7, packed.data());
  out.u64(8, static_cast<uint64_t>(op.output));
  out.u64(9, op.cpu_duration_ns);
  out.u64(10, op.ok ? 1 : 2);  // OP_OUTCOME_OK / OP_OUTCOME_ERROR
  out.u64(11, static_cast<uint64_t>(op.autocast_dtype));
  out.u64(13, static_cast<uint64_t>(op.mode));
  out.u64(14, static_cast<uint64_t>(op.phase));
  packed.clear();
  for (uint32_t d = 1; d <= static_cast<uint32_t>(DeviceKind::kMps); ++d)
    if (op.autocast_enabled & (1u << d)) packed.varint(d);
  out.packed(15, packed.data());
  out.u64(16, op.autocast_nesting);
  out.u64(17, op_string);
  out.u64(18, location_id);
  out.u64(19, static_cast<uint64_t>(op.probe));
}

void encode_cache_sample(const Record& record, wire::Writer& out) {
  out.u64(1, record.seq);
  out.u64(2, record.ts_ns);
  out.u64(3, static_cast<uint64_t>(record.sample.trigger));
  out.u64(4, record.sample.iteration);
  out.u64(5, record.sample.live_casts);
  out.u64(6, record.sample.live_bytes);
}

}  // namespace

uint32_t BatchEncoder::intern_string(uint64_t key, const std::string& text) {
  auto [it, inserted] = string_ids_.try_emplace(key, static_cast<uint32_t>(string_ids_.size() + 1));
  if (inserted) {
    nested_.clear();
    nested_.u64(1, it->second);
    nested_.bytes(2, text);
    tables_.message(batch_field::kStrings, nested_.data());
  }
  return it->second;
}

void BatchEncoder::define_location(uint32_t id, const Location& location) {
  if (id == 0 || !locations_defined_.insert(id).second) return;
  wire::Writer source;
  source.u64(1, static_cast<uint64_t>(location.kind));
  source.bytes(2, location.file);
  source.u64(3, location.line);
  source.bytes(4, location.function);
  for (size_t start = 0; start < location.stack.size();) {
    size_t end = location.stack.find('\n', start);
    if (end == std::string::npos) end = location.stack.size();
    source.bytes(5, std::string_view(location.stack).substr(start, end - start));
    start = end + 1;
  }
  source.boolean(6, location.inside_disabled_autocast);
  nested_.clear();
  nested_.u64(1, id);
  nested_.message(2, source.data());
  tables_.message(batch_field::kLocations, nested_.data());
}

void BatchEncoder::append_event(uint32_t kind_field, const wire::Writer& message) {
  event_.clear();
  event_.message(kind_field, message.data());
  body_.message(batch_field::kEvents, event_.data());
  ++events_;
}

void BatchEncoder::add(const Record& record, const OpMeta& op, uint32_t location_id, const Location& location) {
  scratch_.clear();
  if (record.kind == RecordKind::kCacheSample) {
    encode_cache_sample(record, scratch_);
    append_event(event_field::kCacheSample, scratch_);
    return;
  }
  const uint32_t op_string = intern_string(record.op_id, op.name);
  define_location(location_id, location);
  if (record.kind == RecordKind::kCast) {
    const uint16_t arg = record.cast.arg_index;
    const std::string& arg_name = arg < op.arg_names.size() ? op.arg_names[arg] : std::string();
    const uint32_t arg_string =
        arg_name.empty() ? 0 : intern_string(kArgNameKey | (uint64_t{record.op_id} << 16) | arg, arg_name);
    encode_cast(record, op_string, arg_string, location_id, scratch_, packed_);
    append_event(event_field::kCast, scratch_);
  } else {
    encode_op(record, op_string, location_id, scratch_, packed_);
    append_event(event_field::kOp, scratch_);
  }
}

void BatchEncoder::add_stats(const EventLogStats& stats, uint64_t ts_ns) {
  scratch_.clear();
  scratch_.u64(1, 1);  // SCHEMA_VERSION_1
  scratch_.u64(2, stats.recorded);
  scratch_.u64(3, stats.dropped);
  scratch_.u64(4, stats.internal_errors);
  scratch_.u64(5, identity_.pid);
  scratch_.bytes(6, identity_.torch_version);
  scratch_.u64(7, ts_ns);
  scratch_.i64(8, identity_.rank);
  scratch_.i64(9, identity_.local_rank);
  scratch_.i64(10, identity_.world_size);
  append_event(event_field::kStats, scratch_);
}

std::string BatchEncoder::finish(uint64_t sequence, uint64_t recorded_total, uint64_t dropped_total, bool final) {
  wire::Writer out;
  out.u64(batch_field::kProtocolVersion, kProtocolVersion);
  wire::Writer identity;
  encode_identity(identity_, identity);
  out.message(batch_field::kAgent, identity.data());
  out.u64(batch_field::kSequence, sequence);
  out.u64(batch_field::kDroppedTotal, dropped_total);
  out.u64(batch_field::kRecordedTotal, recorded_total);
  std::string encoded = out.take();
  encoded += tables_.data();
  encoded += body_.data();
  wire::Writer tail;
  tail.boolean(batch_field::kFinal, final);
  encoded += tail.data();
  body_.clear();
  tables_.clear();
  string_ids_.clear();
  locations_defined_.clear();
  events_ = 0;
  return encoded;
}

}  // namespace castscope
