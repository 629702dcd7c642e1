#include "server/src/analysis/finding_text.h"

#include <cstdio>

#include "server/src/analysis/analyzers.h"

namespace castscope::collector {

std::string where(const SiteRef& site) {
  std::string arg = site.arg.empty() ? "" : " (" + site.arg + ")";
  return (site.file.empty() ? std::string("<no source location>") : site.file + ":" + std::to_string(site.line)) + " " +
         site.op + arg;
}

void merge_site(SiteRef& site, const SiteRef& row) {
  if (site.op.empty()) {
    site = row;
  } else if (site.arg.empty()) {
    site.arg = row.arg;
  } else if (!row.arg.empty() && ("," + site.arg + ",").find("," + row.arg + ",") == std::string::npos) {
    site.arg += "," + row.arg;
  }
}

LineSite& gather(LineSites& sites, const SiteRow& row) {
  LineSite& s = sites[{row.site.file, row.site.line, row.site.op}];
  merge_site(s.site, row.site);
  s.decisions += row.count;
  return s;
}

bool jit_autocast_cast(const std::string& op) { return op.starts_with("aten::_autocast_to_"); }

std::string joined(const std::set<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

std::string dtype_list(const std::set<std::string>& dtypes) {
  std::string out;
  for (const auto& d : dtypes) out += (out.empty() ? "" : "/") + d;
  return out;
}

std::set<std::string> dtype_names(const std::set<v1::DType>& dtypes) {
  std::set<std::string> names;
  for (const auto dtype : dtypes) names.insert(dtype_name(dtype));
  return names;
}

std::string milliseconds(uint64_t ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f ms", static_cast<double>(ns) / 1e6);
  return text;
}

std::string percent(uint64_t part, uint64_t whole) {
  char text[32];
  std::snprintf(text, sizeof text, "%.3g%%", whole == 0 ? 0.0 : 100.0 * static_cast<double>(part) / static_cast<double>(whole));
  return text;
}

}  // namespace castscope::collector
