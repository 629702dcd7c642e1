#include "server/src/fleet/fleet_queries.h"

#include "castscope/v1/events.names.h"

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

}  // namespace

Status query_jobs(PgConnection& pg, const FleetFilter& filter, json& out) {
  const std::string sql = std::string("WITH a AS (") + kLatestAgents + "), e AS (" + kLatestEnds +
                          "), f AS (SELECT job, count(*) AS n FROM castscope.findings fi JOIN e USING (collector, job) "
                          "WHERE fi.shipment = e.shipment GROUP BY job), "
                          "d AS (SELECT job, count(*) AS n FROM castscope.rank_divergences GROUP BY job) "
                          "SELECT a.job, extract(epoch FROM min(a.first_seen))::bigint, "
                          "extract(epoch FROM max(a.last_seen))::bigint, "
                          "bool_and(a.finished), sum(a.casts)::bigint, "
                          "jsonb_agg(DISTINCT jsonb_build_object('node', a.node, 'collector', a.collector, "
                          "'viewer', a.viewer)), "
                          "jsonb_agg(DISTINCT a.rank), coalesce(max(f.n), 0) + coalesce(max(d.n), 0) "
                          "FROM a LEFT JOIN f USING (job) LEFT JOIN d USING (job) "
                          "WHERE ($1::text = '' OR a.job = $1) GROUP BY a.job "
                          "HAVING max(a.last_seen) >= to_timestamp($2::bigint) "
                          "ORDER BY max(a.last_seen) DESC, a.job LIMIT $3::bigint";
  const std::string params[] = {filter.job, std::to_string(filter.since_unix_s), std::to_string(filter.limit)};
  PgResult r;
  if (Status s = pg.query(sql, params, r); !s.ok()) return s;
  out = json::array();
  for (int i = 0; i < r.rows(); ++i) {
    json ranks = parse_json(r.text(i, 6));
    out.push_back({{"job", r.text(i, 0)},
                   {"first_seen_unix_s", r.integer(i, 1)},
                   {"last_seen_unix_s", r.integer(i, 2)},
                   {"running", r.text(i, 3) != "t"},
                   {"casts", r.integer(i, 4)},
                   {"nodes", parse_json(r.text(i, 5))},
                   {"ranks", ranks},
                   {"findings", r.integer(i, 7)}});
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
      "SELECT s.file, s.line, s.function, s.op, s.arg, p.src, p.dst, p.outcome, p.mode, p.n::bigint, p.b::bigint, "
      "       p.h::bigint, p.m::bigint, p.st::bigint, p.bw::bigint, p.jobs "
      "  FROM per_site p JOIN castscope.sites s USING (site) "
      " ORDER BY p.n DESC, s.file, s.line, s.op, s.arg LIMIT $3::bigint";
  const std::string params[] = {std::to_string(filter.since_unix_s), filter.job, std::to_string(filter.limit), running};
  PgResult r;
  if (Status s = pg.query(sql, params, r); !s.ok()) return s;
  out = json::array();
  for (int i = 0; i < r.rows(); ++i)
    out.push_back({{"file", r.text(i, 0)},
                   {"line", r.integer(i, 1)},
                   {"function", r.text(i, 2)},
                   {"op", r.text(i, 3)},
                   {"arg", r.text(i, 4)},
                   {"src", dtype(r.integer(i, 5))},
                   {"dst", dtype(r.integer(i, 6))},
                   {"outcome", outcome(r.integer(i, 7))},
                   {"mode", mode(r.integer(i, 8))},
                   {"count", r.integer(i, 9)},
                   {"bytes", r.integer(i, 10)},
                   {"hits", r.integer(i, 11)},
                   {"misses", r.integer(i, 12)},
                   {"stale_hits", r.integer(i, 13)},
                   {"backward", r.integer(i, 14)},
                   {"jobs", r.integer(i, 15)}});
  return {};
}

Status query_findings(PgConnection& pg, const FleetFilter& filter, json& out) {
  const std::string sql =
      std::string("WITH e AS (") + kLatestEnds +
      ") SELECT f.job, f.collector, f.kind, f.severity, f.summary, f.file, f.line, f.ranks::text, "
      "       extract(epoch FROM e.ended_at)::bigint, '', '' "
      "  FROM castscope.findings f JOIN e ON e.collector = f.collector AND e.job = f.job AND e.shipment = f.shipment "
      " WHERE e.ended_at >= to_timestamp($1::bigint) AND ($2::text = '' OR f.job = $2) AND ($3::text = '' OR f.kind = $3) "
      "UNION ALL "
      "SELECT d.job, '', 'rank-divergence', 'warning', '', s.file, s.line, d.sides::text, "
      "       extract(epoch FROM d.computed_at)::bigint, s.op, s.arg "
      "  FROM castscope.rank_divergences d JOIN castscope.sites s USING (site) "
      " WHERE d.computed_at >= to_timestamp($1::bigint) AND ($2::text = '' OR d.job = $2) "
      "   AND ($3::text = '' OR $3 = 'rank-divergence') "
      "ORDER BY 9 DESC, 1, 3, 6, 7 LIMIT $4::bigint";
  const std::string params[] = {std::to_string(filter.since_unix_s), filter.job, filter.kind,
                                std::to_string(filter.limit)};
  PgResult r;
  if (Status s = pg.query(sql, params, r); !s.ok()) return s;
  out = json::array();
  for (int i = 0; i < r.rows(); ++i) {
    json finding = {{"job", r.text(i, 0)},     {"collector", r.text(i, 1)}, {"kind", r.text(i, 2)},
                    {"severity", r.text(i, 3)}, {"summary", r.text(i, 4)},  {"file", r.text(i, 5)},
                    {"line", r.integer(i, 6)}};
    json extra = parse_json(r.text(i, 7));
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
      const std::string op(r.text(i, 9)), arg(r.text(i, 10));
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
      "SELECT s.file, s.line, s.op, s.arg, r.src, r.dst, r.mode, "
      "       coalesce(sum(r.count) FILTER (WHERE r.job = $1), 0)::bigint AS a, "
      "       coalesce(sum(r.count) FILTER (WHERE r.job = $2), 0)::bigint AS b "
      "  FROM rows r JOIN castscope.sites s USING (site) WHERE r.mode <> " +
      std::to_string(kCompilingMode) +
      " GROUP BY s.file, s.line, s.op, s.arg, r.src, r.dst, r.mode "
      "HAVING coalesce(sum(r.count) FILTER (WHERE r.job = $1), 0) <> coalesce(sum(r.count) FILTER (WHERE r.job = $2), 0) "
      " ORDER BY abs(coalesce(sum(r.count) FILTER (WHERE r.job = $1), 0) - "
      "coalesce(sum(r.count) FILTER (WHERE r.job = $2), 0)) DESC, 1, 2, 3, 4";
  const std::string params[] = {job_a, job_b};
  PgResult r;
  if (Status s = pg.query(sql, params, r); !s.ok()) return s;
  out = json::array();
  for (int i = 0; i < r.rows(); ++i)
    out.push_back({{"file", r.text(i, 0)},
                   {"line", r.integer(i, 1)},
                   {"op", r.text(i, 2)},
                   {"arg", r.text(i, 3)},
                   {"src", dtype(r.integer(i, 4))},
                   {"dst", dtype(r.integer(i, 5))},
                   {"mode", mode(r.integer(i, 6))},
                   {"a", r.integer(i, 7)},
                   {"b", r.integer(i, 8)}});
  return {};
}

Status query_job(PgConnection& pg, const std::string& job, json& out) {
  const std::string sql = std::string("SELECT agent_id, node, collector, rank, local_rank, world_size, pid, casts, ops, "
                                      "events_dropped, finished, viewer FROM (") +
                          kLatestAgents + ") a WHERE job = $1 ORDER BY rank, node, agent_id";
  const std::string params[] = {job};
  PgResult r;
  if (Status s = pg.query(sql, params, r); !s.ok()) return s;
  json ranks = json::array();
  for (int i = 0; i < r.rows(); ++i)
    ranks.push_back({{"agent_id", r.text(i, 0)},
                     {"node", r.text(i, 1)},
                     {"collector", r.text(i, 2)},
                     {"rank", r.integer(i, 3)},
                     {"local_rank", r.integer(i, 4)},
                     {"world_size", r.integer(i, 5)},
                     {"pid", r.integer(i, 6)},
                     {"casts", r.integer(i, 7)},
                     {"ops", r.integer(i, 8)},
                     {"events_dropped", r.integer(i, 9)},
                     {"finished", r.text(i, 10) == "t"},
                     {"viewer", r.text(i, 11)}});
  FleetFilter filter;
  filter.job = job;
  filter.limit = 1000;
  json findings;
  if (Status s = query_findings(pg, filter, findings); !s.ok()) return s;
  out = {{"job", job}, {"ranks", ranks}, {"findings", findings}};
  return {};
}

}  // namespace castscope::collector::fleet
