// HOST:PORT as castscope's commands take it: a name or IPv4 address, or an
// IPv6 address in brackets, then a decimal port. Checked before anything
// dials or binds, so that "bad:port:x" or "localhost:99999" (which gRPC would
// wrap to another port) is a usage error naming the argument, not a minute
// of waiting on a name lookup.
#pragma once

#include <arpa/inet.h>

#include <string>
#include <string_view>

namespace castscope::cli {

struct HostPort {
  std::string host;  // IPv6 without its brackets
  int port = 0;
};

// "" and `out` filled when `text` is HOST:PORT; else what is wrong with it.
// Port 0 ("any free port") only where `port_zero_ok` (listening).
inline std::string parse_host_port(std::string_view text, bool port_zero_ok, HostPort& out) {
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos) return "expected HOST:PORT";
  std::string_view host = text.substr(0, colon);
  const std::string_view port = text.substr(colon + 1);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
    if (host.empty() || host.find_first_not_of("0123456789abcdefABCDEF:.") != std::string_view::npos)
      return "expected HOST:PORT, with an IPv6 address in brackets ([::1]:PORT)";
  } else if (host.empty() ||
             host.find_first_not_of("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789.-_") !=
                 std::string_view::npos) {
    return "expected HOST:PORT, HOST a name or an address (an IPv6 address in brackets)";
  }
  if (port.empty() || port.size() > 5 || port.find_first_not_of("0123456789") != std::string_view::npos ||
      std::stoi(std::string(port)) > 65535 || (std::stoi(std::string(port)) == 0 && !port_zero_ok))
    return std::string("the port must be a number from ") + (port_zero_ok ? "0" : "1") + " to 65535";
  out.host = std::string(host);
  out.port = std::stoi(std::string(port));
  return "";
}

// The same for an address gRPC takes, which may also be unix:PATH.
inline std::string grpc_address_error(std::string_view text, bool port_zero_ok) {
  if (text.starts_with("unix:")) return text.size() > 5 ? "" : "unix: needs a path (unix:PATH)";
  HostPort ignored;
  return parse_host_port(text, port_zero_ok, ignored);
}

// Whether binding to `host` (as parse_host_port leaves it) listens on
// loopback only: localhost, ::1, or an IPv4 address 127.x.y.z. A name that
// merely starts with "127." (127.evil.example) resolves anywhere: not loopback.
inline bool is_loopback_host(const std::string& host) {
  if (host == "localhost" || host == "::1") return true;
  unsigned char ipv4[4];
  return inet_pton(AF_INET, host.c_str(), ipv4) == 1 && ipv4[0] == 127;
}

}  // namespace castscope::cli
