#include "agent/src/policy/policy.h"

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

namespace castscope {
namespace {

using json = nlohmann::json;

constexpr int kPolicyFormatVersion = 1;

struct NamedPolicy {
  const char* name;
  CastPolicy policy;
};
constexpr NamedPolicy kPolicies[] = {
    {"lower_precision_fp", CastPolicy::kLowerPrecisionFp},
    {"fp32", CastPolicy::kFp32},
    {"fp32_set_opt_dtype", CastPolicy::kFp32SetOptDtype},
    {"fp32_append_dtype", CastPolicy::kFp32AppendDtype},
    {"promote", CastPolicy::kPromote},
    {"banned", CastPolicy::kBanned},
    {"keep_native", CastPolicy::kKeepNative},
};

struct NamedDType {
  const char* name;
  DType dtype;
};
constexpr NamedDType kDTypes[] = {
    {"float32", DType::kFloat32},   {"float16", DType::kFloat16},      {"bfloat16", DType::kBFloat16},
    {"float64", DType::kFloat64},   {"int64", DType::kInt64},          {"int32", DType::kInt32},
    {"int16", DType::kInt16},       {"int8", DType::kInt8},            {"uint8", DType::kUInt8},
    {"bool", DType::kBool},         {"complex64", DType::kComplex64},  {"complex128", DType::kComplex128},
    {"float8", DType::kFloat8},     {"other", DType::kOther},
};

constexpr const char* kDevices[] = {"", "cpu", "cuda", "xpu", "mps"};

// 1-based line of byte offset `pos` in `text`.
int line_at(std::string_view text, size_t pos) {
  int line = 1;
  for (size_t i = 0; i < pos && i < text.size(); ++i) line += text[i] == '\n';
  return line;
}

// Byte offsets of every occurrence of `"key"` used as an object key.
std::vector<size_t> key_offsets(std::string_view text, const std::string& key) {
  std::vector<size_t> found;
  const std::string quoted = "\"" + key + "\"";
  for (size_t pos = text.find(quoted); pos != std::string_view::npos; pos = text.find(quoted, pos + 1)) {
    size_t after = pos + quoted.size();
    while (after < text.size() && (text[after] == ' ' || text[after] == '\t' || text[after] == '\n' || text[after] == '\r')) ++after;
    if (after < text.size() && text[after] == ':') found.push_back(pos);
  }
  return found;
}

bool valid_op_name(const std::string& op) {
  const size_t sep = op.find("::");
  if (sep == std::string::npos || sep == 0 || sep + 2 >= op.size()) return false;
  for (char c : op) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == ':' || c == '.';
    if (!ok) return false;
  }
  return true;
}

std::string policy_names_list() {
  std::string out;
  for (const auto& p : kPolicies) out += std::string(out.empty() ? "" : ", ") + p.name;
  return out;
}

}  // namespace

std::string PolicyError::str() const {
  std::ostringstream out;
  out << file;
  if (line > 0) out << ":" << line;
  out << ": ";
  if (!entry.empty()) out << "entry \"" << entry << "\": ";
  out << message;
  return out.str();
}

std::string canonical_policy_text(const PolicySet& set) {
  std::string text;
  for (const auto& [device, policy] : set.devices) {  // std::map: sorted
    for (const auto& [op, entry] : policy.ops) {
      text += device + "\t" + op + "\t" + policy_name(entry.policy) + "\t" + dtype_name(entry.dtype) + "\t" +
              entry.redispatch + "\t" + entry.message + "\n";
    }
  }
  return text;
}

CastPolicy policy_from_name(std::string_view name) {
  for (const auto& p : kPolicies)
    if (name == p.name) return p.policy;
  return CastPolicy::kUnspecified;
}

const char* policy_name(CastPolicy policy) {
  for (const auto& p : kPolicies)
    if (policy == p.policy) return p.name;
  return "unspecified";
}

DType dtype_from_name(std::string_view name) {
  for (const auto& d : kDTypes)
    if (name == d.name) return d.dtype;
  return DType::kUnspecified;
}

const char* dtype_name(DType dtype) {
  for (const auto& d : kDTypes)
    if (dtype == d.dtype) return d.name;
  return "unspecified";
}

DeviceKind device_from_name(std::string_view name) {
  for (size_t i = 1; i < std::size(kDevices); ++i)
    if (name == kDevices[i]) return static_cast<DeviceKind>(i);
  return DeviceKind::kUnspecified;
}

const char* device_name(DeviceKind device) {
  const auto index = static_cast<size_t>(device);
  return index < std::size(kDevices) ? kDevices[index] : "";
}

PolicySet parse_policy_text(std::string_view text, const std::string& file) {
  PolicySet result;
  auto fail = [&](int line, const std::string& entry, const std::string& message) {
    result.errors.push_back(PolicyError{file, line, entry, message});
  };
  auto line_of = [&](const std::string& key, size_t nth = 0) {
    const auto offsets = key_offsets(text, key);
    return nth < offsets.size() ? line_at(text, offsets[nth]) : 0;
  };

  json doc;
  try {
    doc = json::parse(text.begin(), text.end());
  } catch (const json::parse_error& e) {
    const int line = line_at(text, e.byte == 0 ? 0 : e.byte - 1);
    fail(line, "", std::string("not valid JSON: ") + e.what());
    return result;
  } catch (const json::exception& e) {  // e.g. a number too large for any type
    fail(0, "", std::string("not valid JSON: ") + e.what());
    return result;
  }
  if (!doc.is_object()) {
    fail(1, "", "a policy file is a JSON object with \"castscope_policy\", \"device\" and \"ops\"");
    return result;
  }
  for (const auto& [key, value] : doc.items()) {
    if (key != "castscope_policy" && key != "device" && key != "torch_version" && key != "ops" && key != "description")
      fail(line_of(key), "", "unknown top-level key \"" + key + "\" (expected castscope_policy, device, torch_version, ops, description)");
  }
  if (!doc.contains("castscope_policy") || !doc["castscope_policy"].is_number_integer() ||
      doc["castscope_policy"].get<int64_t>() != kPolicyFormatVersion) {
    fail(line_of("castscope_policy"), "", "\"castscope_policy\" must be 1 (the policy format version this castscope reads)");
  }
  DevicePolicy device;
  if (!doc.contains("device") || !doc["device"].is_string() ||
      device_from_name(doc["device"].get<std::string>()) == DeviceKind::kUnspecified) {
    fail(line_of("device"), "", "\"device\" must be one of cpu, cuda, xpu, mps");
  } else {
    device.device = doc["device"].get<std::string>();
  }
  if (doc.contains("torch_version") && doc["torch_version"].is_string()) device.torch_version = doc["torch_version"].get<std::string>();
  if (!doc.contains("ops") || !doc["ops"].is_object()) {
    fail(line_of("ops"), "", "\"ops\" must be an object mapping op names to policies");
    return result;
  }

  for (const auto& [op, spec] : doc["ops"].items()) {
    const int line = line_of(op);
    const auto occurrences = key_offsets(text, op);
    if (occurrences.size() > 1) {
      fail(line_at(text, occurrences[1]), op, "duplicate entry (first at line " + std::to_string(line) + "); keep one");
      continue;
    }
    if (!valid_op_name(op)) {
      fail(line, op, "not an operator name: expected \"namespace::name\" or \"namespace::name.overload\"");
      continue;
    }
    PolicyEntry entry;
    entry.op = op;
    entry.origin = file + ":" + std::to_string(line);
    std::string policy;
    if (spec.is_string()) {
      policy = spec.get<std::string>();
    } else if (spec.is_object() && spec.contains("policy") && spec["policy"].is_string()) {
      policy = spec["policy"].get<std::string>();
      bool bad_key = false;
      for (const auto& [key, value] : spec.items()) {
        if (key != "policy" && key != "dtype" && key != "redispatch" && key != "message" && key != "note") {
          fail(line, op, "unknown key \"" + key + "\" (expected policy, dtype, redispatch, message, note)");
          bad_key = true;
        } else if (key != "policy" && !value.is_string()) {
          fail(line, op, "\"" + key + "\" must be a string");
          bad_key = true;
        }
      }
      if (bad_key) continue;
    } else {
      fail(line, op, "must be a policy name or an object with \"policy\"");
      continue;
    }
    entry.policy = policy_from_name(policy);
    if (entry.policy == CastPolicy::kUnspecified) {
      fail(line, op, "unknown policy \"" + policy + "\" (expected one of " + policy_names_list() + ")");
      continue;
    }
    if (spec.is_object()) {
      if (spec.contains("dtype")) {
        const auto name = spec["dtype"].get<std::string>();
        entry.dtype = dtype_from_name(name);
        if (entry.dtype != DType::kFloat16 && entry.dtype != DType::kBFloat16) {
          fail(line, op, "unknown dtype \"" + name + "\" (a lower-precision dtype is float16 or bfloat16)");
          continue;
        }
        if (entry.policy != CastPolicy::kLowerPrecisionFp) {
          fail(line, op, "\"dtype\" applies only to lower_precision_fp");
          continue;
        }
      }
      if (spec.contains("redispatch")) entry.redispatch = spec["redispatch"].get<std::string>();
      if (spec.contains("message")) entry.message = spec["message"].get<std::string>();
    }
    if (entry.policy == CastPolicy::kFp32AppendDtype) {
      if (entry.redispatch.empty()) {
        fail(line, op, "fp32_append_dtype needs \"redispatch\": the overload that takes the appended dtype");
        continue;
      }
      if (!valid_op_name(entry.redispatch)) {
        fail(line, op, "\"redispatch\" is not an operator name: \"" + entry.redispatch + "\"");
        continue;
      }
    } else if (!entry.redispatch.empty()) {
      fail(line, op, "\"redispatch\" applies only to fp32_append_dtype");
      continue;
    }
    if (entry.policy == CastPolicy::kBanned && entry.message.empty())
      entry.message = op + " is banned under autocast by castscope policy " + entry.origin;
    device.ops.emplace(op, std::move(entry));
  }
  if (result.errors.empty()) result.devices.emplace(device.device, std::move(device));
  return result;
}

PolicySet load_policy_files(const std::vector<std::string>& paths) {
  PolicySet merged;
  for (const auto& path : paths) {
    std::ifstream in(path, std::ios::binary);
    if (!in) {
      merged.errors.push_back(PolicyError{path, 0, "", "cannot read the policy file"});
      continue;
    }
    std::stringstream buffer;
    buffer << in.rdbuf();
    PolicySet one = parse_policy_text(buffer.str(), path);
    for (auto& error : one.errors) merged.errors.push_back(std::move(error));
    for (auto& [name, device] : one.devices) {
      auto& into = merged.devices[name];
      into.device = name;
      if (into.torch_version.empty()) into.torch_version = device.torch_version;
      for (auto& [op, entry] : device.ops) into.ops[op] = std::move(entry);
    }
  }
  return merged;
}

}  // namespace castscope
