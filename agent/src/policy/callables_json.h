// The module and function overlays of a policy set as JSON, for the Python
// side to wrap them and to look their modules up before a job runs.
#pragma once
#include <nlohmann/json.hpp>

#include "agent/src/policy/policy.h"

namespace castscope {

nlohmann::json callables_json(const PolicySet& policies);

// What the policy checks (castscope_policy_check, castscope_policy_lint) say
// of a loaded set: its errors (appended to out["errors"]), its ops per device
// and its callable overlays.
void describe_policy_set(const PolicySet& policies, nlohmann::json& out);

}  // namespace castscope
