#include "server/src/fleet/fleet_page.h"

#include "server/src/fleet/fleet_queries.h"

namespace castscope::collector::fleet {

using json = nlohmann::json;

Status FleetPage::open(const std::string& url, const std::string& password_file, std::shared_ptr<FleetPage>& out) {
  auto page = std::make_shared<FleetPage>();
  page->target_.url = url;
  page->target_.password_file = password_file;
  page->target_.application_name = "castscope fleet view";
  if (Status s = page->pg_.connect(page->target_); !s.ok()) return s;
  PgResult writes;
  if (Status s = page->pg_.query("SELECT has_table_privilege(current_user, 'castscope.rollups', 'INSERT')", writes);
      !s.ok())
    return s;
  if (writes.text(0, 0) == "t")
    return Status::invalid_argument("the fleet page reads with the reader role, and " + page->pg_.where() +
                                    " can insert into castscope.rollups: give a role made with `fleet init --reader`");
  out = std::move(page);
  return {};
}

Status FleetPage::answer(const std::string& what, const std::map<std::string, std::string>& params, json& out) {
  const auto param = [&params](const char* key) {
    const auto it = params.find(key);
    return it == params.end() ? std::string() : it->second;
  };
  FleetFilter filter;
  if (!parse_since(param("since"), filter.since_unix_s))
    return Status::invalid_argument("since=" + param("since") + ": expected 7d, 12h, 30m or unix seconds");
  filter.job = param("job");
  filter.kind = param("kind");
  filter.limit = 500;
  std::lock_guard lock(mutex_);
  if (!pg_.connected())
    if (Status s = pg_.connect(target_); !s.ok()) return s;
  json rows;
  Status s;
  if (what == "jobs") s = query_jobs(pg_, filter, rows);
  if (what == "sites") s = query_sites(pg_, filter, rows);
  if (what == "findings") s = query_findings(pg_, filter, rows);
  if (what == "job") {
    if (filter.job.empty()) return Status::invalid_argument("job= is required");
    s = query_job(pg_, filter.job, out);
    return s;
  }
  if (!s.ok()) return s;
  out = {{what, std::move(rows)}};
  return {};
}

}  // namespace castscope::collector::fleet
