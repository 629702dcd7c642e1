#include "server/src/store/ship_rollups.h"

#include <time.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>

#include "server/src/store/event_columns.h"
#include "server/src/store/store_schema.h"

namespace castscope::collector::ship {

namespace v1 = castscope::v1;

namespace {

constexpr int64_t kNsPerDay = kNsPerMinute * 60 * 24;

// The cast key of a rollup: every field but the cache outcome (counted apart).
constexpr int64_t kCacheFieldMask = static_cast<int64_t>(code_field("", kCastCache).mask() << code_field("", kCastCache).shift);

Status run(sqlite3* db, const std::string& sql, std::initializer_list<int64_t> values) {
  Statement statement;
  if (Status s = Statement::prepare(db, sql, statement); !s.ok()) return s;
  int i = 1;
  for (int64_t v : values) statement.bind(i++, v);
  return statement.run();
}

// Bytes count where the decision was to cast, as the local report's `bytes`
// (run_data.cc): a decision that converted nothing (already the target, not
// floating point, ...) moved no bytes.
int64_t cast_bytes(v1::CastOutcome outcome, uint64_t source_bytes) {
  return outcome == v1::CAST_OUTCOME_CAST ? static_cast<int64_t>(source_bytes) : 0;
}

}  // namespace

void RollupCounts::add(int64_t n, int64_t source_bytes, int cache_outcome) {
  count += n;
  bytes += source_bytes;
  switch (cache_outcome) {
    case v1::CACHE_OUTCOME_HIT: hits += n; break;
    case v1::CACHE_OUTCOME_MISS: misses += n; break;
    case v1::CACHE_OUTCOME_STALE_HIT: stale_hits += n; break;
    default: break;
  }
}

int64_t monotonic_to_unix_offset_ns() {
  timespec real{}, mono{};
  clock_gettime(CLOCK_REALTIME, &real);
  clock_gettime(CLOCK_MONOTONIC, &mono);
  return (int64_t{real.tv_sec} - mono.tv_sec) * 1000000000 + (real.tv_nsec - mono.tv_nsec);
}

int64_t RollupAccumulator::minute_of(uint64_t ts_ns, uint64_t received_unix_ns) const {
  int64_t unix_ns = static_cast<int64_t>(ts_ns) + clock_offset_ns_;
  if (std::llabs(unix_ns - static_cast<int64_t>(received_unix_ns)) > kNsPerDay)
    unix_ns = static_cast<int64_t>(received_unix_ns);
  return unix_ns / kNsPerMinute;
}

RollupCounts& RollupAccumulator::row(const RollupKey& key) {
  if (last_ != nullptr && key == last_key_) return *last_;  // a batch's casts often come in runs of one key
  last_key_ = key;
  last_ = &rows_[key];  // flat: a later insertion may move it, so it is taken again then
  return *last_;
}

void RollupAccumulator::add_cast(int64_t agent, int64_t minute, int64_t op, int64_t arg_name, int64_t location,
                                 const v1::CastEvent& cast) {
  if (paused_) {
    ++not_rolled_up_;
    return;
  }
  const auto codes = static_cast<int64_t>(pack_cast_key(cast)) & ~kCacheFieldMask;
  row(RollupKey{agent, minute, op, arg_name, location, codes})
      .add(1, cast_bytes(cast.outcome(), cast.bytes()), cast.cache());
}

void RollupAccumulator::add_counts(int64_t agent, int64_t minute, int64_t op, int64_t arg_name, int64_t location,
                                   const v1::CastCounts& counts) {
  if (paused_) {
    not_rolled_up_ += static_cast<int64_t>(counts.count());
    return;
  }
  const auto codes = static_cast<int64_t>(pack_cast_key(counts)) & ~kCacheFieldMask;
  row(RollupKey{agent, minute, op, arg_name, location, codes})
      .add(static_cast<int64_t>(counts.count()), cast_bytes(counts.outcome(), counts.bytes()), counts.cache());
}

Status add_not_shipped(sqlite3* db, int64_t casts) {
  if (casts == 0) return {};
  return run(db,
             "INSERT INTO ship_state(key, value) VALUES ('events_not_shipped', ?) ON CONFLICT(key) DO UPDATE "
             "SET value = CAST(value AS INTEGER) + CAST(excluded.value AS INTEGER)",
             {casts});
}

namespace {
std::string ids_key(int64_t shipment) { return "ids:" + std::to_string(shipment); }
}  // namespace

Status seal(sqlite3* db, int64_t shipment, int64_t through_minute, int64_t max_rows, int64_t& sealed) {
  // Open rows sit at the front of the table (sealed ones leave once shipped),
  // so this scan in id order stops after about max_rows rows.
  Statement statement;
  if (Status s = Statement::prepare(db,
                                    "UPDATE ship_rollups SET shipment = ? WHERE id IN (SELECT id FROM ship_rollups "
                                    "WHERE shipment = 0 AND minute <= ? ORDER BY id LIMIT ?) RETURNING id",
                                    statement);
      !s.ok())
    return s;
  statement.bind(1, shipment);
  statement.bind(2, through_minute);
  statement.bind(3, max_rows);
  int64_t first = INT64_MAX, last = -1;
  Status error;
  for (sealed = 0; statement.step(error); ++sealed) {
    const int64_t id = statement.column_int(0);
    first = std::min(first, id);
    last = std::max(last, id);
  }
  if (!error.ok() || sealed == 0) return error;
  return write_state(db, ids_key(shipment), std::to_string(first) + " " + std::to_string(last + 1));
}

Status shipment_ids(sqlite3* db, int64_t shipment, int64_t& first, int64_t& end) {
  std::string range;
  first = end = 0;
  if (Status s = read_state(db, ids_key(shipment), range); !s.ok()) return s;
  if (!range.empty() && std::sscanf(range.c_str(), "%" SCNd64 " %" SCNd64, &first, &end) != 2)
    return Status::internal("ship_state " + ids_key(shipment) + " is not an id range: " + range);
  return {};
}

Status forget(sqlite3* db, int64_t shipment) {
  int64_t first = 0, end = 0;
  if (Status s = shipment_ids(db, shipment, first, end); !s.ok()) return s;
  if (Status s = run(db, "DELETE FROM ship_rollups WHERE id >= ? AND id < ? AND shipment = ?", {first, end, shipment});
      !s.ok())
    return s;
  return write_state(db, ids_key(shipment), "");
}

Status read_state(sqlite3* db, std::string_view key, std::string& value) {
  Statement statement;
  if (Status s = Statement::prepare(db, "SELECT value FROM ship_state WHERE key = ?", statement); !s.ok()) return s;
  statement.bind_text(1, key);
  Status error;
  value = statement.step(error) ? statement.column_text(0) : std::string();
  return error;
}

Status write_state(sqlite3* db, std::string_view key, std::string_view value) {
  Statement statement;
  if (Status s = Statement::prepare(db,
                                    value.empty() ? "DELETE FROM ship_state WHERE key = ?"
                                                  : "INSERT OR REPLACE INTO ship_state(key, value) VALUES (?, ?)",
                                    statement);
      !s.ok())
    return s;
  statement.bind_text(1, key);
  if (!value.empty()) statement.bind_text(2, value);
  return statement.run();
}

Status read_states(sqlite3* db, std::string_view prefix, std::map<std::string, std::string>& out) {
  Statement statement;
  // substr: keys are compared as text, with no LIKE wildcards to escape.
  if (Status s = Statement::prepare(db, "SELECT key, value FROM ship_state WHERE substr(key, 1, ?) = ?", statement);
      !s.ok())
    return s;
  statement.bind(1, static_cast<int64_t>(prefix.size()));
  statement.bind_text(2, prefix);
  Status error;
  while (statement.step(error)) out[statement.column_text(0).substr(prefix.size())] = statement.column_text(1);
  return error;
}

Status read_backlog(sqlite3* db, Backlog& out) {
  Statement statement;
  if (Status s = Statement::prepare(
          db, "SELECT count(*), coalesce(min(minute), 0), coalesce(min(nullif(shipment, 0)), 0) FROM ship_rollups",
          statement);
      !s.ok())
    return s;
  Status error;
  if (statement.step(error)) {
    out.rows = statement.column_int(0);
    out.oldest_minute = statement.column_int(1);
    out.first_sealed_shipment = statement.column_int(2);
  }
  return error;
}

}  // namespace castscope::collector::ship
