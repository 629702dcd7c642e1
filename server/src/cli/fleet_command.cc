#include "server/src/cli/fleet_command.h"

#include <chrono>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>

#include <nlohmann/json.hpp>

#include "common/cli/exit_status.h"
#include "server/src/cli/fleet_tables.h"
#include "server/src/fleet/fleet_page.h"
#include "server/src/fleet/fleet_queries.h"
#include "server/src/fleet/fleet_schema.h"
#include "server/src/fleet/pg_connection.h"

namespace castscope::collector {

using json = nlohmann::json;

using cli::kExitUsage;

namespace {

int fail(const std::string& what, const Status& s) {
  std::cerr << "castscope-collector fleet " << what << ": " << s.message() << "\n";
  return s.code() == StatusCode::kInvalidArgument ? kExitUsage : 1;
}

Status create_login(fleet::PgConnection& pg, const std::string& user, const std::string& password_file,
                    const char* group) {
  std::string password, verifier;
  if (Status s = fleet::read_password_file(password_file, password); !s.ok()) return s;
  if (Status s = pg.encrypt_password(user, password, verifier); !s.ok()) return s;
  const std::string params[] = {user, verifier, group};
  fleet::PgResult sql;
  if (Status s = pg.query("SELECT CASE WHEN EXISTS (SELECT 1 FROM pg_roles WHERE rolname = $1::text) "
                          "THEN format('ALTER ROLE %I LOGIN PASSWORD %L', $1::text, $2::text) "
                          "ELSE format('CREATE ROLE %I LOGIN PASSWORD %L', $1::text, $2::text) END || '; ' || "
                          "format('GRANT %I TO %I', $3::text, $1::text)",
                          params, sql);
      !s.ok())
    return s;
  return pg.exec(std::string(sql.text(0, 0)));
}

int init(const FleetCommand& o, fleet::PgConnection& pg) {
  Status s = pg.exec("BEGIN; SELECT pg_advisory_xact_lock(hashtext('castscope.init')); "
                     "CREATE SCHEMA IF NOT EXISTS castscope; "
                     "CREATE TABLE IF NOT EXISTS castscope.schema_version(version integer PRIMARY KEY, "
                     "applied_at timestamptz NOT NULL DEFAULT now())");
  fleet::PgResult version;
  if (s.ok()) s = pg.query("SELECT coalesce(max(version), 0) FROM castscope.schema_version", version);
  if (!s.ok()) return fail("init", s);
  const int64_t found = version.integer(0, 0);
  if (found > fleet::kFleetSchemaVersion) {
    (void)pg.exec("ROLLBACK");
    std::cerr << "castscope-collector fleet init: " << pg.where() << " has fleet schema version " << found
              << ", newer than this release's (" << fleet::kFleetSchemaVersion << "): use a newer castscope\n";
    return 1;
  }
  const std::vector<std::string> migrations = fleet::migration_sql();
  for (int64_t v = found; v < fleet::kFleetSchemaVersion && s.ok(); ++v) {
    s = pg.exec(migrations[static_cast<size_t>(v)]);
    if (s.ok()) s = pg.exec("INSERT INTO castscope.schema_version(version) VALUES (" + std::to_string(v + 1) + ")");
  }
  if (s.ok()) s = pg.exec(fleet::roles_sql());
  if (s.ok() && !o.writer.empty()) s = create_login(pg, o.writer, o.writer_password_file, fleet::kWriterRole);
  if (s.ok() && !o.reader.empty()) s = create_login(pg, o.reader, o.reader_password_file, fleet::kReaderRole);
  if (s.ok()) s = pg.exec("COMMIT");
  if (!s.ok()) {
    (void)pg.exec("ROLLBACK");
    return fail("init", s);
  }
  std::cout << "fleet schema version " << fleet::kFleetSchemaVersion << " at " << pg.where()
            << (found == fleet::kFleetSchemaVersion ? " (already)" : found == 0 ? " (created)" : " (upgraded)")
            << "; roles " << fleet::kWriterRole << " (insert) and " << fleet::kReaderRole << " (select)"
            << (o.writer.empty() ? "" : "; login " + o.writer + " writes")
            << (o.reader.empty() ? "" : "; login " + o.reader + " reads") << "\n";
  return 0;
}

int retain(const FleetCommand& o, fleet::PgConnection& pg) {
  // Day partitions are named TABLE_YYYYMMDD (castscope.ensure_days).
  const std::string params[] = {std::to_string(o.retain_days)};
  fleet::PgResult old;
  Status s = pg.query(
      "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid "
      "JOIN pg_class p ON p.oid = i.inhparent JOIN pg_namespace n ON n.oid = p.relnamespace "
      "WHERE n.nspname = 'castscope' AND p.relname IN ('rollups', 'job_sites') "
      "AND to_date(right(c.relname, 8), 'YYYYMMDD') < (now() AT TIME ZONE 'UTC')::date - $1::integer "
      "ORDER BY 1",
      params, old);
  if (s.ok()) s = pg.exec("BEGIN");
  for (int i = 0; i < old.rows() && s.ok(); ++i)
    s = pg.exec("DROP TABLE castscope." + std::string(old.text(i, 0)));
  // Jobs last seen before the cutoff leave with their partitions.
  fleet::PgResult gone;
  if (s.ok())
    s = pg.query("WITH old AS (SELECT job FROM castscope.agents GROUP BY job "
                 "HAVING max(last_seen) < date_trunc('day', now() AT TIME ZONE 'UTC') AT TIME ZONE 'UTC' - "
                 "make_interval(days => $1::integer)), "
                 "a AS (DELETE FROM castscope.agents WHERE job IN (SELECT job FROM old)), "
                 "e AS (DELETE FROM castscope.job_ends WHERE job IN (SELECT job FROM old)), "
                 "f AS (DELETE FROM castscope.findings WHERE job IN (SELECT job FROM old)), "
                 "d AS (DELETE FROM castscope.rank_divergences WHERE job IN (SELECT job FROM old)) "
                 "SELECT count(*) FROM old",
                 params, gone);
  if (s.ok()) s = pg.exec("COMMIT");
  if (!s.ok()) {
    (void)pg.exec("ROLLBACK");
    // Dropping partitions is the owner's (a writer or the reader is refused).
    if (s.code() == StatusCode::kUnauthenticated)
      s = Status(s.code(), s.message() + " (retain drops tables: run it as the fleet database's owner, the role that "
                                         "ran `castscope fleet init`)");
    return fail("retain", s);
  }
  std::cout << "dropped " << old.rows() << " day partitions older than " << o.retain_days << " days";
  for (int i = 0; i < old.rows(); ++i) std::cout << (i == 0 ? ": " : ", ") << old.text(i, 0);
  std::cout << "; " << gone.integer(0, 0) << " jobs forgotten\n";
  return 0;
}

}  // namespace

Status fleet_page_answers(const std::string& url, const std::string& password_file, FleetAnswer& out) {
  std::shared_ptr<fleet::FleetPage> page;
  if (Status s = fleet::FleetPage::open(url, password_file, page); !s.ok()) return s;
  out = [page](const std::string& what, const std::map<std::string, std::string>& params, json& answer) {
    return page->answer(what, params, answer);
  };
  return {};
}

void ShipOptions::add_to(CLI::App& app) {
  app.add_option("--ship", url,
                 "ship rollups, agents, job ends and findings to this PostgreSQL (a libpq URL without a password; "
                 "also CASTSCOPE_SHIP; docs/fleet.md)");
  app.add_option("--ship-password-file", password_file,
                 "the PostgreSQL password, from this file (mode 600; also CASTSCOPE_SHIP_PASSWORD_FILE; else "
                 "PGPASSWORD or ~/.pgpass)");
  app.add_option("--ship-interval-s", interval_s, "ship at most this often")
      ->check(CLI::Range(0.05, 3600.0))
      ->capture_default_str();
  app.add_flag("--ship-partial-minutes", partial_minutes,
               "ship the open minute too (more rows, less lag; by default a minute ships once it is over)");
  app.add_option("--ship-node", node, "this node's name in the fleet (default: the host name)");
  app.add_option("--ship-viewer-url", viewer_url, "this node's viewer as the fleet page should link it");
  app.add_option("--ship-backlog-max-rows", backlog_max_rows,
                 "rollup rows that may wait in the store for PostgreSQL; past it, new casts are counted as not "
                 "shipped (query shipping, /metrics) instead of rolled up")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 40))
      ->capture_default_str();
}

std::string ShipOptions::resolve(fleet::ShipperOptions& out) const {
  out.target.url = url;
  out.target.password_file = password_file;
  if (out.target.url.empty())
    if (const char* env = std::getenv("CASTSCOPE_SHIP")) out.target.url = env;
  if (out.target.password_file.empty())
    if (const char* env = std::getenv("CASTSCOPE_SHIP_PASSWORD_FILE")) out.target.password_file = env;
  out.target.application_name = "castscope-collector";
  out.interval = std::chrono::milliseconds(static_cast<int64_t>(interval_s * 1000));
  out.partial_minutes = partial_minutes;
  out.node = node;
  out.viewer_url = viewer_url;
  out.backlog_max_rows = backlog_max_rows;
  if (out.target.url.empty()) return "";
  std::string where;
  if (Status s = fleet::check_url(out.target.url, where, "--ship-password-file"); !s.ok())
    return "--ship: " + s.message();
  std::string password;
  if (!out.target.password_file.empty())
    if (Status s = fleet::read_password_file(out.target.password_file, password); !s.ok())
      return "--ship-password-file: " + s.message();
  return "";
}

CLI::App* add_fleet(CLI::App& app, FleetCommand& o) {
  CLI::App* fleet = app.add_subcommand("fleet", "the fleet's PostgreSQL: set it up, and ask it across jobs");
  fleet->require_subcommand(1);
  const auto common = [&o](CLI::App* sub) {
    sub->add_option("url", o.url, "libpq URL of the fleet database (no password in it)")->required();
    sub->add_option("--password-file", o.password_file, "the password, from this file (mode 600; else PGPASSWORD or "
                                                        "~/.pgpass)");
  };
  const auto questions = [&o, &common](CLI::App* sub) {
    common(sub);
    sub->add_flag("--json", o.json, "print JSON instead of a table");
    sub->add_option("--since", o.since, "only this recent: 7d, 12h, 30m, or unix seconds");
    sub->add_option("--limit", o.limit, "at most this many rows")->check(CLI::Range(size_t{1}, size_t{1000000}))->capture_default_str();
  };
  CLI::App* init = fleet->add_subcommand("init", "create or upgrade the schema and its roles (as the database owner)");
  common(init);
  init->add_option("--writer", o.writer, "also make this login role a writer (node collectors)");
  init->add_option("--writer-password-file", o.writer_password_file, "its password, from this file");
  init->add_option("--reader", o.reader, "also make this login role a reader (fleet questions and page)");
  init->add_option("--reader-password-file", o.reader_password_file, "its password, from this file");
  init->get_option("--writer")->needs(init->get_option("--writer-password-file"));
  init->get_option("--reader")->needs(init->get_option("--reader-password-file"));
  CLI::App* retain = fleet->add_subcommand("retain", "drop day partitions (and jobs) older than --days");
  common(retain);
  retain->add_option("--days", o.retain_days, "days to keep")->required()->check(CLI::Range(0, 100000));
  CLI::App* jobs = fleet->add_subcommand("jobs", "jobs, newest first");
  questions(jobs);
  jobs->add_option("--job", o.job, "this job alone");
  CLI::App* sites = fleet->add_subcommand("sites", "top casting sites across jobs");
  questions(sites);
  sites->add_option("--job", o.job, "this job alone");
  CLI::App* findings = fleet->add_subcommand("findings", "findings across jobs, rank-divergence included");
  questions(findings);
  findings->add_option("--job", o.job, "this job alone");
  findings->add_option("--kind", o.kind, "this kind alone (e.g. stale-cache-hit, rank-divergence)");
  CLI::App* compare = fleet->add_subcommand("compare", "two jobs compared site by site (the fleet form of diff)");
  common(compare);
  compare->add_flag("--json", o.json, "print JSON instead of a table");
  compare->add_option("job_a", o.job_a, "the first job")->required();
  compare->add_option("job_b", o.job_b, "the second job")->required();
  CLI::App* job = fleet->add_subcommand("job", "one job: its ranks and findings");
  common(job);
  job->add_flag("--json", o.json, "print JSON instead of tables");
  job->add_option("job", o.job, "the job (its run id)")->required();
  fleet->callback([&o, fleet] { o.what = fleet->get_subcommands().front()->get_name(); });
  return fleet;
}

int run_fleet(const FleetCommand& o) {
  fleet::FleetFilter filter;
  if (!fleet::parse_since(o.since, filter.since_unix_s)) {
    std::cerr << "castscope-collector fleet " << o.what << ": --since " << o.since
              << ": expected a count with d, h, m or s (7d), or unix seconds\n";
    return kExitUsage;
  }
  filter.job = o.job;
  filter.kind = o.kind;
  filter.limit = o.limit;
  fleet::PgTarget target;
  target.url = o.url;
  target.password_file = o.password_file;
  target.application_name = "castscope fleet " + o.what;
  fleet::PgConnection pg;
  if (Status s = pg.connect(target); !s.ok()) return fail(o.what, s);
  if (o.what == "init") return init(o, pg);
  if (o.what == "retain") return retain(o, pg);
  json out;
  Status s;
  if (o.what == "jobs") s = fleet::query_jobs(pg, filter, out);
  if (o.what == "sites") s = fleet::query_sites(pg, filter, out);
  if (o.what == "findings") s = fleet::query_findings(pg, filter, out);
  if (o.what == "compare") {
    s = fleet::require_job(pg, o.job_a);
    if (s.ok()) s = fleet::require_job(pg, o.job_b);
    if (s.ok()) s = fleet::query_compare(pg, o.job_a, o.job_b, out);
  }
  if (o.what == "job") {
    s = fleet::require_job(pg, o.job);
    if (s.ok()) s = fleet::query_job(pg, o.job, out);
  }
  if (!s.ok()) return fail(o.what, s);
  if (o.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  print_fleet_table(o.what, out, o.job_a, o.job_b, std::cout);
  return 0;
}

}  // namespace castscope::collector
