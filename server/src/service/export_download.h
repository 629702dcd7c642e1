// What the viewer's export buttons download (GET /api/export?run=&format=):
// one run's JSON audit report, Perfetto trace or Chrome trace, made from the
// store as `castscope-collector report` and `export` make them.
#pragma once

#include <filesystem>
#include <string>

#include "server/src/status.h"

namespace castscope::collector {

struct Download {
  std::string filename;      // for Content-Disposition: the run id made safe for a file name
  std::string content_type;
  std::string body;          // the report: made in memory
  std::filesystem::path file;  // a trace: written to a private temporary folder, the caller removes `folder`
  std::filesystem::path folder;
};

// `format`: "report", "perfetto" or "chrome". INVALID_ARGUMENT: another
// format (the message lists them); NOT_FOUND: no such run; others: the
// report or export failed (the message says where).
Status make_download(const std::string& db_path, const std::string& run_id, const std::string& format, Download& out);

// `run_id` as a file name's stem: letters, digits, '.', '-' and '_' kept,
// anything else '_', at most 64 characters, never empty or dot-led.
std::string download_stem(const std::string& run_id);

}  // namespace castscope::collector
