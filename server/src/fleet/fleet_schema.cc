#include "server/src/fleet/fleet_schema.h"

namespace castscope::collector::fleet {

namespace {

// A declared table as PostgreSQL DDL; `partition_column` set: partitioned
// by range on it (day partitions come from castscope.ensure_days).
std::string create_sql(const schema::Table& table, std::string_view partition_column = {}) {
  std::string sql = table.create_sql();  // "CREATE TABLE name(...);\n"
  sql.replace(0, sizeof("CREATE TABLE ") - 1, "CREATE TABLE IF NOT EXISTS ");
  if (!partition_column.empty()) sql.insert(sql.rfind(");"), ") PARTITION BY RANGE (" + std::string(partition_column));
  return sql;
}

// castscope.job_ended, as the newest version has it (version 2: rank
// divergence among autocast's decisions alone, not every conversion).
std::string job_ended_sql() {
  return R"sql(
-- A collector's part of a job ended: the job's site summary is made again
-- from all its rollups, and rank-divergence with it. The last part to end
-- sees every rank.
CREATE OR REPLACE FUNCTION castscope.job_ended(p_job text) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = castscope, pg_temp AS $$
DECLARE
  v_ended timestamptz;
BEGIN
  PERFORM pg_advisory_xact_lock(hashtext('castscope.job:' || p_job));
  SELECT max(ended_at) INTO v_ended FROM castscope.job_ends WHERE job = p_job;
  IF v_ended IS NULL THEN RETURN; END IF;
  DELETE FROM castscope.job_sites WHERE job = p_job;
  INSERT INTO castscope.job_sites
  SELECT v_ended, job, rank, site, policy, src, dst, outcome, device, role, mode, phase,
         sum(count), sum(bytes), sum(hits), sum(misses), sum(stale_hits)
    FROM castscope.rollups WHERE job = p_job
   GROUP BY job, rank, site, policy, src, dst, outcome, device, role, mode, phase;

  DELETE FROM castscope.rank_divergences WHERE job = p_job;
  INSERT INTO castscope.rank_divergences(job, site, sides)
  WITH latest AS (
    SELECT DISTINCT ON (collector, agent_id) rank FROM castscope.agents
     WHERE job = p_job ORDER BY collector, agent_id, shipment DESC
  ), job_ranks AS (
    SELECT DISTINCT rank FROM latest WHERE rank >= 0
  ), per_rank AS (  -- autocast's run-time decisions (policy 0: another maker's conversion; mode 6: torch.compile's tracing)
    SELECT rank, site, src, dst, mode, sum(count) AS n FROM castscope.job_sites
     WHERE job = p_job AND mode <> 6 AND policy <> 0 AND rank >= 0 GROUP BY rank, site, src, dst, mode
  ), signature AS (
    SELECT s.site, r.rank,
           coalesce(jsonb_agg(jsonb_build_object('src', p.src, 'dst', p.dst, 'mode', p.mode, 'count', p.n)
                              ORDER BY p.src, p.dst, p.mode) FILTER (WHERE p.rank IS NOT NULL), '[]'::jsonb) AS casts
      FROM (SELECT DISTINCT site FROM per_rank) s CROSS JOIN job_ranks r
      LEFT JOIN per_rank p ON p.site = s.site AND p.rank = r.rank
     GROUP BY s.site, r.rank
  ), sides AS (
    SELECT site, casts, array_agg(rank ORDER BY rank) AS ranks FROM signature GROUP BY site, casts
  )
  SELECT p_job, site, jsonb_agg(jsonb_build_object('ranks', to_jsonb(ranks), 'casts', casts) ORDER BY ranks[1])
    FROM sides GROUP BY site HAVING count(*) > 1;
END $$;

)sql";
}

// Version 1: the tables, their indexes and the functions writers call.
std::string version_1_sql() {
  std::string sql = "CREATE SCHEMA IF NOT EXISTS castscope;\n";
  for (const schema::Table* table : pg::kTables) {
    if (table == &pg::kRollups)
      sql += create_sql(*table, "minute");
    else if (table == &pg::kJobSites)
      sql += create_sql(*table, "ended_at");
    else
      sql += create_sql(*table);
  }
  sql += R"sql(
-- Rollups are read by job (a job's summary at its end, running jobs' sites):
-- an index on job alone, as (job, site) costs COPY a third more (measured).
CREATE INDEX IF NOT EXISTS rollups_job ON castscope.rollups (job);
CREATE INDEX IF NOT EXISTS job_sites_job ON castscope.job_sites (job);
CREATE INDEX IF NOT EXISTS agents_job ON castscope.agents (job);
CREATE INDEX IF NOT EXISTS job_ends_ended ON castscope.job_ends (ended_at);
CREATE INDEX IF NOT EXISTS findings_job ON castscope.findings (job, collector, shipment);

-- A shipment lands once: false when (collector, shipment) is there already.
CREATE OR REPLACE FUNCTION castscope.begin_shipment(p_collector text, p_shipment bigint, p_through_minute bigint,
                                                   p_rows bigint) RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path = castscope, pg_temp AS $$
BEGIN
  INSERT INTO castscope.shipments(collector, shipment, through_minute, rollup_rows)
  VALUES (p_collector, p_shipment, p_through_minute, p_rows) ON CONFLICT DO NOTHING;
  RETURN FOUND;
END $$;

-- Day partitions (UTC) of rollups and job_sites covering [p_first, p_last].
CREATE OR REPLACE FUNCTION castscope.ensure_days(p_first timestamptz, p_last timestamptz) RETURNS void
LANGUAGE plpgsql SECURITY DEFINER SET search_path = castscope, pg_temp AS $$
DECLARE
  d date;
  t text;
BEGIN
  IF p_last - p_first > interval '400 days' THEN
    RAISE EXCEPTION 'castscope.ensure_days: % to % is more than 400 days', p_first, p_last;
  END IF;
  FOR d IN SELECT generate_series((p_first AT TIME ZONE 'UTC')::date, (p_last AT TIME ZONE 'UTC')::date,
                                  interval '1 day')::date LOOP
    FOREACH t IN ARRAY ARRAY['rollups', 'job_sites'] LOOP
      IF to_regclass(format('castscope.%I', t || '_' || to_char(d, 'YYYYMMDD'))) IS NULL THEN
        PERFORM pg_advisory_xact_lock(hashtext('castscope.partitions'));
        EXECUTE format('CREATE TABLE IF NOT EXISTS castscope.%I PARTITION OF castscope.%I FOR VALUES FROM (%L) TO (%L)',
                       t || '_' || to_char(d, 'YYYYMMDD'), t, d::text || ' 00:00:00+00',
                       (d + 1)::text || ' 00:00:00+00');
      END IF;
    END LOOP;
  END LOOP;
END $$;

)sql";
  sql += job_ended_sql();
  sql += R"sql(
REVOKE ALL ON FUNCTION castscope.begin_shipment(text, bigint, bigint, bigint) FROM PUBLIC;
REVOKE ALL ON FUNCTION castscope.ensure_days(timestamptz, timestamptz) FROM PUBLIC;
REVOKE ALL ON FUNCTION castscope.job_ended(text) FROM PUBLIC;
)sql";
  return sql;
}

}  // namespace

// Version 2 replaces castscope.job_ended (version 1's is today's too: a new
// database runs both).
std::vector<std::string> migration_sql() { return {version_1_sql(), job_ended_sql()}; }

std::string roles_sql() {
  return std::string(R"sql(
DO $$ BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'castscope_writer') THEN CREATE ROLE castscope_writer NOLOGIN; END IF;
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'castscope_reader') THEN CREATE ROLE castscope_reader NOLOGIN; END IF;
END $$;
GRANT USAGE ON SCHEMA castscope TO castscope_writer, castscope_reader;
GRANT SELECT ON castscope.schema_version TO castscope_writer;
GRANT INSERT ON castscope.sites, castscope.rollups, castscope.agents, castscope.job_ends, castscope.findings
  TO castscope_writer;
GRANT EXECUTE ON FUNCTION castscope.begin_shipment(text, bigint, bigint, bigint),
  castscope.ensure_days(timestamptz, timestamptz), castscope.job_ended(text) TO castscope_writer;
GRANT SELECT ON ALL TABLES IN SCHEMA castscope TO castscope_reader;
)sql");
}

int64_t site_id(std::string_view file, uint32_t line, std::string_view function, std::string_view op,
                std::string_view arg) {
  uint64_t h = 0xcbf29ce484222325ull;
  const auto mix = [&h](std::string_view part) {
    for (const char c : part) h = (h ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
    h = (h ^ 0x1f) * 0x100000001b3ull;
  };
  const std::string line_text = std::to_string(line);
  for (std::string_view part : {file, std::string_view(line_text), function, op, arg}) mix(part);
  return static_cast<int64_t>(h);
}

}  // namespace castscope::collector::fleet
