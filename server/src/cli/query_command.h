// `castscope-collector query`: prints what a store holds, as JSON, read
// straight from the file (read-only; fine while a collector writes it) or
// asked of a running collector's Query service.
#pragma once

#include <cstdint>
#include <iosfwd>
#include <string>

namespace castscope::collector {

struct QueryCommand {
  std::string what;       // runs | events | sequences | findings (--run: of one run)
  std::string db;         // read this file...
  std::string collector;  // ...or ask this collector (HOST:PORT)
  std::string token;
  std::string tls_ca_pem;  // non-empty: the collector serves TLS, signed by these roots
  std::string run_id;
  std::string agent_id;
  std::string kind;  // cast | op | cache_sample; empty: all
  std::string op;
  std::string file;
  uint32_t line = 0;
  uint64_t after_seq = 0;
  uint32_t limit = 0;
};

// Prints the answer to `out`, errors to `err`; returns the exit code (0 ok,
// 1 the store or collector failed, 2 a bad request).
int run_query(const QueryCommand& command, std::ostream& out, std::ostream& err);

}  // namespace castscope::collector
