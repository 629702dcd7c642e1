#include "agent/src/export/jsonl_writer.h"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "agent/src/policy/policy.h"

namespace castscope {
namespace {

using ordered_json = nlohmann::ordered_json;

// Enum value names as proto/castscope/v1/events.proto spells them.
const char* policy_enum(CastPolicy policy) {
  switch (policy) {
    case CastPolicy::kLowerPrecisionFp: return "CAST_POLICY_LOWER_PRECISION_FP";
    case CastPolicy::kFp32: return "CAST_POLICY_FP32";
    case CastPolicy::kFp32SetOptDtype: return "CAST_POLICY_FP32_SET_OPT_DTYPE";
    case CastPolicy::kFp32AppendDtype: return "CAST_POLICY_FP32_APPEND_DTYPE";
    case CastPolicy::kPromote: return "CAST_POLICY_PROMOTE";
    case CastPolicy::kBanned: return "CAST_POLICY_BANNED";
    default: return "CAST_POLICY_UNSPECIFIED";
  }
}

const char* dtype_enum(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return "DTYPE_FLOAT32";
    case DType::kFloat16: return "DTYPE_FLOAT16";
    case DType::kBFloat16: return "DTYPE_BFLOAT16";
    case DType::kFloat64: return "DTYPE_FLOAT64";
    case DType::kInt64: return "DTYPE_INT64";
    case DType::kInt32: return "DTYPE_INT32";
    case DType::kInt16: return "DTYPE_INT16";
    case DType::kInt8: return "DTYPE_INT8";
    case DType::kUInt8: return "DTYPE_UINT8";
    case DType::kBool: return "DTYPE_BOOL";
    case DType::kComplex64: return "DTYPE_COMPLEX64";
    case DType::kComplex128: return "DTYPE_COMPLEX128";
    case DType::kFloat8: return "DTYPE_FLOAT8";
    case DType::kOther: return "DTYPE_OTHER";
    default: return "DTYPE_UNSPECIFIED";
  }
}

const char* device_enum(DeviceKind device) {
  switch (device) {
    case DeviceKind::kCpu: return "DEVICE_TYPE_CPU";
    case DeviceKind::kCuda: return "DEVICE_TYPE_CUDA";
    case DeviceKind::kXpu: return "DEVICE_TYPE_XPU";
    case DeviceKind::kMps: return "DEVICE_TYPE_MPS";
    default: return "DEVICE_TYPE_UNSPECIFIED";
  }
}

const char* outcome_enum(CastOutcome outcome) {
  switch (outcome) {
    case CastOutcome::kCast: return "CAST_OUTCOME_CAST";
    case CastOutcome::kAlreadyTarget: return "CAST_OUTCOME_ALREADY_TARGET";
    case CastOutcome::kFloat64: return "CAST_OUTCOME_FLOAT64";
    case CastOutcome::kNotFloating: return "CAST_OUTCOME_NOT_FLOATING";
    case CastOutcome::kOtherDevice: return "CAST_OUTCOME_OTHER_DEVICE";
    case CastOutcome::kDtypeArgSet: return "CAST_OUTCOME_DTYPE_ARG_SET";
    case CastOutcome::kDtypeArgKept: return "CAST_OUTCOME_DTYPE_ARG_KEPT";
    default: return "CAST_OUTCOME_UNSPECIFIED";
  }
}

const char* role_enum(Role role) {
  switch (role) {
    case Role::kWeight: return "ROLE_WEIGHT";
    case Role::kInput: return "ROLE_INPUT";
    case Role::kActivation: return "ROLE_ACTIVATION";
    default: return "ROLE_UNSPECIFIED";
  }
}

const char* cache_enum(CacheOutcome cache) {
  switch (cache) {
    case CacheOutcome::kNotCacheable: return "CACHE_OUTCOME_NOT_CACHEABLE";
    case CacheOutcome::kMiss: return "CACHE_OUTCOME_MISS";
    case CacheOutcome::kHit: return "CACHE_OUTCOME_HIT";
    case CacheOutcome::kStaleHit: return "CACHE_OUTCOME_STALE_HIT";
    default: return "CACHE_OUTCOME_UNSPECIFIED";
  }
}

const char* mode_enum(ExecutionMode mode) {
  switch (mode) {
    case ExecutionMode::kEager: return "EXECUTION_MODE_EAGER";
    case ExecutionMode::kScript: return "EXECUTION_MODE_SCRIPT";
    case ExecutionMode::kTraceRecording: return "EXECUTION_MODE_TRACE_RECORDING";
    case ExecutionMode::kTraced: return "EXECUTION_MODE_TRACED";
    case ExecutionMode::kScriptWhileTracing: return "EXECUTION_MODE_SCRIPT_WHILE_TRACING";
    default: return "EXECUTION_MODE_UNSPECIFIED";
  }
}

const char* probe_reason_enum(ProbeReason reason) {
  switch (reason) {
    case ProbeReason::kFullPrecisionUnderAutocast: return "PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST";
    case ProbeReason::kLowPrecisionMeetsFp32: return "PROBE_REASON_LOW_PRECISION_MEETS_FP32";
    default: return "PROBE_REASON_UNSPECIFIED";
  }
}

const char* phase_enum(Phase phase) {
  switch (phase) {
    case Phase::kForward: return "PHASE_FORWARD";
    case Phase::kBackward: return "PHASE_BACKWARD";
    default: return "PHASE_UNSPECIFIED";
  }
}

const char* trigger_enum(SampleTrigger trigger) {
  switch (trigger) {
    case SampleTrigger::kIteration: return "TRIGGER_ITERATION";
    case SampleTrigger::kInterval: return "TRIGGER_INTERVAL";
    case SampleTrigger::kStop: return "TRIGGER_STOP";
    default: return "TRIGGER_UNSPECIFIED";
  }
}

const char* location_kind_enum(LocationKind kind) {
  switch (kind) {
    case LocationKind::kPython: return "KIND_PYTHON";
    case LocationKind::kTorchScript: return "KIND_TORCHSCRIPT";
    case LocationKind::kNone: return "KIND_NONE";
    default: return "KIND_UNSPECIFIED";
  }
}

std::string quoted(const std::string& text) { return "\"" + text + "\""; }

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

std::string location_json(const Location& location) {
  ArrayBuilder stack;
  for (size_t start = 0; start < location.stack.size();) {
    size_t end = location.stack.find('\n', start);
    if (end == std::string::npos) end = location.stack.size();
    stack.add(nlohmann::json(location.stack.substr(start, end - start)).dump());
    start = end + 1;
  }
  return std::string("{\"kind\":\"") + location_kind_enum(location.kind) + "\",\"file\":" + nlohmann::json(location.file).dump() +
         ",\"line\":" + std::to_string(location.line) + ",\"function\":" + nlohmann::json(location.function).dump() +
         ",\"stack\":" + stack.done() + (location.inside_disabled_autocast ? ",\"inside_disabled_autocast\":true" : "") +
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
  LineBuilder& u64(const char* key, uint64_t value) { return raw(key, quoted(std::to_string(value))); }
  LineBuilder& i64(const char* key, int64_t value) { return raw(key, quoted(std::to_string(value))); }
  LineBuilder& str(const char* key, const std::string& value) { return raw(key, nlohmann::json(value).dump()); }
  LineBuilder& enm(const char* key, const char* value) { return raw(key, quoted(value)); }
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
    for (int i = 0; i < dims; ++i) shape.add(quoted(std::to_string(cast.shape[i])));
    return LineBuilder("cast")
        .u64("seq", record.seq)
        .u64("ts_ns", record.ts_ns)
        .num("thread", record.thread)
        .str("op", op.name)
        .num("arg_index", cast.arg_index)
        .str("arg_name", cast.arg_index < op.arg_names.size() ? op.arg_names[cast.arg_index] : "")
        .num("list_index", cast.list_index)
        .enm("policy", policy_enum(record.policy))
        .enm("src_dtype", dtype_enum(cast.src))
        .enm("dst_dtype", dtype_enum(cast.dst))
        .enm("outcome", outcome_enum(cast.outcome))
        .raw("shape", shape.done())
        .boolean("shape_truncated", cast.ndim > kMaxShapeDims)
        .u64("bytes", cast.bytes)
        .enm("device_type", device_enum(record.device))
        .u64("op_seq", cast.op_seq)
        .enm("role", role_enum(cast.role))
        .enm("cache", cache_enum(cast.cache))
        .i64("source_version", cast.source_version)
        .i64("cached_version", cast.cached_version)
        .raw("location", location_json(location))
        .enm("mode", mode_enum(cast.mode))
        .enm("phase", phase_enum(cast.phase))
        .boolean("round_trip", cast.round_trip)
        .done();
  }
  if (record.kind == RecordKind::kCacheSample) {
    return LineBuilder("cache_sample")
        .u64("seq", record.seq)
        .u64("ts_ns", record.ts_ns)
        .enm("trigger", trigger_enum(record.sample.trigger))
        .u64("iteration", record.sample.iteration)
        .u64("live_casts", record.sample.live_casts)
        .u64("live_bytes", record.sample.live_bytes)
        .done();
  }
  const OpFields& fields = record.op;
  ArrayBuilder enabled;
  for (int d = 1; d <= static_cast<int>(DeviceKind::kMps); ++d)
    if (fields.autocast_enabled & (1u << d)) enabled.add(quoted(device_enum(static_cast<DeviceKind>(d))));
  ArrayBuilder inputs;
  for (int i = 0; i < fields.num_inputs && i < kMaxOpInputDtypes; ++i) inputs.add(quoted(dtype_enum(fields.input_dtypes[i])));
  return LineBuilder("op")
      .u64("seq", record.seq)
      .u64("ts_ns", record.ts_ns)
      .num("thread", record.thread)
      .str("op", op.name)
      .enm("policy", policy_enum(record.policy))
      .enm("device_type", device_enum(record.device))
      .raw("input_dtypes", inputs.done())
      .enm("output_dtype", dtype_enum(fields.output))
      .u64("cpu_duration_ns", fields.cpu_duration_ns)
      .enm("outcome", fields.ok ? "OP_OUTCOME_OK" : "OP_OUTCOME_ERROR")
      .enm("autocast_dtype", dtype_enum(fields.autocast_dtype))
      .raw("location", location_json(location))
      .enm("mode", mode_enum(fields.mode))
      .enm("phase", phase_enum(fields.phase))
      .raw("autocast_enabled", enabled.done())
      .num("autocast_nesting", fields.autocast_nesting)
      .enm("probe_reason", probe_reason_enum(fields.probe))
      .done();
}

std::string stats_to_json(const EventLogStats& stats, const ProcessIdentity& identity, const std::string& torch_version,
                          uint64_t ts_ns) {
  ordered_json body;
  body["schema_version"] = "SCHEMA_VERSION_1";
  body["events_recorded"] = u64(stats.recorded);
  body["events_dropped"] = u64(stats.dropped);
  body["internal_errors"] = u64(stats.internal_errors);
  body["pid"] = identity.pid;
  body["torch_version"] = torch_version;
  body["ts_ns"] = u64(ts_ns);
  body["rank"] = identity.rank;
  body["local_rank"] = identity.local_rank;
  body["world_size"] = identity.world_size;
  return ordered_json{{"stats", body}}.dump();
}

JsonlWriter::~JsonlWriter() { close(); }

std::string JsonlWriter::open(const std::string& path) {
  close();
  file_ = std::fopen(path.c_str(), "a");
  if (file_ == nullptr) return "cannot open events file " + path + ": " + std::strerror(errno);
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
