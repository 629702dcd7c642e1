// The fleet page's data source (`castscope-collector fleet view`,
// docs/fleet.md): answers the page's /api/fleet/WHAT requests (jobs, sites,
// findings, job) from the fleet's PostgreSQL with fleet_queries.h's
// questions, over one connection that the request threads take in turn and
// that is made again when lost. It reads with the reader role: opening it
// refuses a role that can insert into the fleet's tables, and a database it
// cannot reach, with why. The HTTP side (service/http_service.h) knows only
// the answer function the command line wires to it.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json.hpp>

#include "server/src/fleet/pg_connection.h"
#include "server/src/status.h"

namespace castscope::collector::fleet {

class FleetPage {
 public:
  // Connects to `url` (the password from `password_file`, else PGPASSWORD or
  // ~/.pgpass) and checks that the role only reads.
  static Status open(const std::string& url, const std::string& password_file, std::shared_ptr<FleetPage>& out);

  // `what`: jobs, sites, findings or job; `params`: the request's query
  // parameters (since, job, kind). INVALID_ARGUMENT for a bad since= or a
  // job question without job=.
  Status answer(const std::string& what, const std::map<std::string, std::string>& params, nlohmann::json& out);

 private:
  PgTarget target_;
  std::mutex mutex_;
  PgConnection pg_;  // under mutex_
};

}  // namespace castscope::collector::fleet
