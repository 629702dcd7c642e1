// Compares a loaded policy with the running dispatcher, so drift between a
// policy file and the torch version in the process is reported, never silent.
#pragma once

#include <string>
#include <vector>

#include "agent/src/policy/policy.h"

namespace castscope {

struct PolicyFinding {
  enum class Severity { kWarning, kError };
  Severity severity;
  std::string kind;  // missing_policy, unknown_op, unresolved_redispatch
  std::string device;
  std::string op;
  std::string message;
};

// Must run before castscope registers its own kernels (those would count as
// native registrations otherwise).
std::vector<PolicyFinding> check_policy_against_dispatcher(const PolicySet& policies);

}  // namespace castscope
