// Writes validated batches into the store. One thread only (the collector's
// writer): batches are grouped into transactions by the caller (begin, any
// number of store_batch, commit). Strings, locations, runs and agents are
// cached in memory (bounded by how many distinct ones exist, not by run
// length) so that event rows are written with integers only.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "castscope/v1/events.names.h"
#include "castscope/v1/transport.pb.h"
#include "server/src/batch/batch_validation.h"
#include "server/src/status.h"
#include "server/src/store/event_rows.h"
#include "server/src/store/event_segments.h"
#include "server/src/store/multi_row_insert.h"
#include "server/src/store/sqlite_store.h"
#include "server/src/store/store_schema.h"
#include "server/src/store/ship_rollups.h"
#include "server/src/store/timeline_tiles.h"

namespace castscope::collector {

// One row of the findings table: the analyzers' output for a run.
struct StoredFinding {
  std::string kind, severity, summary;
  std::string details_json;  // the whole finding, as in the report
};

class StoreWriter {
 public:
  static Status open(const std::string& path, std::unique_ptr<StoreWriter>& out);

  Status begin();
  // Within a transaction. `duplicate`: this (run, agent, sequence) was
  // stored before; nothing is written.
  Status store_batch(const castscope::v1::Batch& batch, uint64_t received_unix_ns, bool& duplicate);
  Status commit();
  // Within a transaction: the findings of `run_id` become `findings` (a run
  // not stored keeps none).
  Status replace_findings(const std::string& run_id, const std::vector<StoredFinding>& findings);
  // Undoes the transaction and forgets the caches (they may hold its ids).
  void rollback();

  // Fleet shipping (ship_rollups.h): from now on, every commit also adds its
  // casts to the per-minute rollups. Before the first batch.
  void enable_rollups() { rollups_.enable(ship::monotonic_to_unix_offset_ns()); }
  // Within a transaction (writer tasks of the shipper): see ship::seal,
  // ship::forget, ship::write_state.
  Status seal_shipment(int64_t shipment, int64_t through_minute, int64_t max_rows, int64_t& sealed);
  // Past the backlog's bound: see ship::RollupAccumulator::set_paused.
  void pause_rollups(bool paused) { rollups_.set_paused(paused); }
  Status forget_shipment(int64_t shipment);
  Status write_ship_state(std::string_view key, std::string_view value);

  const std::string& path() const { return db_.path(); }
  // Any thread: see WalCheckpointer::behind.
  bool checkpoint_behind() const { return checkpointer_.behind(); }

 private:
  struct AgentRow {
    int64_t id = 0;
    int64_t batches = 0, casts = 0, ops = 0, cache_samples = 0, kernels = 0, numerics = 0;
    int64_t first_sequence = 0, last_sequence = 0;
    int64_t events_recorded_total = 0, events_dropped_total = 0, internal_errors = 0;
    bool finished = false;
    std::string gpu_timing;
    int64_t gpu_records_dropped = 0;
    std::string overlay_errors = "[]";  // JSON array: the longest AgentStats.overlay_errors seen
    size_t overlay_error_count = 0;
    bool dirty = false;
  };
  struct RunRow {
    int64_t id = 0;
    uint64_t last_seen_unix_ns = 0;
    bool dirty = false;
  };

  Status prepare_statements();
  Status find_or_create_run(const std::string& run_id, uint64_t now_unix_ns, RunRow*& out);
  Status find_or_create_agent(const castscope::v1::Batch& batch, uint64_t now_unix_ns, AgentRow*& out);
  Status intern_string(const std::string& text, int64_t& id);
  Status intern_location(const castscope::v1::SourceLocation& location, int64_t& id);
  Status insert_events(const castscope::v1::Batch& batch, AgentRow& agent, uint64_t received_unix_ns);
  // insert_events' steps: the batch's strings and locations interned; its
  // events sorted into rows by kind; the rows inserted (event_rows.h binds them).
  Status intern_batch_names(const castscope::v1::Batch& batch);
  void collect_pending_rows(const castscope::v1::Batch& batch, AgentRow& agent);
  template <typename Member>
  PendingRow pending_row(const castscope::v1::Event& event, const Member& member, int64_t agent) const;
  void take_stats(const castscope::v1::AgentStats& stats, AgentRow& agent);
  Status insert_pending_rows(AgentRow& agent);
  void add_rollups(int64_t agent, uint64_t received_unix_ns);
  Status append_rollups();  // at commit: this transaction's rollups, appended
  // One table's rows of a batch, bound by bind_row(statement, first parameter,
  // index into `pending`); `stored` grows by the rows written. Where SQLite
  // picks the rowids (event_segments.h), the rows go in id order, without the
  // ids stored before, and their segment with them.
  template <typename BindRow>
  Status insert_rows(const schema::Table& table, MultiRowInsert& insert, std::vector<PendingRow>& pending,
                     BindRow&& bind_row, int64_t& stored);

  Database db_;
  WalCheckpointer checkpointer_;  // declared after db_: stops before the writer connection closes
  Statement begin_, commit_, rollback_;
  Statement insert_batch_, find_run_, insert_run_, update_run_, find_agent_, insert_agent_, update_agent_;
  Statement find_string_, insert_string_, find_location_, insert_location_;
  MultiRowInsert casts_, ops_, cache_samples_, kernels_, cast_counts_, op_counts_, ship_rollups_, numerics_;
  segments::SegmentWriter segments_;
  std::vector<const schema::Table*> id_is_rowid_;  // event tables made before version 17
  std::vector<int64_t> stored_ids_;                // reused: ids a batch repeats

  std::unordered_map<std::string, int64_t> string_ids_;
  std::unordered_map<std::string, int64_t> location_ids_;  // key: location_key()
  std::unordered_map<std::string, RunRow> runs_;
  std::unordered_map<std::string, AgentRow> agents_;  // key: run_id '\x1f' agent_id
  std::vector<AgentRow*> dirty_agents_;
  std::vector<RunRow*> dirty_runs_;
  // Reused per batch: rows of each kind, global ids of the batch's strings/locations.
  std::array<std::vector<PendingRow>, castscope::v1::names::kEventKindCaseEnd> pending_;  // by Event.kind_case()
  std::vector<int64_t> batch_string_ids_, batch_location_ids_;
  LocalIdIndex batch_string_index_, batch_location_index_;  // the batch's local ids -> indexes into those
  tiles::TileAccumulator tiles_;  // this transaction's events, written at commit
  ship::RollupAccumulator rollups_;  // the same, when shipping
  std::vector<std::pair<ship::RollupKey, ship::RollupCounts>> rollup_rows_;  // reused at each commit
};

}  // namespace castscope::collector
