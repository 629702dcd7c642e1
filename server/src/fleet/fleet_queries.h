// The fleet's questions (docs/fleet.md), asked of PostgreSQL with the reader
// role: `castscope fleet jobs | sites | findings | compare` and the fleet
// page's API answer with these. Each returns JSON; the command line prints it
// as a table or as it is. Each question's answer columns are declared once
// in fleet_queries.cc (pg_rows.h's select_list): its SELECT list is made from
// them and its rows are read by their names.
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "server/src/fleet/pg_connection.h"
#include "server/src/status.h"

namespace castscope::collector::fleet {

struct FleetFilter {
  int64_t since_unix_s = 0;  // 0: all time
  std::string job;           // '' any
  std::string kind;          // findings: '' any
  size_t limit = 50;
};

// A filter's `since` as given (--since, the page's since=): "7d", "12h",
// "30m", "90s" ago, or unix seconds; '' is all time (0). False: none of these.
bool parse_since(const std::string& text, int64_t& out);

// Jobs, newest first: job, first and last seen, running, nodes (with their
// viewers), ranks, casts, findings.
Status query_jobs(PgConnection& pg, const FleetFilter& filter, nlohmann::json& out);
// Top casting sites across jobs: per site and cast kind (src, dst, outcome,
// mode) the decisions, bytes, cache outcomes, backward decisions and jobs.
// An ended job counts whole in the window its end falls in (its summary,
// castscope.job_sites); a running job by the minutes of its rollups.
Status query_sites(PgConnection& pg, const FleetFilter& filter, nlohmann::json& out);
// Findings of jobs (each collector's latest part) and rank-divergence.
Status query_findings(PgConnection& pg, const FleetFilter& filter, nlohmann::json& out);
// Not found unless the fleet has the job (any agent of it shipped): the
// command line's `fleet job` and `fleet compare` refuse a job they never saw,
// as a typo would otherwise read as a job that cast nothing. (The page's
// /api/fleet/job answers no ranks instead: a job may still come.)
Status require_job(PgConnection& pg, const std::string& job);
// Two jobs compared by site: rows whose decisions differ.
Status query_compare(PgConnection& pg, const std::string& job_a, const std::string& job_b, nlohmann::json& out);
// One job: its ranks (agents) and findings.
Status query_job(PgConnection& pg, const std::string& job, nlohmann::json& out);

}  // namespace castscope::collector::fleet
