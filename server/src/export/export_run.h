// `castscope-collector export`: one run of a store written as a Perfetto
// trace, a Chrome trace, or both, in one pass over its events
// (docs/export.md). Each file appears complete or not at all.
#pragma once

#include <string>

#include "server/src/export/trace_writer.h"
#include "server/src/status.h"

namespace castscope::collector {

struct ExportOptions {
  std::string db_path;
  std::string run_id;
  std::string perfetto_path;  // empty: no Perfetto trace
  std::string chrome_path;    // empty: no Chrome trace
};

struct ExportSummary {
  uint64_t agents = 0;
  uint64_t events = 0;  // read from the store
  TraceCounts perfetto, chrome;
};

// NOT_FOUND: no such store or run (the message names it); FAILED_PRECONDITION:
// an output file cannot be created; other codes: a read or write failed.
Status export_run(const ExportOptions& options, ExportSummary& summary);

}  // namespace castscope::collector
