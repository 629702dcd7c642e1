// CLI11 validators shared by the collector's subcommands.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace castscope::collector {

// A number of digits only, rewritten without leading zeros before CLI11
// converts it: CLI11 reads integers with strtoull(..., 0), which takes "010"
// as octal and "-1" as 2^64-1. Goes first (transform), ranges after (check).
inline CLI::Validator decimal_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
          return "expected a decimal number, got \"" + text + "\"";
        const size_t first = text.find_first_not_of('0');
        text = first == std::string::npos ? "0" : text.substr(first);
        if (text.size() > 19) return "number too large: " + text;
        return "";
      },
      "", "DECIMAL");
}

inline CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& text) -> std::string { return text.empty() ? "must not be empty" : ""; }, "", "NON_EMPTY");
}

}  // namespace castscope::collector
