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

}  // namespace castscope
