// The shipper's rows by declared column (fleet_rows.h, pg_rows.h), without
// PostgreSQL: each row's COPY bytes are those the shipper wrote by hand
// before the rows were declared (its calls, in its order, are kept here as
// the reference), the INSERTs' text is what it was, and a result's rows are
// read at their declared columns.
#include "server/src/fleet/fleet_rows.h"

#include <libpq-fe.h>

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace castscope::collector::fleet {
namespace {

constexpr int64_t kMinuteNs = int64_t{28000000} * 60 * 1000000000;

TEST(FleetRows, ARollupIsCopiedInTheDeclaredColumnOrder) {
  RollupRow row;
  row.minute = {kMinuteNs};
  row.collector = "node-a-0123456789abcdef";
  row.shipment = 7;
  row.job = "job-1";
  row.rank = 3;
  row.site = -42;
  row.policy = 1, row.src = 2, row.dst = 3, row.outcome = 4, row.device = 5, row.role = 6, row.mode = 7, row.phase = 8;
  row.count = 100, row.bytes = 200, row.hits = 300, row.misses = 400, row.stale_hits = 500;
  PgCopyBuffer declared;
  append_row(declared, row);

  PgCopyBuffer by_hand;  // the shipper's calls before
  by_hand.begin_row(19);
  by_hand.timestamp_unix_ns(kMinuteNs);
  by_hand.text("node-a-0123456789abcdef");
  by_hand.int8(7);
  by_hand.text("job-1");
  by_hand.int4(3);
  by_hand.int8(-42);
  for (int code : {1, 2, 3, 4, 5, 6, 7, 8}) by_hand.int2(static_cast<int16_t>(code));
  for (int64_t n : {100, 200, 300, 400, 500}) by_hand.int8(n);
  EXPECT_EQ(std::string(declared.finish()), std::string(by_hand.finish()));
  EXPECT_EQ(declared.rows(), 1u);
  EXPECT_EQ(copy_sql<RollupRow>(),
            "COPY castscope.rollups(minute, collector, shipment, job, rank, site, policy, src, dst, outcome, device, "
            "role, mode, phase, count, bytes, hits, misses, stale_hits) FROM STDIN (FORMAT binary)");
}

TEST(FleetRows, AnAgentIsCopiedInTheDeclaredColumnOrder) {
  const AgentRow row{.collector = "c", .shipment = 9, .job = "job-1", .agent_id = "agent-0", .node = "node-a",
                     .rank = 1, .local_rank = 0, .world_size = 2, .pid = 4242, .torch_version = "2.14.1",
                     .policy_hash = "abc", .casts = 11, .ops = 12, .events_dropped = 13, .finished = true,
                     .first_seen = {1700000000123456789}, .last_seen = {1700000001123456789},
                     .viewer = "http://node-a:8080/"};
  PgCopyBuffer declared;
  append_row(declared, row);

  PgCopyBuffer by_hand;
  by_hand.begin_row(18);
  by_hand.text("c");
  by_hand.int8(9);
  by_hand.text("job-1");
  by_hand.text("agent-0");
  by_hand.text("node-a");
  by_hand.int4(1);
  by_hand.int4(0);
  by_hand.int4(2);
  by_hand.int4(4242);
  by_hand.text("2.14.1");
  by_hand.text("abc");
  by_hand.int8(11);
  by_hand.int8(12);
  by_hand.int8(13);
  by_hand.boolean(true);
  by_hand.timestamp_unix_ns(1700000000123456789);
  by_hand.timestamp_unix_ns(1700000001123456789);
  by_hand.text("http://node-a:8080/");
  EXPECT_EQ(std::string(declared.finish()), std::string(by_hand.finish()));
  EXPECT_EQ(copy_sql<AgentRow>().substr(0, 31), "COPY castscope.agents(collector");
}

TEST(FleetRows, AFindingIsCopiedInTheDeclaredColumnOrder) {
  const FindingRow row{.collector = "c", .shipment = 2, .job = "job-1", .kind = "stale-cache-hit", .severity = "warning",
                       .summary = "a summary", .file = "train.py", .line = 12, .ranks = "[0,1]",
                       .details = R"({"sites":[]})"};
  PgCopyBuffer declared;
  append_row(declared, row);

  PgCopyBuffer by_hand;
  by_hand.begin_row(10);
  by_hand.text("c");
  by_hand.int8(2);
  by_hand.text("job-1");
  by_hand.text("stale-cache-hit");
  by_hand.text("warning");
  by_hand.text("a summary");
  by_hand.text("train.py");
  by_hand.int4(12);
  by_hand.jsonb("[0,1]");
  by_hand.jsonb(R"({"sites":[]})");
  EXPECT_EQ(std::string(declared.finish()), std::string(by_hand.finish()));
}

// The shipper's sites INSERT before, for `rows` rows.
std::string sites_sql_by_hand(size_t rows) {
  std::string sql = "INSERT INTO castscope.sites(site, file, line, function, op, arg) VALUES ";
  for (size_t i = 0; i < rows * 6; i += 6) {
    if (i > 0) sql += ", ";
    const size_t p = i + 1;
    sql += "($" + std::to_string(p) + "::bigint, $" + std::to_string(p + 1) + ", $" + std::to_string(p + 2) +
           "::integer, $" + std::to_string(p + 3) + ", $" + std::to_string(p + 4) + ", $" + std::to_string(p + 5) + ")";
  }
  return sql;
}

TEST(FleetRows, SitesAndJobEndsAreInsertedAsBefore) {
  static_assert(params_per_row<SiteRow>() == 6);
  EXPECT_EQ(insert_sql<SiteRow>(1), sites_sql_by_hand(1));
  EXPECT_EQ(insert_sql<SiteRow>(3), sites_sql_by_hand(3));
  std::vector<std::string> params;
  append_params(SiteRow{-5, "train.py", 4000000000u, "step", "mm", "self"}, params);
  EXPECT_EQ(params, (std::vector<std::string>{"-5", "train.py", "4000000000", "step", "mm", "self"}));

  static_assert(params_per_row<JobEndRow>() == 5);  // ended_at is PostgreSQL's now()
  EXPECT_EQ(insert_sql<JobEndRow>(1),
            "INSERT INTO castscope.job_ends(collector, shipment, job, first_seen, ended_at, findings) "
            "VALUES ($1, $2::bigint, $3, to_timestamp($4::bigint), now(), $5::integer)");
  params.clear();
  append_params(JobEndRow{"c", 3, "job-1", {1700000000999999999}, {}, 4}, params);
  EXPECT_EQ(params, (std::vector<std::string>{"c", "3", "job-1", "1700000000", "4"}));
}

// A result made here, as libpq would hand it over: `names` and one row of `values`.
PgResult made_result(const std::vector<std::string>& names, const std::vector<std::string>& values) {
  PGresult* result = PQmakeEmptyPGresult(nullptr, PGRES_TUPLES_OK);
  std::vector<PGresAttDesc> columns(names.size());
  for (size_t i = 0; i < names.size(); ++i) {
    columns[i] = {};
    columns[i].name = const_cast<char*>(names[i].c_str());
    columns[i].typid = 25;  // text
    columns[i].typlen = -1;
    columns[i].atttypmod = -1;
  }
  EXPECT_TRUE(PQsetResultAttrs(result, static_cast<int>(columns.size()), columns.data()));
  for (size_t i = 0; i < values.size(); ++i)
    EXPECT_TRUE(PQsetvalue(result, 0, static_cast<int>(i), const_cast<char*>(values[i].c_str()),
                           static_cast<int>(values[i].size())));
  return PgResult(result);
}

constexpr auto kAnswer = select_list({{"job", "a.job"}, {"casts", "sum(a.casts)::bigint"}, {"running", "bool_or(x)"}});
constexpr auto kAgentColumns = schema::columns(pg::kAgents, {"node", "rank", "finished"});

TEST(FleetRows, ResultsAreReadByDeclaredColumn) {
  EXPECT_EQ(kAnswer.sql(), "a.job AS job, sum(a.casts)::bigint AS casts, bool_or(x) AS running");
  static_assert(kAnswer["casts"] == 1);
  static_assert(kAnswer.same_names(select_list({{"job", "j"}, {"casts", "c"}, {"running", "r"}})));
  static_assert(!kAnswer.same_names(select_list({{"job", "j"}, {"running", "r"}, {"casts", "c"}})));
  const PgResult answer = made_result({"job", "casts", "running"}, {"job-1", "42", "t"});
  const PgRow<kAnswer> row(answer, 0);
  EXPECT_EQ(row.text("job"), "job-1");
  EXPECT_EQ(row.integer("casts"), 42);
  EXPECT_TRUE(row.boolean("running"));

  EXPECT_EQ(kAgentColumns.list_sql(), "node, rank, finished");
  const PgResult agents = made_result({"node", "rank", "finished"}, {"node-a", "-1", "f"});
  const PgRow<kAgentColumns> agent(agents, 0);
  EXPECT_EQ(agent.text("node"), "node-a");
  EXPECT_EQ(agent.integer("rank"), -1);
  EXPECT_FALSE(agent.boolean("finished"));
}

}  // namespace
}  // namespace castscope::collector::fleet
