// The module and function overlays of a policy set as JSON, for the Python
// side to wrap them and to look their modules up before a job runs.
#pragma once
#include <nlohmann/json.hpp>

#include "agent/src/policy/policy.h"

namespace castscope {

nlohmann::json callables_json(const PolicySet& policies);

}  // namespace castscope
