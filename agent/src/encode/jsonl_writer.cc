#include "agent/src/encode/jsonl_writer.h"

#include <cmath>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>
#include <nlohmann/json.hpp>

#include "agent/src/encode/schema_versions.h"
#include "agent/src/policy/policy.h"
#include "castscope/v1/events.wire.h"

namespace castscope {
namespace {

using ordered_json = nlohmann::ordered_json;
namespace pb = v1::wire;

// Enum value names as proto/castscope/v1/events.proto spells them, generated
// with the record enums. A value the schema does not define
// (kKeepNativePolicy) reads as the enum's UNSPECIFIED.
template <typename RecordEnum>
std::string_view enum_name(RecordEnum value) {
  const std::string_view text = v1::enums::proto_name(value);
  return text.empty() ? v1::enums::proto_name(RecordEnum{}) : text;
}

std::string_view op_outcome_enum(bool ok) { return pb::OpOutcome_Name(ok ? pb::OP_OUTCOME_OK : pb::OP_OUTCOME_ERROR); }

std::string json_quoted(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  out += text;
  out += '"';
  return out;
}

// A JSON array of values that are already JSON.
class ArrayBuilder {
 public:
  ArrayBuilder& add(const std::string& encoded) {
    if (out_.size() > 1) out_ += ',';
    out_ += encoded;
    return *this;
  }
  std::string done() const { return out_ + "]"; }

 private:
  std::string out_ = "[";
};

// Newline-separated lines as a JSON array of strings.
std::string lines_json(const std::string& lines) {
  ArrayBuilder array;
  for (size_t start = 0; start < lines.size();) {
    size_t end = lines.find('\n', start);
    if (end == std::string::npos) end = lines.size();
    array.add(nlohmann::json(lines.substr(start, end - start)).dump());
    start = end + 1;
  }
  return array.done();
}

std::string location_json(const Location& location) {
  return "{\"kind\":" + json_quoted(enum_name(location.kind)) +
         ",\"file\":" + nlohmann::json(location.file).dump() + ",\"line\":" + std::to_string(location.line) +
         ",\"function\":" + nlohmann::json(location.function).dump() +
         ",\"stack\":" + lines_json(location.stack) +
         (location.inside_disabled_autocast ? ",\"inside_disabled_autocast\":true" : "") +
         (location.also_consumed_at.empty() ? "" : ",\"also_consumed_at\":" + lines_json(location.also_consumed_at)) +
         (location.source_text.empty() ? "" : ",\"source_text\":" + nlohmann::json(location.source_text).dump()) +
         "}";
}

// proto3 JSON writes 64-bit integers as strings.
std::string u64(uint64_t value) { return std::to_string(value); }

// Hand-rolled rather than through a JSON DOM: the exporter renders every
// event, and building a DOM per event cost more than the hot path itself.
// Only op and argument names need escaping; they come from the dispatcher.
class LineBuilder {
 public:
  explicit LineBuilder(const char* kind) {
    out_.reserve(384);
    out_ += "{\"";
    out_ += kind;
    out_ += "\":{";
  }
  LineBuilder& raw(const char* key, const std::string& value) {
    key_(key);
    out_ += value;
    return *this;
  }
  LineBuilder& num(const char* key, int64_t value) { return raw(key, std::to_string(value)); }
  // proto3 JSON: 64-bit integers are strings.
  LineBuilder& u64(const char* key, uint64_t value) { return raw(key, json_quoted(std::to_string(value))); }
  LineBuilder& i64(const char* key, int64_t value) { return raw(key, json_quoted(std::to_string(value))); }
  LineBuilder& str(const char* key, const std::string& value) { return raw(key, nlohmann::json(value).dump()); }
  LineBuilder& enm(const char* key, std::string_view value) { return raw(key, json_quoted(value)); }
  LineBuilder& boolean(const char* key, bool value) { return raw(key, value ? "true" : "false"); }
  std::string done() { return out_ + "}}"; }

 private:
  void key_(const char* key) {
    if (!first_) out_ += ',';
    first_ = false;
    out_ += '"';
    out_ += key;
    out_ += "\":";
  }
  std::string out_;
  bool first_ = true;
};

}  // namespace

std::string record_to_json(const Record& record, const OpMeta& op, const Location& location) {
  if (record.kind == RecordKind::kCast) {
    const CastFields& cast = record.cast;
    ArrayBuilder shape;
    const int dims = cast.ndim < kMaxShapeDims ? cast.ndim : kMaxShapeDims;
    for (int i = 0; i < dims; ++i) shape.add(json_quoted(std::to_string(cast.shape[i])));
    return LineBuilder("cast")
        .u64("seq", record.seq)
        .u64("ts_ns", record.ts_ns)
        .num("thread", record.thread)
        .str("op", op.name)
        .num("arg_index", cast.arg_index)
        .str("arg_name", cast.arg_index < op.arg_names.size() ? op.arg_names[cast.arg_index] : "")
        .num("list_index", cast.list_index)
        .enm("policy", enum_name(record.policy))
        .enm("src_dtype", enum_name(cast.src))
        .enm("dst_dtype", enum_name(cast.dst))
        .enm("outcome", enum_name(cast.outcome))
        .raw("shape", shape.done())
        .boolean("shape_truncated", cast.ndim > kMaxShapeDims)
        .u64("bytes", cast.bytes)
        .enm("device_type", enum_name(record.device))
        .u64("op_seq", cast.op_seq)
        .enm("role", enum_name(cast.role))
        .enm("cache", enum_name(cast.cache))
        .i64("source_version", cast.source_version)
        .i64("cached_version", cast.cached_version)
        .raw("location", location_json(location))
        .enm("mode", enum_name(cast.mode))
        .enm("phase", enum_name(cast.phase))
        .boolean("round_trip", cast.round_trip)
        .done();
  }
  if (record.kind == RecordKind::kCastCounts) {
    const CountFields& c = record.counts;
    return LineBuilder("cast_counts")
        .u64("seq", record.seq)
        .u64("first_ts_ns", c.first_ts_ns)
        .u64("last_ts_ns", c.last_ts_ns)
        .num("thread", c.key.thread)
        .str("op", op.name)
        .num("arg_index", c.key.arg_index)
        .str("arg_name", c.key.arg_index < op.arg_names.size() ? op.arg_names[c.key.arg_index] : "")
        .raw("location", location_json(location))
        .enm("policy", enum_name(c.key.policy))
        .enm("device_type", enum_name(c.key.device))
        .enm("src_dtype", enum_name(c.key.src))
        .enm("dst_dtype", enum_name(c.key.dst))
        .enm("outcome", enum_name(c.key.outcome))
        .enm("role", enum_name(c.key.role))
        .enm("cache", enum_name(c.key.cache))
        .enm("mode", enum_name(c.key.mode))
        .enm("phase", enum_name(c.key.phase))
        .u64("count", c.count)
        .u64("bytes", c.sum)
        .u64("iteration", c.iteration)
        .i64("max_version_gap", c.max_version_gap)
        .u64("round_trips", c.extra)
        .done();
  }
  if (record.kind == RecordKind::kOpCounts) {
    const CountFields& c = record.counts;
    ArrayBuilder enabled;
    for (int d = 1; d <= static_cast<int>(pb::DeviceType_MAX); ++d)
      if (c.key.autocast_enabled & (1u << d)) enabled.add(json_quoted(enum_name(static_cast<DeviceKind>(d))));
    return LineBuilder("op_counts")
        .u64("seq", record.seq)
        .u64("first_ts_ns", c.first_ts_ns)
        .u64("last_ts_ns", c.last_ts_ns)
        .num("thread", c.key.thread)
        .str("op", op.name)
        .raw("location", location_json(location))
        .enm("policy", enum_name(c.key.policy))
        .enm("device_type", enum_name(c.key.device))
        .enm("mode", enum_name(c.key.mode))
        .enm("phase", enum_name(c.key.phase))
        .enm("output_dtype", enum_name(c.key.src))
        .enm("autocast_dtype", enum_name(c.key.dst))
        .raw("autocast_enabled", enabled.done())
        .enm("probe_reason", enum_name(c.key.probe))
        .u64("calls", c.count)
        .u64("errors", c.extra)
        .u64("cpu_duration_ns", c.sum)
        .u64("iteration", c.iteration)
        .done();
  }
  if (record.kind == RecordKind::kCacheSample) {
    return LineBuilder("cache_sample")
        .u64("seq", record.seq)
        .u64("ts_ns", record.ts_ns)
        .enm("trigger", enum_name(record.sample.trigger))
        .u64("iteration", record.sample.iteration)
        .u64("live_casts", record.sample.live_casts)
        .u64("live_bytes", record.sample.live_bytes)
        .u64("orphaned_casts", record.sample.orphaned_casts)
        .u64("orphaned_bytes", record.sample.orphaned_bytes)
        .u64("cache_hits", record.sample.cache_hits)
        .u64("released_casts", record.sample.released_casts)
        .done();
  }
  if (record.kind == RecordKind::kNumerics) {
    const NumericsFields& n = record.numerics;
    LineBuilder line("numerics");
    line.u64("seq", record.seq)
        .u64("first_ts_ns", record.ts_ns)
        .u64("last_ts_ns", n.last_ts_ns)
        .enm("kind", enum_name(n.kind))
        .num("thread", record.thread)
        .str("op", n.kind == NumericsKind::kScalerUpdate ? std::string() : op.name)
        .str("arg_name", n.kind == NumericsKind::kCast && n.arg_index < op.arg_names.size() ? op.arg_names[n.arg_index] : "")
        .raw("location", location_json(location))
        .num("arg_index", n.arg_index)
        .enm("device_type", enum_name(record.device))
        .enm("src_dtype", enum_name(n.src))
        .enm("dst_dtype", enum_name(n.dst))
        .enm("mode", enum_name(n.mode))
        .enm("phase", enum_name(n.phase))
        .u64("iteration", n.iteration)
        .u64("tensors", n.tensors)
        .u64("values", n.values)
        .u64("overflowed", n.overflowed)
        .u64("underflowed", n.underflowed)
        .u64("nonfinite", n.nonfinite)
        .u64("nan", n.nan)
        .num("max_abs_log2", n.max_abs_log2)
        .u64("first_nonfinite_seq", n.first_nonfinite_seq);
    // A double as JSON: finite scales only (GradScaler's are).
    if (n.kind == NumericsKind::kScalerUpdate && std::isfinite(n.scale))
      line.raw("scale", nlohmann::json(n.scale).dump()).boolean("found_inf", n.found_inf);
    return line.done();
  }
  if (record.kind == RecordKind::kKernel) {
    const KernelFields& kernel = record.kernel;
    return LineBuilder("kernel")
        .u64("seq", record.seq)
        .u64("ts_ns", record.ts_ns)
        .u64("duration_ns", kernel.duration_ns)
        .enm("activity", enum_name(kernel.activity))
        .str("name", op.name)
        .num("device", kernel.device)
        .num("stream", kernel.stream)
        .enm("launched_by", enum_name(kernel.launched_by))
        .u64("launch_seq", kernel.launch_seq)
        .u64("bytes", kernel.bytes)
        .num("correlation_id", kernel.correlation_id)
        .done();
  }
  const OpFields& fields = record.op;
  ArrayBuilder enabled;
  for (int d = 1; d <= static_cast<int>(pb::DeviceType_MAX); ++d)
    if (fields.autocast_enabled & (1u << d)) enabled.add(json_quoted(enum_name(static_cast<DeviceKind>(d))));
  ArrayBuilder inputs;
  for (int i = 0; i < fields.num_inputs && i < kMaxOpInputDtypes; ++i)
    inputs.add(json_quoted(enum_name(fields.input_dtypes[i])));
  LineBuilder line("op");
  line.u64("seq", record.seq)
      .u64("ts_ns", record.ts_ns)
      .num("thread", record.thread)
      .str("op", op.name)
      .enm("policy", enum_name(record.policy))
      .enm("device_type", enum_name(record.device))
      .raw("input_dtypes", inputs.done())
      .enm("output_dtype", enum_name(fields.output))
      .u64("cpu_duration_ns", fields.cpu_duration_ns)
      .enm("outcome", op_outcome_enum(fields.ok))
      .enm("autocast_dtype", enum_name(fields.autocast_dtype))
      .raw("location", location_json(location))
      .enm("mode", enum_name(fields.mode))
      .enm("phase", enum_name(fields.phase))
      .raw("autocast_enabled", enabled.done())
      .num("autocast_nesting", fields.autocast_nesting)
      .enm("probe_reason", enum_name(fields.probe));
  if (fields.gemm_calls > 0) {
    const std::string gemm = "{\"compute\":" + json_quoted(enum_name(fields.gemm_compute)) +
                             ",\"a_type\":" + json_quoted(enum_name(fields.gemm_a)) +
                             ",\"b_type\":" + json_quoted(enum_name(fields.gemm_b)) +
                             ",\"d_type\":" + json_quoted(enum_name(fields.gemm_d)) +
                             ",\"calls\":" + std::to_string(fields.gemm_calls) +
                             ",\"mixed\":" + (fields.gemm_mixed ? "true" : "false") + "}";
    line.raw("gemm", gemm);
  }
  return line.done();
}

std::string stats_to_json(const EventLogStats& stats, const ProcessIdentity& identity, const std::string& torch_version,
                          uint64_t ts_ns, const std::string& gpu_timing) {
  ordered_json body;
  body["schema_version"] = std::string(pb::SchemaVersion_Name(kSchemaVersion));
  body["events_recorded"] = u64(stats.recorded);
  body["events_dropped"] = u64(stats.dropped);
  body["internal_errors"] = u64(stats.internal_errors);
  body["pid"] = identity.pid;
  body["torch_version"] = torch_version;
  body["ts_ns"] = u64(ts_ns);
  body["rank"] = identity.rank;
  body["local_rank"] = identity.local_rank;
  body["world_size"] = identity.world_size;
  if (!gpu_timing.empty()) body["gpu_timing"] = gpu_timing;
  body["gpu_records_dropped"] = u64(stats.gpu_records_dropped);
  if (!stats.overlay_errors.empty()) body["overlay_errors"] = stats.overlay_errors;
  return ordered_json{{"stats", body}}.dump();
}

JsonlWriter::~JsonlWriter() { close(); }

std::string JsonlWriter::open(const std::string& path) {
  close();
  // Created 0600 whatever the umask: events name the user's source files,
  // lines and tensor shapes. An existing file keeps its mode.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot open events file " + path + ": " + std::strerror(errno);
  file_ = ::fdopen(fd, "a");
  if (file_ == nullptr) {
    const int error = errno;
    ::close(fd);
    return "cannot open events file " + path + ": " + std::strerror(error);
  }
  return "";
}

void JsonlWriter::write_line(const std::string& line) {
  if (file_ == nullptr) return;
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fputc('\n', file_);
}

void JsonlWriter::flush() {
  if (file_ != nullptr) std::fflush(file_);
}

void JsonlWriter::close() {
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
}

}  // namespace castscope
