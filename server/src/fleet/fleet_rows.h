// The rows the shipper writes (shipper.h), one struct per table of
// fleet_schema.h it writes, and which member holds which column
// (pg_rows.h's PgRowLayout: checked at compile time to cover the table, each
// member of its column's type). Columns and their order are the
// declaration's; a column added to a table is a compile error here until
// its row has a member for it. Strings are views: a row is made, written and
// dropped at once.
#pragma once

#include <cstdint>
#include <string_view>
#include <tuple>

#include "server/src/fleet/fleet_schema.h"
#include "server/src/fleet/pg_rows.h"

namespace castscope::collector::fleet {

// castscope.rollups (binary COPY): a key-minute of a shipment's cast decisions.
struct RollupRow {
  PgTimestamp minute;
  std::string_view collector;
  int64_t shipment = 0;
  std::string_view job;
  int32_t rank = 0;
  int64_t site = 0;
  int16_t policy = 0, src = 0, dst = 0, outcome = 0, device = 0, role = 0, mode = 0, phase = 0;
  int64_t count = 0, bytes = 0, hits = 0, misses = 0, stale_hits = 0;
};

template <>
struct PgRowLayout<RollupRow> {
  static constexpr const schema::Table& kTable = pg::kRollups;
  using R = RollupRow;
  static constexpr auto kFields = std::tuple{
      field("minute", &R::minute),   field("collector", &R::collector), field("shipment", &R::shipment),
      field("job", &R::job),         field("rank", &R::rank),           field("site", &R::site),
      field("policy", &R::policy),   field("src", &R::src),             field("dst", &R::dst),
      field("outcome", &R::outcome), field("device", &R::device),       field("role", &R::role),
      field("mode", &R::mode),       field("phase", &R::phase),         field("count", &R::count),
      field("bytes", &R::bytes),     field("hits", &R::hits),           field("misses", &R::misses),
      field("stale_hits", &R::stale_hits)};
};

// castscope.agents (binary COPY): an agent as this collector saw it at a shipment.
struct AgentRow {
  std::string_view collector;
  int64_t shipment = 0;
  std::string_view job, agent_id, node;
  int32_t rank = 0, local_rank = 0, world_size = 0, pid = 0;
  std::string_view torch_version, policy_hash;
  int64_t casts = 0, ops = 0, events_dropped = 0;
  bool finished = false;
  PgTimestamp first_seen, last_seen;
  std::string_view viewer;
};

template <>
struct PgRowLayout<AgentRow> {
  static constexpr const schema::Table& kTable = pg::kAgents;
  using R = AgentRow;
  static constexpr auto kFields = std::tuple{
      field("collector", &R::collector),
      field("shipment", &R::shipment),
      field("job", &R::job),
      field("agent_id", &R::agent_id),
      field("node", &R::node),
      field("rank", &R::rank),
      field("local_rank", &R::local_rank),
      field("world_size", &R::world_size),
      field("pid", &R::pid),
      field("torch_version", &R::torch_version),
      field("policy_hash", &R::policy_hash),
      field("casts", &R::casts),
      field("ops", &R::ops),
      field("events_dropped", &R::events_dropped),
      field("finished", &R::finished),
      field("first_seen", &R::first_seen),
      field("last_seen", &R::last_seen),
      field("viewer", &R::viewer)};
};

// castscope.findings (binary COPY): a finding of a run this shipment ends.
// ranks and details: JSON text.
struct FindingRow {
  std::string_view collector;
  int64_t shipment = 0;
  std::string_view job, kind, severity, summary, file;
  int32_t line = 0;
  std::string_view ranks, details;
};

template <>
struct PgRowLayout<FindingRow> {
  static constexpr const schema::Table& kTable = pg::kFindings;
  using R = FindingRow;
  static constexpr auto kFields = std::tuple{
      field("collector", &R::collector), field("shipment", &R::shipment), field("job", &R::job),
      field("kind", &R::kind),           field("severity", &R::severity), field("summary", &R::summary),
      field("file", &R::file),           field("line", &R::line),         field("ranks", &R::ranks),
      field("details", &R::details)};
};

// castscope.sites (INSERT ... ON CONFLICT DO NOTHING): a site new to this
// connection. line: the store's, as it is (PostgreSQL refuses one past
// integer's range rather than take it wrapped).
struct SiteRow {
  int64_t site = 0;
  std::string_view file;
  uint32_t line = 0;
  std::string_view function, op, arg;
};

template <>
struct PgRowLayout<SiteRow> {
  static constexpr const schema::Table& kTable = pg::kSites;
  using R = SiteRow;
  static constexpr auto kFields =
      std::tuple{field("site", &R::site), field("file", &R::file), field("line", &R::line),
                 field("function", &R::function), field("op", &R::op), field("arg", &R::arg)};
};

// castscope.job_ends (INSERT): a collector's part of a job ended, at
// PostgreSQL's now().
struct JobEndRow {
  std::string_view collector;
  int64_t shipment = 0;
  std::string_view job;
  PgTimestamp first_seen;  // sent in whole seconds
  PgNow ended_at;
  int32_t findings = 0;
};

template <>
struct PgRowLayout<JobEndRow> {
  static constexpr const schema::Table& kTable = pg::kJobEnds;
  using R = JobEndRow;
  static constexpr auto kFields =
      std::tuple{field("collector", &R::collector), field("shipment", &R::shipment), field("job", &R::job),
                 field("first_seen", &R::first_seen), field("ended_at", &R::ended_at),
                 field("findings", &R::findings)};
};

}  // namespace castscope::collector::fleet
