// Policy files: which op gets which autocast cast policy, per device type.
//
// Parsing is torch-free so it can be unit-tested and fuzzed anywhere; the
// check against the running dispatcher lives in policy_check.h.
#pragma once

#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "agent/src/record/cast_record.h"

namespace castscope {

struct PolicyEntry {
  std::string op;  // "ns::name" or "ns::name.overload"
  CastPolicy policy = CastPolicy::kUnspecified;
  // lower_precision_fp only: cast to this dtype instead of the region's
  // lower-precision dtype. kUnspecified: the region's (native behaviour).
  DType dtype = DType::kUnspecified;
  std::string redispatch;  // fp32_append_dtype: overload that takes the dtype
  std::string message;     // banned: the error raised
  std::string origin;      // "file:line", for every message about this entry
};

// A Python module class or function whose calls castscope wraps at attach
// (agent/python/castscope/callable_overlays.py): floating tensor arguments
// cast to the policy's dtype, autocast off inside, like apex's
// float_function / half_function / promote_function.
enum class CallableKind : uint8_t { kModule, kFunction };
enum class OutputCast : uint8_t { kAsIs, kInputDtype };

struct CallableOverlay {
  CallableKind kind = CallableKind::kModule;
  std::string target;  // "torchvision.ops.RoIPool": a module path, then attributes
  CastPolicy policy = CastPolicy::kUnspecified;  // lower_precision_fp, fp32 or promote
  DType dtype = DType::kUnspecified;             // lower_precision_fp: instead of the region's
  OutputCast output = OutputCast::kAsIs;
  std::string device;  // "cpu", ...: only under that device's autocast; "": any
  std::string file;
  int line = 0;
};

struct DevicePolicy {
  std::string device;         // "cpu", "cuda", "xpu", "mps"
  std::string torch_version;  // of the base file; empty for overlays
  std::map<std::string, PolicyEntry> ops;
};

struct PolicyError {
  std::string file;
  int line = 0;  // 0 when the error is about the whole file
  std::string entry;
  std::string message;
  std::string str() const;
};

struct PolicySet {
  std::map<std::string, DevicePolicy> devices;
  // By (kind, target); a later file's entry replaces an earlier one.
  std::map<std::pair<CallableKind, std::string>, CallableOverlay> callables;
  std::vector<PolicyError> errors;
  bool ok() const { return errors.empty(); }
};

// Bounds on a policy file, checked before it is parsed: a real one is a few
// levels deep and tens of kilobytes (the 20 000-entry overlay of
// bench/overlay_check_bench.py is under 1 MiB). Deeper or larger text is
// refused with its file (and line, for depth), never parsed.
inline constexpr size_t kMaxPolicyFileBytes = size_t{4} << 20;
inline constexpr size_t kMaxPolicyNesting = 32;

// Parses one policy file's text. `file` names it in errors.
PolicySet parse_policy_text(std::string_view text, const std::string& file);

// Reads and merges files in order: later entries for the same device and op
// override earlier ones (base lists first, user overlays after).
PolicySet load_policy_files(const std::vector<std::string>& paths);

// One line per device and op with every setting, sorted: equal for equal
// effective policies whatever the files' order, layout or comments. The
// agent reports its hash with each run.
std::string canonical_policy_text(const PolicySet& set);

// Parses "fp32" etc.; kUnspecified when unknown.
CastPolicy policy_from_name(std::string_view name);
const char* callable_kind_name(CallableKind kind);  // "module", "function"
const char* output_cast_name(OutputCast output);    // "as_is", "input_dtype"
const char* policy_name(CastPolicy policy);
DType dtype_from_name(std::string_view name);
const char* dtype_name(DType dtype);
// "cpu" -> DeviceKind::kCpu; kUnspecified when unknown.
DeviceKind device_from_name(std::string_view name);
const char* device_name(DeviceKind device);

}  // namespace castscope
