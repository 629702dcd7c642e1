// The store's tables, each declared once. CREATE TABLE, INSERT, SELECT and
// UPDATE text is generated from these declarations, and every bind or read
// ordinal comes from a column list checked at compile time:
//
//   constexpr auto kRow = schema::columns(schema::kLocations, {"kind", "file"});
//   statement.bind(kRow.param("file"), ...);      // 2, or a compile error
//   statement.column_text(kRow["file"]);          // 1
//
// so an ordinal cannot drift from its statement's column list, and a column
// name that is not in the table does not compile. WHERE clauses stay
// hand-written (SQLite rejects a wrong name there when it prepares them).
//
// Who writes and who reads each table:
//   runs, agents   StoreWriter (counters kept in memory, written at commit);
//                  StoreReader::list_runs, load_run_data
//   batches        StoreWriter (its primary key is the dedup); list_sequences
//   strings,       StoreWriter interns them; readers resolve ids
//   locations
//   casts, ops,    StoreWriter's multi-row inserts; StoreReader::query_events,
//   cache_samples, load_run_data
//   kernels,
//   cast_counts,
//   numerics,
//   op_counts
//   findings       StoreWriter::replace_findings (the live analyzer);
//                  StoreReader::list_findings
//
// Event tables key their rows by id, event_row_id(agent row, seq) (row_id.h),
// a column beside the rowid SQLite picks (appending costs no b-tree descent),
// and event_segments maps id ranges to rowid ranges (event_segments.h); no
// table has a secondary index (sqlite_store.h says why). Readers read event
// rows through row_codec.h, which derives each table's row from these
// declarations.
#pragma once

#include <array>
#include <cstddef>
#include <span>
#include <string>
#include <string_view>

namespace castscope::collector::schema {

struct Column {
  std::string_view name;
  std::string_view definition;  // SQL type and column constraints
};

struct Table;

namespace detail {
// Not constexpr: reaching it in a constant evaluation (a name that is not a
// column of the table or list) is a compile error that names it.
void no_such_column();
std::string select_sql(const Table& table, std::span<const int> indices);
std::string insert_sql(const Table& table, std::span<const int> indices, size_t rows, bool or_ignore);
std::string joined(const Table& table, std::span<const int> indices, std::string_view after_each,
                   std::string_view separator, std::string_view prefix = {});
}  // namespace detail

struct Table {
  std::string_view name;
  std::span<const Column> columns;
  std::string_view constraints = {};  // table constraints, after the columns
  bool without_rowid = false;
  // An event table: `id` is event_row_id(agent, seq), a column beside the
  // rowid SQLite picks, found through event_segments (event_segments.h).
  // Stores made before version 17 keep `id` as the rowid (INTEGER PRIMARY KEY).
  bool segmented = false;

  // Index of a column in the declaration.
  consteval int column(std::string_view column_name) const {
    for (size_t i = 0; i < columns.size(); ++i)
      if (columns[i].name == column_name) return static_cast<int>(i);
    detail::no_such_column();
    return -1;
  }
  std::string create_sql() const;
  // As schema `version` made it: without the columns added since (kLaterColumns).
  std::string create_sql(int version) const;
};

// Some columns of one table, in statement order: the column list of a
// SELECT, INSERT, UPDATE or lookup. Positions are computed at compile time.
template <size_t N>
struct Columns {
  const Table* table;
  std::array<int, N> indices;  // into table->columns

  static constexpr int size() { return static_cast<int>(N); }
  // 0-based position: a SELECT's read ordinal (Statement::column_*).
  consteval int operator[](std::string_view column_name) const {
    const int column = table->column(column_name);
    for (size_t i = 0; i < N; ++i)
      if (indices[i] == column) return static_cast<int>(i);
    detail::no_such_column();
    return -1;
  }
  // Position of a column of the table, or -1 when this list leaves it out
  // (a column the table does not have still fails to compile).
  consteval int find(std::string_view column_name) const {
    const int column = table->column(column_name);
    for (size_t i = 0; i < N; ++i)
      if (indices[i] == column) return static_cast<int>(i);
    return -1;
  }
  // 1-based: an INSERT's, UPDATE's or lookup's bind ordinal (Statement::bind).
  consteval int param(std::string_view column_name) const { return (*this)[column_name] + 1; }

  // "a, b", each name after `prefix` ("c." for a join).
  std::string list_sql(std::string_view prefix = {}) const { return detail::joined(*table, indices, {}, ", ", prefix); }
  // "SELECT a, b FROM t"; the caller adds WHERE, ORDER BY.
  std::string select_sql() const { return detail::select_sql(*table, indices); }
  // "INSERT [OR IGNORE] INTO t(a, b) VALUES (?,?),(?,?)...": `rows` rows.
  std::string insert_sql(size_t rows = 1, bool or_ignore = false) const {
    return detail::insert_sql(*table, indices, rows, or_ignore);
  }
  // "a = ?, b = ?" (an UPDATE's SET) or "a = ? AND b = ?" (a lookup's WHERE).
  std::string assign_sql() const { return detail::joined(*table, indices, " = ?", ", "); }
  std::string match_sql() const { return detail::joined(*table, indices, " = ?", " AND "); }
};

template <size_t N>
consteval Columns<N> columns(const Table& table, const std::string_view (&names)[N]) {
  Columns<N> out{&table, {}};
  for (size_t i = 0; i < N; ++i) out.indices[i] = table.column(names[i]);
  return out;
}

// Every column of `T`, in declaration order.
template <const Table& T>
consteval Columns<T.columns.size()> all_columns() {
  Columns<T.columns.size()> out{&T, {}};
  for (size_t i = 0; i < T.columns.size(); ++i) out.indices[i] = static_cast<int>(i);
  return out;
}

// ---------------------------------------------------------------------------
// The tables. Identity columns of agents are kept from their first batch;
// counters are maintained by the writer (so summaries never scan events).
// Event tables pack small fields (event_columns.h: slot, codes, input_dtypes,
// autocast_enabled, gemm); the views cast_rows and op_rows, generated from
// event_columns.h's field declarations, unpack them for SQL.
// casts.shape is the dims as native-endian int64s. String and location
// columns of event rows hold ids into strings and locations, 0 meaning none.

inline constexpr Column kRunsColumns[] = {
    {"id", "INTEGER PRIMARY KEY"},
    {"run_id", "TEXT NOT NULL UNIQUE"},
    {"first_seen_unix_ns", "INTEGER NOT NULL"},
    {"last_seen_unix_ns", "INTEGER NOT NULL"},
};
inline constexpr Table kRuns{"runs", kRunsColumns};

inline constexpr Column kAgentsColumns[] = {
    {"id", "INTEGER PRIMARY KEY"},
    {"run", "INTEGER NOT NULL REFERENCES runs(id)"},
    {"agent_id", "TEXT NOT NULL"},
    {"pid", "INTEGER NOT NULL"},
    {"rank", "INTEGER NOT NULL"},
    {"local_rank", "INTEGER NOT NULL"},
    {"world_size", "INTEGER NOT NULL"},
    {"hostname", "TEXT NOT NULL"},
    {"torch_version", "TEXT NOT NULL"},
    {"command", "TEXT NOT NULL"},
    {"policy_hash", "TEXT NOT NULL"},
    {"policy_files", "TEXT NOT NULL"},  // JSON array of paths
    {"batches", "INTEGER NOT NULL DEFAULT 0"},
    {"casts", "INTEGER NOT NULL DEFAULT 0"},
    {"ops", "INTEGER NOT NULL DEFAULT 0"},
    {"cache_samples", "INTEGER NOT NULL DEFAULT 0"},
    {"first_sequence", "INTEGER NOT NULL DEFAULT 0"},
    {"last_sequence", "INTEGER NOT NULL DEFAULT 0"},
    {"events_recorded_total", "INTEGER NOT NULL DEFAULT 0"},
    {"events_dropped_total", "INTEGER NOT NULL DEFAULT 0"},
    {"internal_errors", "INTEGER NOT NULL DEFAULT 0"},
    {"finished", "INTEGER NOT NULL DEFAULT 0"},
    // Version 6 (added at the end, as ALTER TABLE does when upgrading):
    {"kernels", "INTEGER NOT NULL DEFAULT 0"},
    {"gpu_timing", "TEXT NOT NULL DEFAULT ''"},  // AgentStats.gpu_timing, the latest
    {"gpu_records_dropped", "INTEGER NOT NULL DEFAULT 0"},
    // Version 9: AgentStats.overlay_errors, the longest list seen (JSON array).
    {"overlay_errors", "TEXT NOT NULL DEFAULT '[]'"},
    // Version 10: AgentIdentity.castscope_version ('' from older agents).
    {"castscope_version", "TEXT NOT NULL DEFAULT ''"},
    // Version 13: AgentIdentity.aggregate (docs/aggregate.md); 0 from older agents.
    {"aggregate", "INTEGER NOT NULL DEFAULT 0"},
    // Version 15: numerics rows stored (docs/numerics.md); 0 from older stores.
    {"numerics", "INTEGER NOT NULL DEFAULT 0"},
};
inline constexpr Table kAgents{"agents", kAgentsColumns, "UNIQUE(run, agent_id)"};

inline constexpr Column kBatchesColumns[] = {
    {"agent", "INTEGER NOT NULL"},
    {"sequence", "INTEGER NOT NULL"},
    {"received_unix_ns", "INTEGER NOT NULL"},
    {"n_events", "INTEGER NOT NULL"},
    // Version 21: the agent's drops so far (Batch.events_dropped_total) and the
    // first and last event time in the batch (casts, ops, kernels; 0 without
    // any): where the timeline marks lost events. A batch stored before it:
    // -1 drops (unknown), times 0.
    {"events_dropped_total", "INTEGER NOT NULL DEFAULT 0"},
    {"first_ts_ns", "INTEGER NOT NULL DEFAULT 0"},
    {"last_ts_ns", "INTEGER NOT NULL DEFAULT 0"},
};
inline constexpr Table kBatches{"batches", kBatchesColumns, "PRIMARY KEY(agent, sequence)", /*without_rowid=*/true};

inline constexpr Column kStringsColumns[] = {
    {"id", "INTEGER PRIMARY KEY"},
    {"text", "TEXT NOT NULL UNIQUE"},
};
inline constexpr Table kStrings{"strings", kStringsColumns};

inline constexpr Column kLocationsColumns[] = {
    {"id", "INTEGER PRIMARY KEY"},
    {"kind", "INTEGER NOT NULL"},
    {"file", "TEXT NOT NULL"},
    {"line", "INTEGER NOT NULL"},
    {"function", "TEXT NOT NULL"},
    {"stack", "TEXT NOT NULL"},               // JSON array of frames; empty when the agent sent none
    {"flags", "INTEGER NOT NULL DEFAULT 0"},  // bit 0: inside a scripted autocast(enabled=False) block
    // Version 7: the text of the line as the agent read it (capped; empty: none). Not part of the key.
    {"source", "TEXT NOT NULL DEFAULT ''"},
    // Version 12: a JIT-inserted cast CSE shared between ops: the other consumers' lines (JSON array; empty: none).
    {"also_consumed_at", "TEXT NOT NULL DEFAULT ''"},
};
inline constexpr Table kLocations{"locations", kLocationsColumns,
                                  "UNIQUE(kind, file, line, function, stack, flags, also_consumed_at)"};

inline constexpr Column kCastsColumns[] = {
    {"id", "INTEGER"},  // event_row_id(agent, seq); the rowid is SQLite's
    {"ts_ns", "INTEGER"},
    {"op", "INTEGER"},
    {"arg_name", "INTEGER"},
    {"slot", "INTEGER"},  // pack_cast_slot
    {"codes", "INTEGER"},  // pack_cast_codes
    {"shape", "BLOB"},
    {"bytes", "INTEGER"},
    {"op_seq", "INTEGER"},
    {"source_version", "INTEGER"},
    {"cached_version", "INTEGER"},
    {"location", "INTEGER"},
    // Version 19 (added at the end, as ALTER TABLE does when upgrading):
    {"float8", "INTEGER NOT NULL DEFAULT 0"},            // pack_float8; 0: no float8 scaling
    {"float8_zero_amax", "INTEGER NOT NULL DEFAULT 0"},  // Float8Scaling.zero_amax
    // Version 20: the precision map's keys (CastEvent.module, .parameter), strings ids; 0: none.
    {"module", "INTEGER NOT NULL DEFAULT 0"},
    {"parameter", "INTEGER NOT NULL DEFAULT 0"},
};
inline constexpr Table kCasts{"casts", kCastsColumns, {}, false, /*segmented=*/true};

// Columns of event tables added after the oldest version a read-only reader
// opens as it is (sqlite_store.cc kOldestReadableVersion): in an older store
// they read as `default_sql` (row_codec.h columns_in_store).
struct LaterColumn {
  std::string_view table, column;
  int since;  // the schema version that added it
  std::string_view default_sql;
};
inline constexpr LaterColumn kLaterColumns[] = {
    {"casts", "float8", 19, "0"},
    {"casts", "float8_zero_amax", 19, "0"},
    {"numerics", "saturated", 19, "0"},
    {"casts", "module", 20, "0"},
    {"casts", "parameter", 20, "0"},
};

inline constexpr Column kOpsColumns[] = {
    {"id", "INTEGER"},  // event_row_id(agent, seq); the rowid is SQLite's
    {"ts_ns", "INTEGER"},
    {"thread", "INTEGER"},
    {"op", "INTEGER"},
    {"codes", "INTEGER"},         // pack_op_codes
    {"input_dtypes", "INTEGER"},  // pack_input_dtypes
    {"cpu_duration_ns", "INTEGER"},
    {"location", "INTEGER"},
    {"autocast_enabled", "INTEGER"},  // pack_device_mask
    {"autocast_nesting", "INTEGER"},
    // Version 8 (added at the end, as ALTER TABLE does when upgrading):
    {"gemm", "INTEGER NOT NULL DEFAULT 0"},  // pack_gemm; 0: none
};
inline constexpr Table kOps{"ops", kOpsColumns, {}, false, /*segmented=*/true};

inline constexpr Column kCacheSamplesColumns[] = {
    {"id", "INTEGER"},  // event_row_id(agent, seq); the rowid is SQLite's
    {"ts_ns", "INTEGER"},
    {"trigger", "INTEGER"},
    {"iteration", "INTEGER"},
    {"live_casts", "INTEGER"},
    {"live_bytes", "INTEGER"},
    // Version 11 (CacheSample's orphaned counts and running totals; 0 in older rows):
    {"orphaned_casts", "INTEGER NOT NULL DEFAULT 0"},
    {"orphaned_bytes", "INTEGER NOT NULL DEFAULT 0"},
    {"cache_hits", "INTEGER NOT NULL DEFAULT 0"},
    {"released_casts", "INTEGER NOT NULL DEFAULT 0"},
};
inline constexpr Table kCacheSamples{"cache_samples", kCacheSamplesColumns, {}, false, /*segmented=*/true};

inline constexpr Column kKernelsColumns[] = {
    {"id", "INTEGER"},  // event_row_id(agent, seq); the rowid is SQLite's
    {"ts_ns", "INTEGER"},
    {"duration_ns", "INTEGER"},
    {"name", "INTEGER"},   // strings id
    {"codes", "INTEGER"},  // pack_kernel_codes: activity, launched_by
    {"device", "INTEGER"},
    {"stream", "INTEGER"},
    {"launch_seq", "INTEGER"},  // the cast's or op's seq (same agent); 0: none
    {"bytes", "INTEGER"},
    {"correlation_id", "INTEGER"},
};
inline constexpr Table kKernels{"kernels", kKernelsColumns, {}, false, /*segmented=*/true};

// Version 13: aggregate mode's counters (events.proto CastCounts, OpCounts).
// codes: pack_cast_codes / pack_op_codes of the counter's key, as in casts
// and ops, so readers fold them with the same code. agents.casts and
// agents.ops count these rows too (each is one record of the agent).
inline constexpr Column kCastCountsColumns[] = {
    {"id", "INTEGER"},  // event_row_id(agent, seq); the rowid is SQLite's
    {"first_ts_ns", "INTEGER"},
    {"last_ts_ns", "INTEGER"},
    {"thread", "INTEGER"},
    {"op", "INTEGER"},
    {"arg_name", "INTEGER"},
    {"location", "INTEGER"},
    {"codes", "INTEGER"},
    {"count", "INTEGER"},
    {"bytes", "INTEGER"},
    {"iteration", "INTEGER"},
    {"max_version_gap", "INTEGER"},
    {"round_trips", "INTEGER"},
};
inline constexpr Table kCastCounts{"cast_counts", kCastCountsColumns, {}, false, /*segmented=*/true};

inline constexpr Column kOpCountsColumns[] = {
    {"id", "INTEGER"},  // event_row_id(agent, seq); the rowid is SQLite's
    {"first_ts_ns", "INTEGER"},
    {"last_ts_ns", "INTEGER"},
    {"thread", "INTEGER"},
    {"op", "INTEGER"},
    {"location", "INTEGER"},
    {"codes", "INTEGER"},
    {"autocast_enabled", "INTEGER"},  // pack_device_mask
    {"calls", "INTEGER"},
    {"errors", "INTEGER"},
    {"cpu_duration_ns", "INTEGER"},
    {"iteration", "INTEGER"},
};
inline constexpr Table kOpCounts{"op_counts", kOpCountsColumns, {}, false, /*segmented=*/true};

inline constexpr Column kFindingsColumns[] = {
    {"id", "INTEGER PRIMARY KEY"},
    {"run", "INTEGER NOT NULL REFERENCES runs(id)"},
    {"kind", "TEXT NOT NULL"},
    {"severity", "TEXT NOT NULL"},
    {"summary", "TEXT NOT NULL"},
    {"details_json", "TEXT NOT NULL"},  // the whole finding, as in the report
};
inline constexpr Table kFindings{"findings", kFindingsColumns};

// Version 7: the viewer's mipmap (timeline_tiles.h). One row per agent,
// track, level and bucket; counts add up over every event of the bucket.
inline constexpr Column kTimelineTilesColumns[] = {
    {"agent", "INTEGER NOT NULL"},
    {"track", "INTEGER NOT NULL"},   // tiles::thread_track / gpu_track
    {"level", "INTEGER NOT NULL"},
    {"bucket", "INTEGER NOT NULL"},  // ts_ns >> tiles::level_shift(level)
    {"min_seq", "INTEGER NOT NULL"},
    {"max_seq", "INTEGER NOT NULL"},
    {"ops", "INTEGER NOT NULL"},
    {"op_ns", "INTEGER NOT NULL"},
    {"decisions", "INTEGER NOT NULL"},
    {"casts", "INTEGER NOT NULL"},
    {"bytes", "INTEGER NOT NULL"},
    {"miss", "INTEGER NOT NULL"},
    {"hit", "INTEGER NOT NULL"},
    {"stale_hit", "INTEGER NOT NULL"},
    {"backward", "INTEGER NOT NULL"},
    {"to_bfloat16", "INTEGER NOT NULL"},
    {"to_float16", "INTEGER NOT NULL"},
    {"to_float32", "INTEGER NOT NULL"},
    {"modes", "INTEGER NOT NULL"},
    {"kernels", "INTEGER NOT NULL"},
    {"kernel_ns", "INTEGER NOT NULL"},
};
inline constexpr Table kTimelineTiles{"timeline_tiles", kTimelineTilesColumns, "PRIMARY KEY(agent, track, level, bucket)",
                                      /*without_rowid=*/true};

// Version 14: fleet shipping (docs/fleet.md), written only by a collector
// that ships. Per-minute rollups of cast decisions: each commit appends its
// own counts per key and minute (shipment 0: open), in the transaction that
// stores the events, so a rollup never misses or doubles an event. Append
// only, with no index: an upsert into a keyed table per commit cost ingest
// 9 % (measured), these appends about nothing. Sealing gives open rows a
// shipment number (their id range kept in ship_state); the shipper sums a
// shipment's rows per key and minute, and once PostgreSQL has them they
// leave. codes: pack_cast_key without the cache field (its outcome is
// counted in hits, misses, stale_hits); minute: unix minutes.
inline constexpr Column kShipRollupsColumns[] = {
    {"id", "INTEGER PRIMARY KEY"},
    {"shipment", "INTEGER NOT NULL"},  // 0: open
    {"agent", "INTEGER NOT NULL"},
    {"minute", "INTEGER NOT NULL"},
    {"op", "INTEGER NOT NULL"},
    {"arg_name", "INTEGER NOT NULL"},
    {"location", "INTEGER NOT NULL"},
    {"codes", "INTEGER NOT NULL"},
    {"count", "INTEGER NOT NULL"},
    {"bytes", "INTEGER NOT NULL"},
    {"hits", "INTEGER NOT NULL"},
    {"misses", "INTEGER NOT NULL"},
    {"stale_hits", "INTEGER NOT NULL"},
};
inline constexpr Table kShipRollups{"ship_rollups", kShipRollupsColumns};

// Version 14: the shipper's state (its collector id, the next shipment
// number, what was shipped of each run), as key and value.
inline constexpr Column kShipStateColumns[] = {
    {"key", "TEXT PRIMARY KEY"},
    {"value", "TEXT NOT NULL"},
};
inline constexpr Table kShipState{"ship_state", kShipStateColumns};

// Version 15: numerics windows' counts per site and GradScaler updates
// (events.proto NumericsSummary; docs/numerics.md). Codes as plain columns:
// a run has few of these rows. scale_bits: the scale's IEEE-754 bits (the
// row codec reads integers), 0 for sites.
inline constexpr Column kNumericsColumns[] = {
    {"id", "INTEGER"},  // event_row_id(agent, seq); the rowid is SQLite's
    {"first_ts_ns", "INTEGER"},
    {"last_ts_ns", "INTEGER"},
    {"thread", "INTEGER"},
    {"op", "INTEGER"},        // strings id; 0 for an update
    {"arg_name", "INTEGER"},  // strings id; casts
    {"location", "INTEGER"},
    {"kind", "INTEGER"},      // NumericsSummary.Kind
    {"device_type", "INTEGER"},
    {"src_dtype", "INTEGER"},
    {"dst_dtype", "INTEGER"},
    {"mode", "INTEGER"},
    {"phase", "INTEGER"},
    {"arg_index", "INTEGER"},
    {"iteration", "INTEGER"},
    {"tensors", "INTEGER"},
    {"value_count", "INTEGER"},  // NumericsSummary.values
    {"overflowed", "INTEGER"},
    {"underflowed", "INTEGER"},
    {"nonfinite", "INTEGER"},
    {"nan", "INTEGER"},
    {"max_abs_log2", "INTEGER"},
    {"first_nonfinite_seq", "INTEGER"},
    {"scale_bits", "INTEGER"},
    {"found_inf", "INTEGER"},
    // Version 19 (added at the end, as ALTER TABLE does when upgrading):
    {"saturated", "INTEGER NOT NULL DEFAULT 0"},  // NumericsSummary.saturated
};
inline constexpr Table kNumerics{"numerics", kNumericsColumns, {}, false, /*segmented=*/true};

// Version 17: where each stored batch's rows of an event table lie. One row
// per batch and table: its rows' rowids [first_row, last_row], consecutive
// (SQLite appends them), in id order, with ids from min_id to max_id
// (event_segments.h reads and writes it).
inline constexpr Column kEventSegmentsColumns[] = {
    {"event_table", "TEXT NOT NULL"},
    {"max_id", "INTEGER NOT NULL"},
    {"first_row", "INTEGER NOT NULL"},
    {"min_id", "INTEGER NOT NULL"},
    {"last_row", "INTEGER NOT NULL"},
};
inline constexpr Table kEventSegments{"event_segments", kEventSegmentsColumns,
                                      "PRIMARY KEY(event_table, max_id, first_row)", /*without_rowid=*/true};

inline constexpr const Table* kTables[] = {&kRuns,         &kAgents,  &kBatches,  &kStrings,      &kLocations, &kCasts,
                                           &kOps,          &kCacheSamples, &kKernels, &kFindings, &kTimelineTiles,
                                           &kCastCounts,   &kOpCounts, &kShipRollups, &kShipState, &kNumerics,
                                           &kEventSegments};

// The whole schema of a new store: every table, then the views.
std::string create_schema_sql();
// The cast_rows and op_rows views alone (a migration that changes a table's
// packed fields drops and re-creates its view).
std::string cast_rows_view_sql();
std::string op_rows_view_sql();

}  // namespace castscope::collector::schema
