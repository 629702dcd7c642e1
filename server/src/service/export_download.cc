#include "server/src/service/export_download.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <system_error>
#include <vector>

#include "server/src/export/export_run.h"
#include "server/src/report/run_report.h"

namespace castscope::collector {

std::string download_stem(const std::string& run_id) {
  std::string stem;
  for (const char c : run_id.substr(0, 64)) {
    const bool kept = std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '.' || c == '-' || c == '_';
    stem += kept ? c : '_';
  }
  if (stem.empty() || stem[0] == '.') stem.insert(0, "run");
  return stem;
}

Status make_download(const std::string& db_path, const std::string& run_id, const std::string& format, Download& out) {
  const std::string stem = "castscope-" + download_stem(run_id);
  if (format == "report") {
    nlohmann::json report;
    if (Status s = build_run_report(db_path, run_id, report); !s.ok()) return s;
    out.filename = stem + "-report.json";
    out.content_type = "application/json";
    out.body = report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
    return {};
  }
  if (format != "perfetto" && format != "chrome")
    return Status::invalid_argument("parameter format: expected report, perfetto or chrome, got '" + format.substr(0, 64) + "'");
  // A folder only this user can read (mkdtemp makes it 0700): the trace holds the run's events.
  std::string pattern = (std::filesystem::temp_directory_path() / "castscope-export-XXXXXX").string();
  std::vector<char> name(pattern.begin(), pattern.end());
  name.push_back('\0');
  if (mkdtemp(name.data()) == nullptr)
    return Status::internal("export: cannot make a temporary folder under " +
                            std::filesystem::temp_directory_path().string() + ": " + std::strerror(errno));
  out.folder = name.data();
  ExportOptions options{db_path, run_id, "", ""};
  if (format == "perfetto") {
    out.file = out.folder / "trace.perfetto-trace";
    options.perfetto_path = out.file.string();
    out.filename = stem + ".perfetto-trace";
    out.content_type = "application/octet-stream";
  } else {
    out.file = out.folder / "trace.json";
    options.chrome_path = out.file.string();
    out.filename = stem + "-chrome-trace.json";
    out.content_type = "application/json";
  }
  ExportSummary summary;
  if (Status s = export_run(options, summary); !s.ok()) {
    std::error_code ignored;
    std::filesystem::remove_all(out.folder, ignored);
    out.folder.clear();
    return s;
  }
  return {};
}

}  // namespace castscope::collector
