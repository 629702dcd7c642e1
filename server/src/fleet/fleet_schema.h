// The fleet's PostgreSQL schema (docs/fleet.md), declared once in the
// SQLite store's style (store_schema.h's Column and Table), with its
// migrations, day partitions and roles. Everything lives in the schema
// `castscope`.
//
// Who writes what. Node collectors (the writer role) insert only: each
// shipment is a row of `shipments` whose primary key (collector, shipment)
// makes it land once, then its rollups (binary COPY), the sites they name,
// snapshots of agents, and at a job's end the job's end and its findings.
// Work that must update or delete (job summaries, rank divergence, day
// partitions) runs in SECURITY DEFINER functions owned by the role that ran
// `fleet init`. Readers (the reader role) select only.
#pragma once

#include <string>
#include <vector>

#include "server/src/store/store_schema.h"

namespace castscope::collector::fleet {

inline constexpr int kFleetSchemaVersion = 2;
inline constexpr const char* kWriterRole = "castscope_writer";
inline constexpr const char* kReaderRole = "castscope_reader";

namespace pg {
using schema::Column;
using schema::Table;

inline constexpr Column kShipmentsColumns[] = {
    {"collector", "text NOT NULL"},  // the node collector's id (its store's, kept in ship_state)
    {"shipment", "bigint NOT NULL"},
    {"through_minute", "bigint NOT NULL"},
    {"rollup_rows", "bigint NOT NULL"},
    {"shipped_at", "timestamptz NOT NULL DEFAULT now()"},
};
inline constexpr Table kShipments{"castscope.shipments", kShipmentsColumns, "PRIMARY KEY (collector, shipment)"};

// A site: file, line, function, op and argument; `site` is a 64-bit hash of
// them (site_id()), so collectors need no coordination to name one.
inline constexpr Column kSitesColumns[] = {
    {"site", "bigint PRIMARY KEY"}, {"file", "text NOT NULL"}, {"line", "integer NOT NULL"},
    {"function", "text NOT NULL"},  {"op", "text NOT NULL"},   {"arg", "text NOT NULL"},
};
inline constexpr Table kSites{"castscope.sites", kSitesColumns};

// Per-minute rollups: what a collector's ship_rollups rows become. Codes are
// events.proto's enum values. Partitioned by day on `minute`.
inline constexpr Column kRollupsColumns[] = {
    {"minute", "timestamptz NOT NULL"}, {"collector", "text NOT NULL"}, {"shipment", "bigint NOT NULL"},
    {"job", "text NOT NULL"},           {"rank", "integer NOT NULL"},   {"site", "bigint NOT NULL"},
    {"policy", "smallint NOT NULL"},    {"src", "smallint NOT NULL"},   {"dst", "smallint NOT NULL"},
    {"outcome", "smallint NOT NULL"},   {"device", "smallint NOT NULL"}, {"role", "smallint NOT NULL"},
    {"mode", "smallint NOT NULL"},      {"phase", "smallint NOT NULL"}, {"count", "bigint NOT NULL"},
    {"bytes", "bigint NOT NULL"},       {"hits", "bigint NOT NULL"},    {"misses", "bigint NOT NULL"},
    {"stale_hits", "bigint NOT NULL"},
};
inline constexpr Table kRollups{"castscope.rollups", kRollupsColumns};

// Agents as a collector saw them at a shipment (the latest shipment wins).
inline constexpr Column kAgentsColumns[] = {
    {"collector", "text NOT NULL"},   {"shipment", "bigint NOT NULL"},    {"job", "text NOT NULL"},
    {"agent_id", "text NOT NULL"},    {"node", "text NOT NULL"},          {"rank", "integer NOT NULL"},
    {"local_rank", "integer NOT NULL"}, {"world_size", "integer NOT NULL"}, {"pid", "integer NOT NULL"},
    {"torch_version", "text NOT NULL"}, {"policy_hash", "text NOT NULL"},  {"casts", "bigint NOT NULL"},
    {"ops", "bigint NOT NULL"},       {"events_dropped", "bigint NOT NULL"}, {"finished", "boolean NOT NULL"},
    {"first_seen", "timestamptz NOT NULL"}, {"last_seen", "timestamptz NOT NULL"},
    {"viewer", "text NOT NULL"},  // the node collector's viewer URL ('' when it serves none)
};
inline constexpr Table kAgents{"castscope.agents", kAgentsColumns, "PRIMARY KEY (collector, job, agent_id, shipment)"};

// A collector's part of a job ended (all its agents there finished); the
// findings shipped with the same shipment are that part's findings.
inline constexpr Column kJobEndsColumns[] = {
    {"collector", "text NOT NULL"}, {"shipment", "bigint NOT NULL"}, {"job", "text NOT NULL"},
    {"first_seen", "timestamptz NOT NULL"}, {"ended_at", "timestamptz NOT NULL"}, {"findings", "integer NOT NULL"},
};
inline constexpr Table kJobEnds{"castscope.job_ends", kJobEndsColumns, "PRIMARY KEY (collector, job, shipment)"};

inline constexpr Column kFindingsColumns[] = {
    {"collector", "text NOT NULL"}, {"shipment", "bigint NOT NULL"}, {"job", "text NOT NULL"},
    {"kind", "text NOT NULL"},      {"severity", "text NOT NULL"},   {"summary", "text NOT NULL"},
    {"file", "text NOT NULL"},      {"line", "integer NOT NULL"},    {"ranks", "jsonb NOT NULL"},
    {"details", "jsonb NOT NULL"},
};
inline constexpr Table kFindings{"castscope.findings", kFindingsColumns};

// The per-job site summary, made from the job's rollups when a part of it
// ends (castscope.job_ended); partitioned by day on `ended_at`.
inline constexpr Column kJobSitesColumns[] = {
    {"ended_at", "timestamptz NOT NULL"}, {"job", "text NOT NULL"},       {"rank", "integer NOT NULL"},
    {"site", "bigint NOT NULL"},          {"policy", "smallint NOT NULL"}, {"src", "smallint NOT NULL"},
    {"dst", "smallint NOT NULL"},         {"outcome", "smallint NOT NULL"}, {"device", "smallint NOT NULL"},
    {"role", "smallint NOT NULL"},        {"mode", "smallint NOT NULL"},   {"phase", "smallint NOT NULL"},
    {"count", "bigint NOT NULL"},         {"bytes", "bigint NOT NULL"},    {"hits", "bigint NOT NULL"},
    {"misses", "bigint NOT NULL"},        {"stale_hits", "bigint NOT NULL"},
};
inline constexpr Table kJobSites{"castscope.job_sites", kJobSitesColumns};

// rank-divergence findings (castscope.job_ended): `sides` is a JSON array of
// {"ranks": [...], "casts": [{"src","dst","mode","count"}...]}, the side
// holding the job's lowest rank first.
inline constexpr Column kRankDivergencesColumns[] = {
    {"job", "text NOT NULL"},   {"site", "bigint NOT NULL"}, {"computed_at", "timestamptz NOT NULL DEFAULT now()"},
    {"sides", "jsonb NOT NULL"},
};
inline constexpr Table kRankDivergences{"castscope.rank_divergences", kRankDivergencesColumns,
                                        "PRIMARY KEY (job, site)"};

inline constexpr const Table* kTables[] = {&kShipments, &kSites,    &kRollups, &kAgents, &kJobEnds,
                                           &kFindings,  &kJobSites, &kRankDivergences};
}  // namespace pg

// The SQL that takes a database from schema version `from` to `from + 1`
// (1: from nothing). Run by `fleet init` as the schema's owner.
std::vector<std::string> migration_sql();
// Grants for the two group roles (created when absent).
std::string roles_sql();
// 64-bit site id (FNV-1a of the fields, '\x1f'-separated), as PostgreSQL bigint.
int64_t site_id(std::string_view file, uint32_t line, std::string_view function, std::string_view op,
                std::string_view arg);

}  // namespace castscope::collector::fleet
