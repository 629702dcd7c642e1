// Bounds on untrusted JSON text, checked before it is parsed.
//
// nlohmann::json parses nesting iteratively, but what is built from it is
// not free: a policy file of 200 000 nested arrays (400 KB) made the
// duplicate-key scan keep a JSON pointer per level, quadratic in the depth,
// and grew to gigabytes before any error. A castscope file needs a handful of
// levels; anything deeper is refused here with the line where the limit was
// crossed.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>

namespace castscope {

struct JsonNesting {
  size_t deepest = 0;  // arrays and objects open at once, at most (to the limit)
  int line = 0;        // 1-based line where the limit was crossed; 0 when it was not
};

// Scans `text` for brackets outside strings, stopping at the first one that
// opens level `limit + 1`. Invalid JSON is scanned all the same (the parser
// says what is wrong with it afterwards); the scan is linear and allocates
// nothing.
JsonNesting scan_json_nesting(std::string_view text, size_t limit);

// "" when `text` is within both limits; else why not, without a file name
// (the caller knows where the text came from), with the line for depth.
std::string json_limits_error(std::string_view text, size_t max_bytes, size_t max_depth);

// The agent's JSON configuration (CASTSCOPE_CONFIG, castscope_agent_start):
// one flat object with a list or two, read by the agent and first by the
// preload shim. 1 MiB and 8 levels are far beyond any real one.
inline constexpr size_t kMaxAgentConfigBytes = size_t{1} << 20;
inline constexpr size_t kMaxAgentConfigNesting = 8;

}  // namespace castscope
