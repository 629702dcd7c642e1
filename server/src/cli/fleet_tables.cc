#include "server/src/cli/fleet_tables.h"

#include <algorithm>
#include <ctime>
#include <utility>
#include <vector>

namespace castscope::collector {

namespace {

using json = nlohmann::json;
using Columns = std::vector<std::pair<std::string, std::string>>;  // key, title

std::string cell(const json& v) {
  if (v.is_null()) return "";
  return v.is_string() ? v.get<std::string>() : v.dump();
}

void print_table(const json& rows, const Columns& columns, std::ostream& out) {
  std::vector<size_t> widths;
  for (const auto& [key, title] : columns) widths.push_back(title.size());
  std::vector<std::vector<std::string>> cells;
  for (const json& row : rows) {
    std::vector<std::string>& line = cells.emplace_back();
    for (size_t c = 0; c < columns.size(); ++c) {
      std::string text = row.contains(columns[c].first) ? cell(row[columns[c].first]) : "";
      widths[c] = std::max(widths[c], text.size());
      line.push_back(std::move(text));
    }
  }
  const auto print_line = [&](const auto& texts) {
    std::string line;
    for (size_t c = 0; c < texts.size(); ++c) {
      line += texts[c];
      if (c + 1 < texts.size()) line += std::string(widths[c] + 2 - texts[c].size(), ' ');
    }
    out << line << "\n";
  };
  std::vector<std::string> titles;
  for (const auto& [key, title] : columns) titles.push_back(title);
  print_line(titles);
  for (const auto& line : cells) print_line(line);
}

// Unix seconds as UTC, as people read a time ("2026-11-29 03:50:17Z").
std::string utc(int64_t unix_s) {
  if (unix_s <= 0) return "";
  const std::time_t t = unix_s;
  std::tm tm{};
  gmtime_r(&t, &tm);
  char text[32];
  std::strftime(text, sizeof text, "%Y-%m-%d %H:%M:%SZ", &tm);
  return text;
}

std::string join(const std::vector<std::string>& parts, const std::string& between) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) out += (i > 0 ? between : "") + parts[i];
  return out;
}

// A rank-divergence's sides on one line: "[0] float32->bfloat16 x3 | [1] float32->float16 x3".
std::string sides_text(const json& sides) {
  std::vector<std::string> out;
  for (const json& side : sides) {
    std::vector<std::string> casts;
    for (const json& c : side.value("casts", json::array()))
      casts.push_back(c.value("src", "") + "->" + c.value("dst", "") + " x" + std::to_string(c.value("count", 0)) +
                      (c.value("mode", "") == "eager" ? "" : " (" + c.value("mode", "") + ")"));
    out.push_back(side.value("ranks", json::array()).dump() + " " + (casts.empty() ? "nothing" : join(casts, ", ")));
  }
  return join(out, " | ");
}

json readable_jobs(const json& jobs) {
  json rows = json::array();
  for (json row : jobs) {
    row["first_seen"] = utc(row.value("first_seen_unix_s", int64_t{0}));
    row["last_seen"] = utc(row.value("last_seen_unix_s", int64_t{0}));
    std::vector<std::string> nodes;
    for (const json& node : row.value("nodes", json::array())) nodes.push_back(node.value("node", ""));
    std::sort(nodes.begin(), nodes.end());
    nodes.erase(std::unique(nodes.begin(), nodes.end()), nodes.end());
    row["nodes"] = join(nodes, ",");
    rows.push_back(std::move(row));
  }
  return rows;
}

json readable_findings(const json& findings) {
  json rows = json::array();
  for (json row : findings) {
    if (row.contains("sides")) row["sides"] = sides_text(row["sides"]);
    rows.push_back(std::move(row));
  }
  return rows;
}

const Columns kFindingColumns = {{"kind", "KIND"}, {"severity", "SEVERITY"}, {"job", "JOB"},   {"file", "FILE"},
                                 {"line", "LINE"}, {"ranks", "RANKS"},       {"summary", "SUMMARY"}, {"sides", "SIDES"}};

}  // namespace

void print_fleet_table(const std::string& what, const json& answer, const std::string& job_a, const std::string& job_b,
                       std::ostream& out) {
  if (what == "jobs")
    print_table(readable_jobs(answer),
                {{"job", "JOB"}, {"running", "RUNNING"}, {"nodes", "NODES"}, {"ranks", "RANKS"}, {"casts", "DECISIONS"},
                 {"findings", "FINDINGS"}, {"first_seen", "FIRST SEEN (UTC)"}, {"last_seen", "LAST SEEN (UTC)"}},
                out);
  if (what == "sites")
    print_table(answer,
                {{"count", "DECISIONS"}, {"bytes", "BYTES"}, {"hits", "HITS"}, {"misses", "MISSES"},
                 {"stale_hits", "STALE"}, {"backward", "BACKWARD"}, {"file", "FILE"}, {"line", "LINE"}, {"op", "OP"},
                 {"arg", "ARG"}, {"src", "FROM"}, {"dst", "TO"}, {"outcome", "OUTCOME"}, {"mode", "MODE"},
                 {"jobs", "JOBS"}},
                out);
  if (what == "findings") print_table(readable_findings(answer), kFindingColumns, out);
  if (what == "compare") {
    if (answer.empty()) {
      out << "no difference: " << job_a << " and " << job_b << " cast alike at every site\n";
      return;
    }
    print_table(answer,
                {{"file", "FILE"}, {"line", "LINE"}, {"op", "OP"}, {"arg", "ARG"}, {"src", "FROM"}, {"dst", "TO"},
                 {"mode", "MODE"}, {"a", job_a}, {"b", job_b}},
                out);
  }
  if (what == "job") {
    out << "job " << answer.value("job", "") << ": " << answer.value("ranks", json::array()).size() << " processes\n";
    print_table(answer.value("ranks", json::array()),
                {{"rank", "RANK"}, {"local_rank", "LOCAL"}, {"world_size", "WORLD"}, {"node", "NODE"}, {"pid", "PID"},
                 {"casts", "DECISIONS"}, {"ops", "OPS"}, {"events_dropped", "DROPPED"}, {"finished", "FINISHED"},
                 {"viewer", "VIEWER"}},
                out);
    const json& findings = answer.value("findings", json::array());
    out << "\n" << findings.size() << " findings\n";
    if (!findings.empty()) print_table(readable_findings(findings), kFindingColumns, out);
  }
}

}  // namespace castscope::collector
