// The local half of fleet shipping (docs/fleet.md): per-minute rollups of
// cast decisions kept in the store until PostgreSQL has them.
//
// Who writes and who reads. The writer thread adds every stored cast and
// cast counter to a RollupAccumulator and appends its rows at commit
// (StoreWriter), in the transaction that stores the events (so a rollup
// never misses or doubles an event, whatever is killed when). The shipper thread asks the writer (a
// writer task) to seal the open rows into a numbered shipment, reads the
// sealed rows from its own connection, sends them, and once PostgreSQL has
// committed them asks the writer to forget the shipment. Sealing and
// forgetting run on the writer thread, between commits, so no upsert can
// touch a row while it is sealed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <utility>

#include <absl/container/flat_hash_map.h>

#include "castscope/v1/events.pb.h"
#include "server/src/status.h"
#include "server/src/store/sqlite_store.h"

namespace castscope::collector::ship {

inline constexpr int64_t kNsPerMinute = int64_t{60} * 1000 * 1000 * 1000;

// What a key-minute counts. count: decisions (or counter counts); bytes: the
// source bytes of those whose outcome is a cast (0 for already_target,
// not_floating, ...: the local report's `bytes`); hits, misses, stale_hits:
// the cast cache's outcomes.
struct RollupCounts {
  int64_t count = 0, bytes = 0, hits = 0, misses = 0, stale_hits = 0;
  void add(int64_t n, int64_t source_bytes, int cache_outcome);
};

struct RollupKey {
  int64_t agent, minute, op, arg_name, location, codes;
  bool operator==(const RollupKey&) const = default;
  template <typename H>
  friend H AbslHashValue(H h, const RollupKey& k) {
    return H::combine(std::move(h), k.agent, k.minute, k.op, k.arg_name, k.location, k.codes);
  }
};

// This transaction's rollups. Writer thread only. Timestamps are the agents'
// CLOCK_MONOTONIC; a node collector shares that clock with its agents, so
// `clock_offset_ns` (CLOCK_REALTIME - CLOCK_MONOTONIC, read at open) makes
// them wall time. A batch whose times land more than a day from when it was
// received (an agent on another host) is put at its receipt time instead.
class RollupAccumulator {
 public:
  void enable(int64_t clock_offset_ns) {
    enabled_ = true;
    clock_offset_ns_ = clock_offset_ns;
  }
  bool enabled() const { return enabled_; }
  // Past the backlog's bound (the shipper says so, through a writer task):
  // events are counted, not rolled up; the writer adds the count to ship_state's
  // events_not_shipped, so the loss is shown.
  void set_paused(bool paused) { paused_ = paused; }
  // The minute of an event of a batch received at `received_unix_ns`.
  int64_t minute_of(uint64_t ts_ns, uint64_t received_unix_ns) const;
  // ids: the store's string and location ids of the event.
  void add_cast(int64_t agent, int64_t minute, int64_t op, int64_t arg_name, int64_t location,
                const castscope::v1::CastEvent& cast);
  void add_counts(int64_t agent, int64_t minute, int64_t op, int64_t arg_name, int64_t location,
                  const castscope::v1::CastCounts& counts);
  void clear() {
    rows_.clear();
    last_ = nullptr;
    not_rolled_up_ = 0;
  }
  // This transaction's rows, for the writer to append.
  template <typename Row>
  void for_each(Row&& row) const {
    for (const auto& [key, counts] : rows_) row(key, counts);
  }
  size_t size() const { return rows_.size(); }
  // Casts left out while paused, this transaction.
  int64_t not_rolled_up() const { return not_rolled_up_; }

 private:
  bool enabled_ = false;
  bool paused_ = false;
  int64_t not_rolled_up_ = 0;  // this transaction's, while paused
  int64_t clock_offset_ns_ = 0;
  RollupCounts& row(const RollupKey& key);

  // A lookup per stored cast (Abseil's open-addressing map).
  absl::flat_hash_map<RollupKey, RollupCounts> rows_;
  RollupKey last_key_{};
  RollupCounts* last_ = nullptr;  // valid until the next insertion
};

// CLOCK_REALTIME - CLOCK_MONOTONIC now.
int64_t monotonic_to_unix_offset_ns();

// Writer thread, in the commit's transaction: adds what a paused
// accumulator left out to ship_state's events_not_shipped.
Status add_not_shipped(sqlite3* db, int64_t casts);
// Writer thread: gives the open rows of minutes up to `through_minute`, the
// first stored first and at most `max_rows` of them, the number `shipment`,
// and keeps their id range in ship_state; `sealed`: how many.
Status seal(sqlite3* db, int64_t shipment, int64_t through_minute, int64_t max_rows, int64_t& sealed);
// The id range [first, end) holding the rows of `shipment` (empty: none):
// a shipment's reader scans that range, not the whole table.
Status shipment_ids(sqlite3* db, int64_t shipment, int64_t& first, int64_t& end);
// Writer thread: removes the rows of `shipment` (PostgreSQL has them).
Status forget(sqlite3* db, int64_t shipment);

// The shipper's state: a key and its text (empty when unset). Setting runs
// on the writer thread; setting '' removes the key.
Status read_state(sqlite3* db, std::string_view key, std::string& value);
Status write_state(sqlite3* db, std::string_view key, std::string_view value);
// Every key starting with `prefix` (without it) and its text.
Status read_states(sqlite3* db, std::string_view prefix, std::map<std::string, std::string>& out);

// The backlog: rows waiting (open or sealed), the oldest minute among them
// (0: none) and the lowest sealed shipment (0: none).
struct Backlog {
  int64_t rows = 0, oldest_minute = 0, first_sealed_shipment = 0;
};
Status read_backlog(sqlite3* db, Backlog& out);
// How far shipping is behind at `now_unix_s`: the age of the oldest waiting
// row's minute (0 when none waits).
inline int64_t lag_seconds(const Backlog& backlog, int64_t now_unix_s) {
  return backlog.rows == 0 ? 0 : std::max<int64_t>(0, now_unix_s - backlog.oldest_minute * 60);
}

}  // namespace castscope::collector::ship
