#include "agent/src/dispatch/policy_check.h"

#include <ATen/core/dispatch/Dispatcher.h>

#include <set>

#include "agent/src/context/autocast_keys.h"

namespace castscope {
namespace {

std::string full_name(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

bool op_exists(const std::string& op) {
  const auto dot = op.find('.', op.find("::"));
  c10::OperatorName name = dot == std::string::npos ? c10::OperatorName(op, "") : c10::OperatorName(op.substr(0, dot), op.substr(dot + 1));
  return c10::Dispatcher::singleton().findSchema(name).has_value();
}

}  // namespace

std::vector<PolicyFinding> check_policy_against_dispatcher(const PolicySet& policies) {
  using Severity = PolicyFinding::Severity;
  std::vector<PolicyFinding> findings;
  for (const auto& autocast_device : kAutocastDevices) {
    const char* device_name = autocast_device.name;
    const c10::DispatchKey key = autocast_device.key;
    auto found = policies.devices.find(device_name);
    if (found == policies.devices.end()) continue;
    const DevicePolicy& device = found->second;
    std::set<std::string> native;
    for (const auto& name : c10::Dispatcher::singleton().getRegistrationsForDispatchKey(key)) native.insert(full_name(name));
    for (const auto& op : native) {
      if (device.ops.count(op) == 0)
        findings.push_back({Severity::kWarning, "missing_policy", device_name, op,
                            op + " has a native " + c10::toString(key) +
                                " kernel but no policy entry: native autocast handles it and castscope does not log it; "
                                "add it to the policy (or regenerate policies/ for this torch)"});
    }
    for (const auto& [op, entry] : device.ops) {
      if (!op_exists(op)) {
        const bool aten = op.rfind("aten::", 0) == 0;
        findings.push_back({Severity::kWarning, "unknown_op", device_name, op,
                            entry.origin + ": " + op +
                                (aten ? " does not exist in this torch (policy written for another version?)"
                                      : " is not registered (yet): castscope casts it once its library is loaded")});
      }
      if (entry.policy == CastPolicy::kFp32AppendDtype && !op_exists(entry.redispatch))
        findings.push_back({Severity::kError, "unresolved_redispatch", device_name, op,
                            entry.origin + ": " + op + ": redispatch overload " + entry.redispatch + " does not exist"});
    }
  }
  return findings;
}

}  // namespace castscope
