#include "agent/src/policy/policy.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <string_view>

#include "common/json/json_limits.h"
#include "common/names/named_values.h"

namespace castscope {
namespace {

using json = nlohmann::json;

constexpr int kPolicyFormatVersion = 1;

constexpr NamedValue<CastPolicy> kPolicies[] = {
    {"lower_precision_fp", CastPolicy::kLowerPrecisionFp},
    {"fp32", CastPolicy::kFp32},
    {"fp32_set_opt_dtype", CastPolicy::kFp32SetOptDtype},
    {"fp32_append_dtype", CastPolicy::kFp32AppendDtype},
    {"promote", CastPolicy::kPromote},
    {"banned", CastPolicy::kBanned},
    {"keep_native", kKeepNativePolicy},
};

constexpr NamedValue<DType> kDTypes[] = {
    {"float32", DType::kFloat32},   {"float16", DType::kFloat16},      {"bfloat16", DType::kBfloat16},
    {"float64", DType::kFloat64},   {"int64", DType::kInt64},          {"int32", DType::kInt32},
    {"int16", DType::kInt16},       {"int8", DType::kInt8},            {"uint8", DType::kUint8},
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

// Each object key of a JSON text as written (quotes included) and its line,
// in document order: the order in which a parser reports keys. Only valid
// JSON is scanned, so outside strings a '"' always opens one, and strings
// hold no raw newline.
struct RawKey {
  std::string_view spelling;
  int line = 0;
};
std::vector<RawKey> raw_keys(std::string_view text) {
  std::vector<RawKey> keys;
  int line = 1;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    if (text[pos] == '\n') ++line;
    if (text[pos] != '"') continue;
    size_t end = pos + 1;
    while (end < text.size() && text[end] != '"') end += text[end] == '\\' ? 2 : 1;
    end = std::min(end + 1, text.size());
    size_t after = end;
    while (after < text.size() && (text[after] == ' ' || text[after] == '\t' || text[after] == '\n' || text[after] == '\r')) ++after;
    if (after < text.size() && text[after] == ':') keys.push_back(RawKey{text.substr(pos, end - pos), line});
    pos = end - 1;
  }
  return keys;
}

// Object keys as a JSON reader sees them (escapes decoded), each with its
// line, by JSON pointer. nlohmann::json keeps the last of two equal keys
// without a word, and a file whose meaning depends on its reader is no
// policy: every repeated key in any object (an op twice, an op spelled once
// plainly and once with a JSON escape, a second "ops") is collected here, in
// a SAX pass over text the DOM parser has already accepted.
class KeyScan final : public json::json_sax_t {
 public:
  struct Duplicate {
    json::json_pointer object;  // where both keys are
    std::string key;            // decoded
    std::string spelling, first_spelling;  // as written, quotes included
    int line = 0, first_line = 0;
  };

  explicit KeyScan(std::string_view text) : raw_(raw_keys(text)) {}

  // 0 when the key is not in the text.
  int line(const json::json_pointer& key) const {
    const auto it = lines_.find(key.to_string());
    return it == lines_.end() ? 0 : it->second;
  }
  const std::vector<Duplicate>& duplicates() const { return duplicates_; }

  bool key(string_t& key) override {
    const size_t ordinal = keys_++;
    Frame& frame = stack_.back();
    frame.last_key = key;
    const RawKey here = raw(ordinal);
    lines_.emplace((frame.path / key).to_string(), here.line);
    const auto [first, inserted] = frame.seen.emplace(key, ordinal);
    if (!inserted) {
      const RawKey before = raw(first->second);
      duplicates_.push_back(Duplicate{frame.path, key, std::string(here.spelling), std::string(before.spelling),
                                      here.line, before.line});
    }
    return true;
  }
  bool start_object(std::size_t) override { return push(true); }
  bool start_array(std::size_t) override { return push(false); }
  bool end_object() override { return pop(); }
  bool end_array() override { return pop(); }
  bool null() override { return value(); }
  bool boolean(bool) override { return value(); }
  bool number_integer(number_integer_t) override { return value(); }
  bool number_unsigned(number_unsigned_t) override { return value(); }
  bool number_float(number_float_t, const string_t&) override { return value(); }
  bool string(string_t&) override { return value(); }
  bool binary(binary_t&) override { return value(); }
  bool parse_error(std::size_t, const std::string&, const nlohmann::detail::exception&) override { return false; }

 private:
  struct Frame {
    bool object = false;
    json::json_pointer path;
    std::map<std::string, size_t> seen;  // key -> ordinal of its first occurrence
    std::string last_key;
    size_t elements = 0;  // arrays: values so far
  };

  RawKey raw(size_t ordinal) const { return ordinal < raw_.size() ? raw_[ordinal] : RawKey{}; }
  // The place of the value that starts now.
  json::json_pointer next_path() {
    if (stack_.empty()) return json::json_pointer();
    Frame& parent = stack_.back();
    return parent.object ? parent.path / parent.last_key : parent.path / parent.elements++;
  }
  bool push(bool object) {
    json::json_pointer path = next_path();
    stack_.push_back(Frame{object, std::move(path), {}, {}, 0});
    return true;
  }
  bool pop() {
    stack_.pop_back();
    return true;
  }
  bool value() {
    if (!stack_.empty() && !stack_.back().object) ++stack_.back().elements;
    return true;
  }

  std::vector<RawKey> raw_;
  size_t keys_ = 0;
  std::vector<Frame> stack_;
  std::map<std::string, int> lines_;  // JSON pointer of a key -> its line (first occurrence)
  std::vector<Duplicate> duplicates_;
};

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

const char* file_kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  return "not a regular file";
}

// The whole file, or an error saying why not. Policy files must be regular
// files: a directory would read as nothing ("not valid JSON"), and opening a
// FIFO for reading blocks until someone writes to it, so stat() decides first,
// and the file is opened non-blocking and checked again in case it was
// swapped in between.
std::string read_policy_file(const std::string& path, std::string& text) {
  auto refused = [](const char* kind) {
    return std::string("is ") + kind + ", not a policy file; give the path of a JSON policy file";
  };
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) return std::string("cannot read the policy file: ") + std::strerror(errno);
  if (!S_ISREG(info.st_mode)) return refused(file_kind(info.st_mode));
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) return std::string("cannot read the policy file: ") + std::strerror(errno);
  std::string error;
  if (::fstat(fd, &info) != 0) {
    error = std::string("cannot read the policy file: ") + std::strerror(errno);
  } else if (!S_ISREG(info.st_mode)) {
    error = refused(file_kind(info.st_mode));
  } else {
    char buffer[1 << 16];
    for (;;) {
      const ssize_t n = ::read(fd, buffer, sizeof(buffer));
      if (n > 0 && text.size() + static_cast<size_t>(n) > kMaxPolicyFileBytes) {  // checked as read: files grow
        error = "is larger than " + std::to_string(kMaxPolicyFileBytes >> 20) +
                " MiB; castscope reads policy files of at most that size";
        break;
      }
      if (n > 0) {
        text.append(buffer, static_cast<size_t>(n));
      } else if (n == 0) {
        break;
      } else if (errno != EINTR) {
        error = std::string("cannot read the policy file: ") + std::strerror(errno);
        break;
      }
    }
  }
  ::close(fd);
  return error;
}

// Adds errors about one entry of a policy file, with its file and line.
struct EntryErrors {
  std::vector<PolicyError>& errors;
  const std::string& file;
  int line;
  const std::string& entry;
  void operator()(const std::string& message) const { errors.push_back(PolicyError{file, line, entry, message}); }
};

// An entry's value: a policy name, or an object with a string "policy" and
// no keys but `keys`, each a string. The policy's name; nullopt after
// reporting why not.
std::optional<std::string> entry_policy_name(const json& spec, std::initializer_list<std::string_view> keys,
                                             const EntryErrors& fail) {
  if (spec.is_string()) return spec.get<std::string>();
  if (!spec.is_object() || !spec.contains("policy") || !spec["policy"].is_string()) {
    fail("must be a policy name or an object with \"policy\"");
    return std::nullopt;
  }
  std::string expected = "policy";
  for (std::string_view key : keys) expected += ", " + std::string(key);
  bool bad_key = false;
  for (const auto& [key, value] : spec.items()) {
    if (key != "policy" && std::find(keys.begin(), keys.end(), key) == keys.end()) {
      fail("unknown key \"" + key + "\" (expected " + expected + ")");
      bad_key = true;
    } else if (!value.is_string()) {
      fail("\"" + key + "\" must be a string");
      bad_key = true;
    }
  }
  if (bad_key) return std::nullopt;
  return spec["policy"].get<std::string>();
}

// An object entry's "dtype" (lower_precision_fp only): kUnspecified when it
// has none; nullopt after reporting a bad one.
std::optional<DType> entry_dtype(const json& spec, CastPolicy policy, const EntryErrors& fail) {
  if (!spec.is_object() || !spec.contains("dtype")) return DType::kUnspecified;
  const auto name = spec["dtype"].get<std::string>();
  const DType dtype = dtype_from_name(name);
  if (dtype != DType::kFloat16 && dtype != DType::kBfloat16) {
    fail("unknown dtype \"" + name + "\" (a lower-precision dtype is float16 or bfloat16)");
    return std::nullopt;
  }
  if (policy != CastPolicy::kLowerPrecisionFp) {
    fail("\"dtype\" applies only to lower_precision_fp");
    return std::nullopt;
  }
  return dtype;
}

// "package.module.Name" (attribute Name of module package.module) or
// "package.module:Class.attr" (the colon says where the module ends):
// dotted Python identifiers, a module and at least one attribute.
bool valid_python_path(const std::string& path) {
  auto dotted_identifiers = [](std::string_view text) {
    size_t start = 0;
    while (start <= text.size()) {
      const size_t end = std::min(text.find('.', start), text.size());
      if (end == start) return false;
      const char first = text[start];
      if (!((first >= 'a' && first <= 'z') || (first >= 'A' && first <= 'Z') || first == '_')) return false;
      for (size_t i = start; i < end; ++i) {
        const char c = text[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_')) return false;
      }
      start = end + 1;
    }
    return true;
  };
  const std::string_view text(path);
  if (const size_t colon = text.find(':'); colon != std::string_view::npos)
    return dotted_identifiers(text.substr(0, colon)) && dotted_identifiers(text.substr(colon + 1));
  return dotted_identifiers(text) && text.find('.') != std::string_view::npos;
}

// The "modules" or "functions" object of a policy file into result.callables.
void parse_callables(const json& section, CallableKind kind, const std::string& section_name, const std::string& device,
                     const std::string& file, const KeyScan& keys, PolicySet& result) {
  auto fail = [&](int line, const std::string& entry, const std::string& message) {
    result.errors.push_back(PolicyError{file, line, entry, message});
  };
  for (const auto& [target, spec] : section.items()) {
    const int line = keys.line(json::json_pointer("/" + section_name) / target);
    if (!valid_python_path(target)) {
      fail(line, target, std::string("not a Python path: expected \"package.module.") +
                             (kind == CallableKind::kModule ? "ModuleClass" : "function") + "\" (a module, then the " +
                             (kind == CallableKind::kModule ? "nn.Module class" : "function") +
                             " in it) or \"package.module:Outer.name\"");
      continue;
    }
    CallableOverlay overlay;
    overlay.kind = kind;
    overlay.target = target;
    overlay.device = device;
    overlay.file = file;
    overlay.line = line;
    const EntryErrors entry_errors{result.errors, file, line, target};
    const std::optional<std::string> policy = entry_policy_name(spec, {"output", "dtype", "note"}, entry_errors);
    if (!policy) continue;
    overlay.policy = policy_from_name(*policy);
    if (overlay.policy != CastPolicy::kLowerPrecisionFp && overlay.policy != CastPolicy::kFp32 &&
        overlay.policy != CastPolicy::kPromote) {
      fail(line, target, "unknown policy \"" + *policy + "\" for a " + callable_kind_name(kind) +
                             " overlay (expected one of lower_precision_fp, fp32, promote)");
      continue;
    }
    if (spec.is_object() && spec.contains("output")) {
      const auto output = spec["output"].get<std::string>();
      if (output == "as_is") {
        overlay.output = OutputCast::kAsIs;
      } else if (output == "input_dtype") {
        overlay.output = OutputCast::kInputDtype;
      } else {
        fail(line, target, "unknown output \"" + output + "\" (expected as_is or input_dtype)");
        continue;
      }
    }
    const std::optional<DType> dtype = entry_dtype(spec, overlay.policy, entry_errors);
    if (!dtype) continue;
    overlay.dtype = *dtype;
    result.callables[{kind, target}] = std::move(overlay);
  }
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
  for (const auto& [key, callable] : set.callables) {  // sorted by (kind, target)
    text += std::string(callable_kind_name(callable.kind)) + "\t" + callable.target + "\t" + policy_name(callable.policy) +
            "\t" + dtype_name(callable.dtype) + "\t" + output_cast_name(callable.output) + "\t" + callable.device + "\n";
  }
  return text;
}

const char* callable_kind_name(CallableKind kind) { return kind == CallableKind::kModule ? "module" : "function"; }

const char* output_cast_name(OutputCast output) { return output == OutputCast::kAsIs ? "as_is" : "input_dtype"; }

CastPolicy policy_from_name(std::string_view name) {
  return value_named(kPolicies, name).value_or(CastPolicy::kUnspecified);
}

const char* policy_name(CastPolicy policy) { return name_of(kPolicies, policy, "unspecified"); }

DType dtype_from_name(std::string_view name) { return value_named(kDTypes, name).value_or(DType::kUnspecified); }

const char* dtype_name(DType dtype) { return name_of(kDTypes, dtype, "unspecified"); }

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
  if (text.size() > kMaxPolicyFileBytes) {
    fail(0, "", "is " + std::to_string(text.size()) + " bytes; castscope reads policy files of at most " +
                    std::to_string(kMaxPolicyFileBytes >> 20) + " MiB");
    return result;
  }
  if (const JsonNesting nesting = scan_json_nesting(text, kMaxPolicyNesting); nesting.line != 0) {
    fail(nesting.line, "", "nested deeper than " + std::to_string(kMaxPolicyNesting) +
                               " levels of arrays and objects (a policy file needs 3); not read further");
    return result;
  }
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
  KeyScan keys(text);
  json::sax_parse(text.begin(), text.end(), &keys);
  for (const KeyScan::Duplicate& d : keys.duplicates()) {
    std::string first = "first at line " + std::to_string(d.first_line);
    if (d.spelling != d.first_spelling)
      first += " as " + d.first_spelling + "; JSON reads " + d.spelling + " as the same key";
    const std::string where = d.object.to_string();
    if (where == "/ops" || where == "/modules" || where == "/functions") {
      fail(d.line, d.key, "duplicate entry (" + first + "); keep one");
    } else if (where.empty()) {
      fail(d.line, "", "duplicate top-level key \"" + d.key + "\" (" + first + "); JSON readers keep only one: " +
                           (d.key == "ops" ? "merge the two objects into one" : "keep one"));
    } else if (const std::string parent = d.object.parent_pointer().to_string();
               parent == "/ops" || parent == "/modules" || parent == "/functions") {
      fail(d.line, d.object.back(), "duplicate key \"" + d.key + "\" (" + first + "); keep one");
    } else {
      fail(d.line, "", "duplicate key \"" + d.key + "\" in " + where + " (" + first + "); keep one");
    }
  }
  if (!result.errors.empty()) return result;  // which of two values counts is not ours to guess
  auto line_of = [&](const std::string& key) { return keys.line(json::json_pointer() / key); };
  for (const auto& [key, value] : doc.items()) {
    if (key != "castscope_policy" && key != "device" && key != "torch_version" && key != "ops" && key != "description" &&
        key != "modules" && key != "functions")
      fail(line_of(key), "", "unknown top-level key \"" + key +
                                 "\" (expected castscope_policy, device, torch_version, ops, modules, functions, description)");
  }
  if (!doc.contains("castscope_policy") || !doc["castscope_policy"].is_number_integer() ||
      doc["castscope_policy"].get<int64_t>() != kPolicyFormatVersion) {
    fail(line_of("castscope_policy"), "", "\"castscope_policy\" must be 1 (the policy format version this castscope reads)");
  }
  // A file of module and function overlays alone needs no "device" or "ops":
  // without a device its entries apply under any device's autocast.
  const bool has_ops = doc.contains("ops");
  const bool has_callables = doc.contains("modules") || doc.contains("functions");
  DevicePolicy device;
  if (has_ops || doc.contains("device")) {
    if (!doc.contains("device") || !doc["device"].is_string() ||
        device_from_name(doc["device"].get<std::string>()) == DeviceKind::kUnspecified) {
      fail(line_of("device"), "", "\"device\" must be one of cpu, cuda, xpu, mps");
    } else {
      device.device = doc["device"].get<std::string>();
    }
  }
  if (doc.contains("torch_version") && doc["torch_version"].is_string()) device.torch_version = doc["torch_version"].get<std::string>();
  if (!has_ops && !has_callables) {
    fail(0, "", "\"ops\" must be an object mapping op names to policies (or give \"modules\" or \"functions\")");
    return result;
  }
  if (has_ops && !doc["ops"].is_object()) {
    fail(line_of("ops"), "", "\"ops\" must be an object mapping op names to policies");
    return result;
  }
  for (const auto& [section, kind] : {std::pair{"modules", CallableKind::kModule}, std::pair{"functions", CallableKind::kFunction}}) {
    if (!doc.contains(section)) continue;
    if (!doc[section].is_object()) {
      fail(line_of(section), "", std::string("\"") + section + "\" must be an object mapping Python paths to policies");
      continue;
    }
    parse_callables(doc[section], kind, section, device.device, file, keys, result);
  }
  if (!has_ops) {
    if (!result.errors.empty()) result.callables.clear();
    return result;
  }

  for (const auto& [op, spec] : doc["ops"].items()) {
    const int line = keys.line(json::json_pointer("/ops") / op);
    if (!valid_op_name(op)) {
      fail(line, op, "not an operator name: expected \"namespace::name\" or \"namespace::name.overload\"");
      continue;
    }
    PolicyEntry entry;
    entry.op = op;
    entry.origin = file + ":" + std::to_string(line);
    const EntryErrors entry_errors{result.errors, file, line, op};
    const std::optional<std::string> policy =
        entry_policy_name(spec, {"dtype", "redispatch", "message", "note"}, entry_errors);
    if (!policy) continue;
    entry.policy = policy_from_name(*policy);
    if (entry.policy == CastPolicy::kUnspecified) {
      fail(line, op, "unknown policy \"" + *policy + "\" (expected one of " + policy_names_list() + ")");
      continue;
    }
    const std::optional<DType> dtype = entry_dtype(spec, entry.policy, entry_errors);
    if (!dtype) continue;
    entry.dtype = *dtype;
    if (spec.is_object()) {
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
  if (!result.errors.empty()) result.callables.clear();
  return result;
}

PolicySet load_policy_files(const std::vector<std::string>& paths) {
  PolicySet merged;
  for (const auto& path : paths) {
    std::string text;
    if (std::string error = read_policy_file(path, text); !error.empty()) {
      merged.errors.push_back(PolicyError{path, 0, "", error});
      continue;
    }
    PolicySet one = parse_policy_text(text, path);
    for (auto& error : one.errors) merged.errors.push_back(std::move(error));
    for (auto& [name, device] : one.devices) {
      auto& into = merged.devices[name];
      into.device = name;
      if (into.torch_version.empty()) into.torch_version = device.torch_version;
      for (auto& [op, entry] : device.ops) into.ops[op] = std::move(entry);
    }
    for (auto& [key, callable] : one.callables) merged.callables[key] = std::move(callable);
  }
  return merged;
}

}  // namespace castscope
