#include "jsonl_writer.h"

#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>

#include "policy.h"

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

// proto3 JSON writes 64-bit integers as strings.
std::string u64(uint64_t value) { return std::to_string(value); }

}  // namespace

std::string record_to_json(const Record& record, const OpMeta& op) {
  ordered_json body;
  body["seq"] = u64(record.seq);
  body["ts_ns"] = u64(record.ts_ns);
  body["thread"] = record.thread;
  body["op"] = op.name;
  if (record.kind == RecordKind::kCast) {
    const CastFields& cast = record.cast;
    body["arg_index"] = cast.arg_index;
    body["arg_name"] = cast.arg_index < op.arg_names.size() ? op.arg_names[cast.arg_index] : "";
    body["list_index"] = cast.list_index;
    body["policy"] = policy_enum(record.policy);
    body["src_dtype"] = dtype_enum(cast.src);
    body["dst_dtype"] = dtype_enum(cast.dst);
    body["outcome"] = outcome_enum(cast.outcome);
    ordered_json shape = ordered_json::array();
    const int dims = cast.ndim < kMaxShapeDims ? cast.ndim : kMaxShapeDims;
    for (int i = 0; i < dims; ++i) shape.push_back(u64(static_cast<uint64_t>(cast.shape[i])));
    body["shape"] = shape;
    body["shape_truncated"] = cast.ndim > kMaxShapeDims;
    body["bytes"] = u64(cast.bytes);
    body["device_type"] = device_enum(record.device);
    body["op_seq"] = u64(cast.op_seq);
    return ordered_json{{"cast", body}}.dump();
  }
  const OpFields& fields = record.op;
  body["policy"] = policy_enum(record.policy);
  body["device_type"] = device_enum(record.device);
  ordered_json inputs = ordered_json::array();
  for (int i = 0; i < fields.num_inputs && i < kMaxOpInputDtypes; ++i) inputs.push_back(dtype_enum(fields.input_dtypes[i]));
  body["input_dtypes"] = inputs;
  body["output_dtype"] = dtype_enum(fields.output);
  body["cpu_duration_ns"] = u64(fields.cpu_duration_ns);
  body["outcome"] = fields.ok ? "OP_OUTCOME_OK" : "OP_OUTCOME_ERROR";
  body["autocast_dtype"] = dtype_enum(fields.autocast_dtype);
  return ordered_json{{"op", body}}.dump();
}

std::string stats_to_json(const EventLogStats& stats, uint32_t pid, const std::string& torch_version, uint64_t ts_ns) {
  ordered_json body;
  body["schema_version"] = "SCHEMA_VERSION_1";
  body["events_recorded"] = u64(stats.recorded);
  body["events_dropped"] = u64(stats.dropped);
  body["internal_errors"] = u64(stats.internal_errors);
  body["pid"] = pid;
  body["torch_version"] = torch_version;
  body["ts_ns"] = u64(ts_ns);
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
