#include "common/json/json_limits.h"

namespace castscope {

JsonNesting scan_json_nesting(std::string_view text, size_t limit) {
  JsonNesting result;
  size_t depth = 0;
  int line = 1;
  for (size_t pos = 0; pos < text.size(); ++pos) {
    const char c = text[pos];
    if (c == '\n') {
      ++line;
    } else if (c == '"') {  // skip the string: brackets inside it are text
      for (++pos; pos < text.size() && text[pos] != '"'; ++pos) {
        if (text[pos] == '\\') ++pos;
        else if (text[pos] == '\n') ++line;  // invalid JSON, but lines must still count
      }
    } else if (c == '[' || c == '{') {
      if (++depth > limit) {
        result.line = line;
        result.deepest = depth;
        return result;
      }
      if (depth > result.deepest) result.deepest = depth;
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return result;
}

std::string json_limits_error(std::string_view text, size_t max_bytes, size_t max_depth) {
  if (text.size() > max_bytes)
    return "is " + std::to_string(text.size()) + " bytes; castscope reads at most " + std::to_string(max_bytes);
  if (const JsonNesting nesting = scan_json_nesting(text, max_depth); nesting.line != 0)
    return "line " + std::to_string(nesting.line) + ": nested deeper than " + std::to_string(max_depth) +
           " levels of arrays and objects; castscope stops reading there";
  return "";
}

}  // namespace castscope
