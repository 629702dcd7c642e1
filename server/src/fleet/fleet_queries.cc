#include "server/src/fleet/fleet_queries.h"

#include <chrono>
#include <cstdlib>

#include "castscope/v1/events.names.h"
#include "server/src/fleet/fleet_schema.h"
#include "server/src/fleet/pg_rows.h"

namespace castscope::collector::fleet {

namespace v1 = castscope::v1;
using json = nlohmann::json;

namespace {

constexpr int kCompilingMode = v1::EXECUTION_MODE_COMPILING;

std::string dtype(int64_t v) { return std::string(v1::names::short_name(static_cast<v1::DType>(v))); }
std::string mode(int64_t v) { return std::string(v1::names::short_name(static_cast<v1::ExecutionMode>(v))); }
std::string outcome(int64_t v) { return std::string(v1::names::short_name(static_cast<v1::CastOutcome>(v))); }

// The latest snapshot of each agent (collector, job, agent_id).
constexpr const char* kLatestAgents =
    "SELECT DISTINCT ON (collector, job, agent_id) * FROM castscope.agents "
    "ORDER BY collector, job, agent_id, shipment DESC";

// Each collector's latest end of each job: its findings are that shipment's.
constexpr const char* kLatestEnds =
    "SELECT DISTINCT ON (collector, job) collector, job, shipment, ended_at FROM castscope.job_ends "
    "ORDER BY collector, job, shipment DESC";

json parse_json(std::string_view text) {
  json value = json::parse(text, nullptr, false);
  return value.is_discarded() ? json() : value;
}

// Each question's answer columns (pg_rows.h): the SELECT list is made from
// them, and rows are read by their names.

// query_jobs: one row per job, over its agents' latest snapshots (a), its
// findings (f) and rank-divergences (d).
constexpr auto kJobColumns = select_list({
    {"job", "a.job"},
    {"first_seen_unix_s", "extract(epoch FROM min(a.first_seen))::bigint"},
    {"last_seen_unix_s", "extract(epoch FROM max(a.last_seen))::bigint"},
    {"finished", "bool_and(a.finished)"},
    {"casts", "sum(a.casts)::bigint"},
    {"nodes", "jsonb_agg(DISTINCT jsonb_build_object('node', a.node, 'collector', a.collector, 'viewer', a.viewer))"},
    {"ranks", "jsonb_agg(DISTINCT a.rank)"},
    {"findings", "coalesce(max(f.n), 0) + coalesce(max(d.n), 0)"},
});

// query_sites: per site (s) and cast kind, summed over jobs (p).
constexpr auto kSiteColumns = select_list({
    {"file", "s.file"},
    {"line", "s.line"},
    {"function", "s.function"},
    {"op", "s.op"},
    {"arg", "s.arg"},
    {"src", "p.src"},
    {"dst", "p.dst"},
    {"outcome", "p.outcome"},
    {"mode", "p.mode"},
    {"count", "p.n::bigint"},
    {"bytes", "p.b::bigint"},
    {"hits", "p.h::bigint"},
    {"misses", "p.m::bigint"},
    {"stale_hits", "p.st::bigint"},
    {"backward", "p.bw::bigint"},
    {"jobs", "p.jobs"},
});

// query_findings: findings (f, with their collector's latest end e), then
// rank-divergences (d, at site s), one answer. ranks_or_sides: a finding's
// ranks, a divergence's sides (JSON text); at_unix_s: when the job ended, or
// when the divergence was computed.
constexpr auto kFindingColumns = select_list({
    {"job", "f.job"},
    {"collector", "f.collector"},
    {"kind", "f.kind"},
    {"severity", "f.severity"},
    {"summary", "f.summary"},
    {"file", "f.file"},
    {"line", "f.line"},
    {"ranks_or_sides", "f.ranks::text"},
    {"at_unix_s", "extract(epoch FROM e.ended_at)::bigint"},
    {"op", "''"},
    {"arg", "''"},
});
constexpr auto kDivergenceColumns = select_list({
    {"job", "d.job"},
    {"collector", "''"},
    {"kind", "'rank-divergence'"},
    {"severity", "'warning'"},
    {"summary", "''"},
    {"file", "s.file"},
    {"line", "s.line"},
    {"ranks_or_sides", "d.sides::text"},
    {"at_unix_s", "extract(epoch FROM d.computed_at)::bigint"},
    {"op", "s.op"},
    {"arg", "s.arg"},
});
static_assert(kFindingColumns.same_names(kDivergenceColumns), "a UNION's branches answer the same columns");

// query_compare: per site (s) and cast (r), job A's decisions and job B's.
constexpr auto kCompareColumns = select_list({
    {"file", "s.file"},
    {"line", "s.line"},
    {"op", "s.op"},
    {"arg", "s.arg"},
    {"src", "r.src"},
    {"dst", "r.dst"},
    {"mode", "r.mode"},
    {"a", "coalesce(sum(r.count) FILTER (WHERE r.job = $1), 0)::bigint"},
    {"b", "coalesce(sum(r.count) FILTER (WHERE r.job = $2), 0)::bigint"},
});

// query_job: the job's ranks, as columns of castscope.agents.
constexpr auto kRankColumns = schema::columns(pg::kAgents, {"agent_id", "node", "collector", "rank", "local_rank",
                                                            "world_size", "pid", "casts", "ops", "events_dropped",
                                                            "finished", "viewer"});

}  // namespace

bool parse_since(const std::string& text, int64_t& out) {
  out = 0;
  if (text.empty()) return true;
  char* end = nullptr;
  const long long n = std::strtoll(text.c_str(), &end, 10);
  if (end == text.c_str() || n < 0) return false;
  const std::string unit(end);
  const int64_t seconds = unit == "d" ? 86400 : unit == "h" ? 3600 : unit == "m" ? 60 : unit == "s" ? 1 : 0;
  if (unit.empty()) {
    out = n;
    return true;
  }
  if (seconds == 0) return false;
  const int64_t now_s =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  out = now_s - n * seconds;
  return true;
}

Status query_jobs(PgConnection& pg, const FleetFilter& filter, json& out) {
  const std::string sql = std::string("WITH a AS (") + kLatestAgents + "), e AS (" + kLatestEnds +
                          "), f AS (SELECT job, count(*) AS n FROM castscope.findings fi JOIN e USING (collector, job) "
                          "WHERE fi.shipment = e.shipment GROUP BY job), "
                          "d AS (SELECT job, count(*) AS n FROM castscope.rank_divergences GROUP BY job) "
                          "SELECT " + kJobColumns.sql() + " "
                          "FROM a LEFT JOIN f USING (job) LEFT JOIN d USING (job) "
                          "WHERE ($1::text = '' OR a.job = $1) GROUP BY a.job "
                          "HAVING max(a.last_seen) >= to_timestamp($2::bigint) "
                          "ORDER BY max(a.last_seen) DESC, a.job LIMIT $3::bigint";
  const std::string params[] = {filter.job, std::to_string(filter.since_unix_s), std::to_string(filter.limit)};
  PgResult r;
  if (Status s = pg.query(sql, params, r); !s.ok()) return s;
  out = json::array();
  for (int i = 0; i < r.rows(); ++i) {
    const PgRow<kJobColumns> row(r, i);
    out.push_back({{"job", row.text("job")},
                   {"first_seen_unix_s", row.integer("first_seen_unix_s")},
                   {"last_seen_unix_s", row.integer("last_seen_unix_s")},
                   {"running", !row.boolean("finished")},
                   {"casts", row.integer("casts")},
                   {"nodes", parse_json(row.text("nodes"))},
                   {"ranks", parse_json(row.text("ranks"))},
                   {"findings", row.integer("findings")}});
  }
  return {};
}

// Jobs with no end yet (running, or their collector away): a PostgreSQL
// array literal, '{}' for none.
Status running_jobs(PgConnection& pg, std::string& out) {
  PgResult r;
  if (Status s = pg.query("SELECT coalesce(array_agg(DISTINCT job), '{}') FROM castscope.agents "
                          "WHERE job NOT IN (SELECT job FROM castscope.job_ends)",
                          r);
      !s.ok())
    return s;
  out = r.text(0, 0);
  return {};
}

Status query_sites(PgConnection& pg, const FleetFilter& filter, json& out) {
  // Ended jobs from their summaries; running jobs (few) from their rollups,
  // through the job index: never a scan of every rollup. Summed per
  // job first (a job counted once per site), named last (sites' text joins
  // the few rows left, not every summary row).
  std::string running;
  if (Status s = running_jobs(pg, running); !s.ok()) return s;
  const std::string sql =
      "WITH rows AS ("
      "  SELECT job, site, src, dst, outcome, mode, phase, count, bytes, hits, misses, stale_hits "
      "    FROM castscope.job_sites WHERE ended_at >= to_timestamp($1::bigint) AND ($2::text = '' OR job = $2) "
      "  UNION ALL "
      "  SELECT job, site, src, dst, outcome, mode, phase, count, bytes, hits, misses, stale_hits "
      "    FROM castscope.rollups WHERE job = ANY($4::text[]) AND minute >= to_timestamp($1::bigint) "
      "     AND ($2::text = '' OR job = $2)), "
      "per_job AS (SELECT site, src, dst, outcome, mode, job, sum(count) AS n, sum(bytes) AS b, sum(hits) AS h, "
      "    sum(misses) AS m, sum(stale_hits) AS st, coalesce(sum(count) FILTER (WHERE phase = 2), 0) AS bw "
      "  FROM rows WHERE mode <> " +
      std::to_string(kCompilingMode) +
      " GROUP BY site, src, dst, outcome, mode, job), "
      "per_site AS (SELECT site, src, dst, outcome, mode, sum(n) AS n, sum(b) AS b, sum(h) AS h, sum(m) AS m, "
      "    sum(st) AS st, sum(bw) AS bw, count(*) AS jobs FROM per_job GROUP BY site, src, dst, outcome, mode) "
      "SELECT " + kSiteColumns.sql() +
      "  FROM per_site p JOIN castscope.sites s USING (site) "
      " ORDER BY p.n DESC, s.file, s.line, s.op, s.arg LIMIT $3::bigint";
  const std::string params[] = {std::to_string(filter.since_unix_s), filter.job, std::to_string(filter.limit), running};
  PgResult r;
  if (Status s = pg.query(sql, params, r); !s.ok()) return s;
  out = json::array();
  for (int i = 0; i < r.rows(); ++i) {
    const PgRow<kSiteColumns> row(r, i);
    out.push_back({{"file", row.text("file")},
                   {"line", row.integer("line")},
                   {"function", row.text("function")},
                   {"op", row.text("op")},
                   {"arg", row.text("arg")},
                   {"src", dtype(row.integer("src"))},
                   {"dst", dtype(row.integer("dst"))},
                   {"outcome", outcome(row.integer("outcome"))},
                   {"mode", mode(row.integer("mode"))},
                   {"count", row.integer("count")},
                   {"bytes", row.integer("bytes")},
                   {"hits", row.integer("hits")},
                   {"misses", row.integer("misses")},
                   {"stale_hits", row.integer("stale_hits")},
                   {"backward", row.integer("backward")},
                   {"jobs", row.integer("jobs")}});
  }
  return {};
}

Status query_findings(PgConnection& pg, const FleetFilter& filter, json& out) {
  const std::string sql =
      std::string("WITH e AS (") + kLatestEnds + ") SELECT " + kFindingColumns.sql() +
      "  FROM castscope.findings f JOIN e ON e.collector = f.collector AND e.job = f.job AND e.shipment = f.shipment "
      " WHERE e.ended_at >= to_timestamp($1::bigint) AND ($2::text = '' OR f.job = $2) AND ($3::text = '' OR f.kind = $3) "
      "UNION ALL "
      "SELECT " + kDivergenceColumns.sql() +
      "  FROM castscope.rank_divergences d JOIN castscope.sites s USING (site) "
      " WHERE d.computed_at >= to_timestamp($1::bigint) AND ($2::text = '' OR d.job = $2) "
      "   AND ($3::text = '' OR $3 = 'rank-divergence') "
      "ORDER BY at_unix_s DESC, job, kind, file, line LIMIT $4::bigint";
  const std::string params[] = {std::to_string(filter.since_unix_s), filter.job, filter.kind,
                                std::to_string(filter.limit)};
  PgResult r;
  if (Status s = pg.query(sql, params, r); !s.ok()) return s;
  out = json::array();
  for (int i = 0; i < r.rows(); ++i) {
    const PgRow<kFindingColumns> row(r, i);
    json finding = {{"job", row.text("job")},           {"collector", row.text("collector")},
                    {"kind", row.text("kind")},         {"severity", row.text("severity")},
                    {"summary", row.text("summary")},   {"file", row.text("file")},
                    {"line", row.integer("line")}};
    json extra = parse_json(row.text("ranks_or_sides"));
    if (finding["kind"] == "rank-divergence") {
      // sides: the side with the job's lowest rank first; the others differ from it.
      json ranks = json::array();
      json sides = json::array();
      for (const json& side : extra) {
        for (const json& rank : side["ranks"]) ranks.push_back(rank);
        json casts = json::array();
        for (const json& c : side["casts"])
          casts.push_back({{"src", dtype(c.value("src", 0))},
                           {"dst", dtype(c.value("dst", 0))},
                           {"mode", mode(c.value("mode", 0))},
                           {"count", c.value("count", 0)}});
        sides.push_back({{"ranks", side["ranks"]}, {"casts", casts}});
      }
      // Named by op and argument: one line often holds several (a linear's
      // input, weight and bias), each its own finding.
      const std::string op(row.text("op")), arg(row.text("arg"));
      std::string summary = op + "(" + arg + "): ";
      for (size_t k = 1; k < sides.size(); ++k)
        summary += (k > 1 ? "; " : "") + std::string("ranks ") + sides[k]["ranks"].dump() + " cast differently from ranks " +
                   sides[0]["ranks"].dump();
      finding["summary"] = summary + " at this line";
      finding["op"] = op;
      finding["arg"] = arg;
      finding["ranks"] = ranks;
      finding["sides"] = sides;
    } else {
      finding["ranks"] = extra.is_array() ? extra : json::array();
    }
    out.push_back(std::move(finding));
  }
  return {};
}

Status require_job(PgConnection& pg, const std::string& job) {
  const std::string params[] = {job};
  PgResult r;
  if (Status s = pg.query("SELECT EXISTS (SELECT 1 FROM castscope.agents WHERE job = $1)", params, r); !s.ok())
    return s;
  if (r.text(0, 0) == "t") return {};
  return Status::not_found("no job '" + job + "' in the fleet at " + pg.where() + " (`fleet jobs` lists them)");
}

Status query_compare(PgConnection& pg, const std::string& job_a, const std::string& job_b, json& out) {
  const std::string sql =
      "WITH rows AS (SELECT job, site, src, dst, mode, count FROM castscope.job_sites WHERE job IN ($1, $2) "
      "  UNION ALL SELECT job, site, src, dst, mode, count FROM castscope.rollups WHERE job IN ($1, $2) "
      "   AND job NOT IN (SELECT job FROM castscope.job_ends WHERE job IN ($1, $2))) "
      "SELECT " + kCompareColumns.sql() +
      "  FROM rows r JOIN castscope.sites s USING (site) WHERE r.mode <> " +
      std::to_string(kCompilingMode) +
      " GROUP BY s.file, s.line, s.op, s.arg, r.src, r.dst, r.mode "
      "HAVING coalesce(sum(r.count) FILTER (WHERE r.job = $1), 0) <> coalesce(sum(r.count) FILTER (WHERE r.job = $2), 0) "
      " ORDER BY abs(coalesce(sum(r.count) FILTER (WHERE r.job = $1), 0) - "
      "coalesce(sum(r.count) FILTER (WHERE r.job = $2), 0)) DESC, file, line, op, arg";
  const std::string params[] = {job_a, job_b};
  PgResult r;
  if (Status s = pg.query(sql, params, r); !s.ok()) return s;
  out = json::array();
  for (int i = 0; i < r.rows(); ++i) {
    const PgRow<kCompareColumns> row(r, i);
    out.push_back({{"file", row.text("file")},
                   {"line", row.integer("line")},
                   {"op", row.text("op")},
                   {"arg", row.text("arg")},
                   {"src", dtype(row.integer("src"))},
                   {"dst", dtype(row.integer("dst"))},
                   {"mode", mode(row.integer("mode"))},
                   {"a", row.integer("a")},
                   {"b", row.integer("b")}});
  }
  return {};
}

Status query_job(PgConnection& pg, const std::string& job, json& out) {
  const std::string sql = "SELECT " + kRankColumns.list_sql() + " FROM (" + kLatestAgents +
                          ") a WHERE job = $1 ORDER BY rank, node, agent_id";
  const std::string params[] = {job};
  PgResult r;
  if (Status s = pg.query(sql, params, r); !s.ok()) return s;
  json ranks = json::array();
  for (int i = 0; i < r.rows(); ++i) {
    const PgRow<kRankColumns> row(r, i);
    ranks.push_back({{"agent_id", row.text("agent_id")},
                     {"node", row.text("node")},
                     {"collector", row.text("collector")},
                     {"rank", row.integer("rank")},
                     {"local_rank", row.integer("local_rank")},
                     {"world_size", row.integer("world_size")},
                     {"pid", row.integer("pid")},
                     {"casts", row.integer("casts")},
                     {"ops", row.integer("ops")},
                     {"events_dropped", row.integer("events_dropped")},
                     {"finished", row.boolean("finished")},
                     {"viewer", row.text("viewer")}});
  }
  FleetFilter filter;
  filter.job = job;
  filter.limit = 1000;
  json findings;
  if (Status s = query_findings(pg, filter, findings); !s.ok()) return s;
  out = {{"job", job}, {"ranks", ranks}, {"findings", findings}};
  return {};
}

}  // namespace castscope::collector::fleet
