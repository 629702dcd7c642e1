// libFuzzer target for the policy parser: any bytes must give a PolicySet
// (maybe with errors), never a crash, hang or sanitizer report.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agent/src/policy/policy.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  castscope::PolicySet result = castscope::parse_policy_text(text, "fuzz.json");
  for (const auto& error : result.errors) (void)error.str();
  return 0;
}
