// How the C APIs (agent.h, policy_lint.h) hand text back: into the caller's
// buffer, NUL-terminated and truncated to fit, returning the full length so
// the caller can retry with a larger buffer.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstring>
#include <string>

namespace castscope {

inline size_t copy_out(const std::string& text, char* buf, size_t len) {
  if (buf != nullptr && len > 0) {
    const size_t n = std::min(text.size(), len - 1);
    std::memcpy(buf, text.data(), n);
    buf[n] = '\0';
  }
  return text.size();
}

}  // namespace castscope
