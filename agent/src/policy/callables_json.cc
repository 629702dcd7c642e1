#include "agent/src/policy/callables_json.h"

namespace castscope {

nlohmann::json callables_json(const PolicySet& policies) {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& [key, c] : policies.callables) {
    out.push_back({{"kind", callable_kind_name(c.kind)},
                   {"target", c.target},
                   {"policy", policy_name(c.policy)},
                   {"dtype", c.dtype == DType::kUnspecified ? "" : dtype_name(c.dtype)},
                   {"output", output_cast_name(c.output)},
                   {"device", c.device},
                   {"file", c.file},
                   {"line", c.line}});
  }
  return out;
}

void describe_policy_set(const PolicySet& policies, nlohmann::json& out) {
  for (const auto& e : policies.errors) out["errors"].push_back(e.str());
  nlohmann::json ops = nlohmann::json::object();
  for (const auto& [device, policy] : policies.devices) ops[device] = policy.ops.size();
  out["ops_per_device"] = ops;
  out["callable_overlays"] = callables_json(policies);
}

}  // namespace castscope
