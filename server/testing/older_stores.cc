#include "server/testing/older_stores.h"

#include <sqlite3.h>

#include "server/src/store/sqlite_store.h"
#include "server/src/store/store_schema.h"

namespace castscope::collector::testing {
namespace {

namespace schema = collector::schema;

// Version 16: event tables keep id as their rowid, and no segments.
std::string to_version_16() {
  std::string sql = "PRAGMA legacy_alter_table=ON;";  // the views name tables gone for a moment
  for (const schema::Table* table : schema::kTables) {
    if (!table->segmented) continue;
    const std::string name(table->name);
    // Version 16's columns: none added later (kLaterColumns; their own steps dropped them already).
    sql += "CREATE TABLE " + name + "_v16(";
    bool first = true;
    for (const schema::Column& column : table->columns) {
      bool later = false;
      for (const schema::LaterColumn& added : schema::kLaterColumns)
        later = later || (added.table == table->name && added.column == column.name && added.since > 16);
      if (later) continue;
      sql += std::string(first ? "" : ", ") + std::string(column.name) + " " +
             (column.name == "id" ? std::string("INTEGER PRIMARY KEY") : std::string(column.definition));
      first = false;
    }
    sql += "); INSERT INTO " + name + "_v16 SELECT * FROM " + name + " ORDER BY id; DROP TABLE " + name +
           "; ALTER TABLE " + name + "_v16 RENAME TO " + name + ";";
  }
  return sql + "DROP TABLE event_segments; PRAGMA legacy_alter_table=OFF;";
}

// Version 15: today's tiles, each level l at level l + 2, with two finer
// levels below them (2^16 and 2^18 ns buckets; here one tile of each level,
// inside today's finest tile but not at its start, so that a reader that
// took them for today's levels would read other buckets).
std::string to_version_15() {
  const std::string tile_columns =
      "min_seq, max_seq, ops, op_ns, decisions, casts, bytes, miss, hit, stale_hit, backward, to_bfloat16, "
      "to_float16, to_float32, modes, kernels, kernel_ns";
  return "CREATE TABLE tiles_now AS SELECT * FROM timeline_tiles; DELETE FROM timeline_tiles;"
         "INSERT INTO timeline_tiles SELECT agent, track, level + 2, bucket, " + tile_columns + " FROM tiles_now;"
         "INSERT INTO timeline_tiles SELECT agent, track, 0, bucket * 16 + 3, " + tile_columns +
         " FROM tiles_now WHERE level = 0;"
         "INSERT INTO timeline_tiles SELECT agent, track, 1, bucket * 4 + 1, " + tile_columns +
         " FROM tiles_now WHERE level = 0;"
         "DROP TABLE tiles_now;";
}

// Today's cast_rows view without version 20's module columns (the view's
// last ones); empty when the text is not as expected.
std::string cast_rows_view_before_modules() {
  std::string view = schema::cast_rows_view_sql();
  const size_t from = view.find(", module, parameter");
  if (from == std::string::npos) return {};
  return view.erase(from, std::string(", module, parameter").size());
}

// Today's cast_rows view without version 19's float8 columns either (then
// the view's last ones); empty when the text is not as expected.
std::string cast_rows_view_before_float8() {
  std::string view = cast_rows_view_before_modules();
  const size_t from = view.find(", (((float8 >> ");
  const size_t to = view.find("\n  FROM casts");
  if (from == std::string::npos || to == std::string::npos || to < from) return {};
  return view.erase(from, to - from);
}

// What takes a store of version `version` + 1 to `version`.
std::string step_to(int version) {
  switch (version) {
    case 20:  // no batches' drops and times
      return "ALTER TABLE batches DROP COLUMN events_dropped_total; ALTER TABLE batches DROP COLUMN first_ts_ns;"
             "ALTER TABLE batches DROP COLUMN last_ts_ns;";
    case 19: {  // no casts.module, casts.parameter
      const std::string view = cast_rows_view_before_modules();
      if (view.empty()) return {};
      return "DROP VIEW cast_rows; ALTER TABLE casts DROP COLUMN module; ALTER TABLE casts DROP COLUMN parameter;" + view;
    }
    case 18: {  // no casts.float8, casts.float8_zero_amax, numerics.saturated
      const std::string view = cast_rows_view_before_float8();
      if (view.empty()) return {};
      return "DROP VIEW cast_rows; ALTER TABLE casts DROP COLUMN float8; ALTER TABLE casts DROP COLUMN float8_zero_amax;"
             "ALTER TABLE numerics DROP COLUMN saturated;" +
             view;
    }
    case 17: {  // the cast_rows view without the maker (casts.codes' bits 56-62)
      std::string view = cast_rows_view_before_float8();
      const std::string maker = ", ((codes >> 56) & 127) AS maker";
      const size_t at = view.find(maker);
      if (at == std::string::npos) return {};
      return "DROP VIEW cast_rows;" + view.erase(at, maker.size());
    }
    case 16:
      return to_version_16();
    case 15:
      return to_version_15();
    case 14:  // no numerics table
      return "DROP TABLE numerics; ALTER TABLE agents DROP COLUMN numerics;";
    case 13:  // no shipping tables
      return "DROP TABLE ship_rollups; DROP TABLE ship_state;";
    case 12:  // no aggregate mode's counter tables, no agents.aggregate
      return "DROP TABLE cast_counts; DROP TABLE op_counts; ALTER TABLE agents DROP COLUMN aggregate;";
    case 11:  // no locations.also_consumed_at, whose UNIQUE constraint did not name it
      return "ALTER TABLE locations RENAME TO locations_v12;"
             "CREATE TABLE locations(id INTEGER PRIMARY KEY, kind INTEGER NOT NULL, file TEXT NOT NULL, "
             "line INTEGER NOT NULL, function TEXT NOT NULL, stack TEXT NOT NULL, flags INTEGER NOT NULL DEFAULT 0, "
             "source TEXT NOT NULL DEFAULT '', UNIQUE(kind, file, line, function, stack, flags));"
             "INSERT INTO locations SELECT id, kind, file, line, function, stack, flags, source FROM locations_v12;"
             "DROP TABLE locations_v12;";
    case 10:  // no orphaned counts and running totals in cache_samples
      return "ALTER TABLE cache_samples DROP COLUMN orphaned_casts; ALTER TABLE cache_samples DROP COLUMN "
             "orphaned_bytes; ALTER TABLE cache_samples DROP COLUMN cache_hits; ALTER TABLE cache_samples DROP "
             "COLUMN released_casts;";
    case 9:
      return "ALTER TABLE agents DROP COLUMN castscope_version;";
    case 8:
      return "ALTER TABLE agents DROP COLUMN overlay_errors;";
    case 7:  // no ops.gemm, and the op_rows view without the gemm fields
      return "DROP VIEW op_rows; ALTER TABLE ops DROP COLUMN gemm;"
             "CREATE VIEW op_rows AS SELECT id >> 40 AS agent, id & 0xFFFFFFFFFF AS seq, ts_ns, thread, op,"
             "  codes & 63 AS policy, (codes >> 6) & 63 AS device_type, (codes >> 12) & 63 AS output_dtype,"
             "  (codes >> 18) & 63 AS outcome, (codes >> 24) & 63 AS autocast_dtype, (codes >> 30) & 63 AS mode,"
             "  (codes >> 36) & 63 AS phase, (codes >> 42) & 63 AS probe_reason, input_dtypes, cpu_duration_ns,"
             "  location, autocast_enabled, autocast_nesting FROM ops;";
    case 6:  // no timeline tiles, no locations' source text
      return "DROP TABLE timeline_tiles; ALTER TABLE locations DROP COLUMN source;";
    case 5:  // no kernels table, no agents' GPU columns
      return "DROP TABLE kernels; ALTER TABLE agents DROP COLUMN kernels; ALTER TABLE agents DROP COLUMN gpu_timing;"
             "ALTER TABLE agents DROP COLUMN gpu_records_dropped;";
    case 4:  // plus an older kernels table nothing wrote or read
      return "CREATE TABLE kernels(id INTEGER PRIMARY KEY, start_ns INTEGER, end_ns INTEGER, "
             "name INTEGER, device INTEGER, stream INTEGER, op_seq INTEGER);";
    default:
      return {};  // none known: downgrade_store refuses
  }
}

}  // namespace

Status downgrade_store(const std::string& db, int version) {
  if (version < 4 || version > kSchemaVersion)
    return Status::invalid_argument("no older store of schema " + std::to_string(version));
  sqlite3* handle = nullptr;
  if (sqlite3_open(db.c_str(), &handle) != SQLITE_OK) {
    sqlite3_close(handle);
    return Status::internal("cannot open " + db);
  }
  Status result;
  for (int to = kSchemaVersion - 1; to >= version && result.ok(); --to) {
    const std::string step = step_to(to);
    if (step.empty()) {
      result = Status::internal("no step back to schema " + std::to_string(to) + " in older_stores.cc");
      break;
    }
    const std::string sql = step + "PRAGMA user_version=" + std::to_string(to);
    if (sqlite3_exec(handle, sql.c_str(), nullptr, nullptr, nullptr) != SQLITE_OK)
      result = Status::internal("to schema " + std::to_string(to) + ": " + sqlite3_errmsg(handle));
  }
  sqlite3_close(handle);
  return result;
}

}  // namespace castscope::collector::testing
