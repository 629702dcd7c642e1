// `castscope-collector serve --ship URL` and `castscope-collector fleet ...`
// (docs/fleet.md): the shipping options of a node collector, and the fleet
// commands: init (schema and roles), retain (drop old day partitions), and
// the questions jobs, sites, findings, compare.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

#include "server/src/fleet/shipper.h"
#include "server/src/service/http_service.h"

namespace castscope::collector {

// --ship URL (or CASTSCOPE_SHIP), --ship-password-file (or
// CASTSCOPE_SHIP_PASSWORD_FILE), --ship-interval-s, --ship-partial-minutes,
// --ship-node, --ship-viewer-url, --ship-backlog-max-rows.
struct ShipOptions {
  std::string url;
  std::string password_file;
  double interval_s = 10;
  bool partial_minutes = false;
  std::string node;
  std::string viewer_url;
  int64_t backlog_max_rows = fleet::ShipperOptions().backlog_max_rows;

  void add_to(CLI::App& app);
  // The shipper's options (url empty: no shipping); an error message, or ''.
  std::string resolve(fleet::ShipperOptions& out) const;
};

struct FleetCommand {
  std::string what;  // init | retain | jobs | sites | findings | compare | job
  std::string url;
  std::string password_file;
  bool json = false;
  std::string since;  // "7d", "12h", "30m", or unix seconds
  std::string job, kind;
  std::string job_a, job_b;
  size_t limit = 50;
  int retain_days = 0;
  std::string writer, writer_password_file, reader, reader_password_file;
};

CLI::App* add_fleet(CLI::App& app, FleetCommand& o);
// The fleet page's answers (fleet view): fleet::FleetPage (fleet/fleet_page.h)
// opened on `url`, as the viewer's FleetAnswer. Refuses a role that can
// write (the page reads with the reader role) and a database it cannot
// reach, with why.
Status fleet_page_answers(const std::string& url, const std::string& password_file, FleetAnswer& out);
// Exit codes: 0 ok, 1 PostgreSQL failed or refused, 2 a bad command line.
int run_fleet(const FleetCommand& o);

}  // namespace castscope::collector
