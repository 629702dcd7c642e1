// CLI11 validators shared by castscope-collector and castscope-forwarder.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "common/cli/host_port.h"

namespace castscope::cli {

// A number of digits only, rewritten without leading zeros before CLI11
// converts it: CLI11 reads integers with strtoull(..., 0), which takes "010"
// as octal and "-1" as 2^64-1. Goes first (transform), ranges after (check).
inline CLI::Validator decimal_number(size_t max_digits = 19) {
  return CLI::Validator(
      [max_digits](std::string& text) -> std::string {
        if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos)
          return "expected a decimal number, got \"" + text + "\"";
        const size_t first = text.find_first_not_of('0');
        text = first == std::string::npos ? "0" : text.substr(first);
        if (text.size() > max_digits) return "number too large: " + text;
        return "";
      },
      "", "DECIMAL");
}

inline CLI::Validator non_empty() {
  return CLI::Validator(
      [](std::string& text) -> std::string { return text.empty() ? "must not be empty" : ""; }, "", "NON_EMPTY");
}

// HOST:PORT, or unix:PATH where `unix_ok` (gRPC); port 0 only where `port_zero_ok`.
inline CLI::Validator address(bool port_zero_ok, bool unix_ok) {
  return CLI::Validator(
      [port_zero_ok, unix_ok](std::string& text) -> std::string {
        if (!unix_ok && text.starts_with("unix:")) return "expected HOST:PORT";
        std::string error = grpc_address_error(text, port_zero_ok);
        return error.empty() ? "" : "\"" + text + "\": " + error;
      },
      "", unix_ok ? "HOST:PORT|unix:PATH" : "HOST:PORT");
}

}  // namespace castscope::cli
