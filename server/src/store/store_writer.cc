#include "server/src/store/store_writer.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "common/log/logger.h"
#include "common/log/rate_limited.h"
#include "server/src/batch/batch_validation.h"
#include "server/src/store/event_columns.h"
#include "server/src/store/row_codec.h"

namespace castscope::collector {

namespace v1 = castscope::v1;

// Validated seqs fit the row id's seq bits (row_id.h).
static_assert(kMaxEventSeq == kMaxRowSeq);

namespace {

// The first and last time of the batch's timeline events (casts, ops,
// kernels); 0, 0 when it has none. Where the timeline marks the batch's drops.
std::pair<int64_t, int64_t> event_time_span(const v1::Batch& batch) {
  uint64_t first = UINT64_MAX, last = 0;
  for (const v1::Event& event : batch.events()) {
    uint64_t ts = 0;
    switch (event.kind_case()) {
      case v1::Event::kCast: ts = event.cast().ts_ns(); break;
      case v1::Event::kOp: ts = event.op().ts_ns(); break;
      case v1::Event::kKernel: ts = event.kernel().ts_ns(); break;
      default: continue;
    }
    first = std::min(first, ts);
    last = std::max(last, ts);
  }
  if (first > last) return {0, 0};
  return {static_cast<int64_t>(first), static_cast<int64_t>(last)};
}

// Stacks (and a shared cast's other consumer lines) are stored as a JSON
// array of strings; empty when the agent sent none.
std::string lines_text(const google::protobuf::RepeatedPtrField<std::string>& lines) {
  if (lines.empty()) return {};
  return nlohmann::json(std::vector<std::string>(lines.begin(), lines.end())).dump();
}

// locations.flags
int64_t location_flags(const v1::SourceLocation& location) { return location.inside_disabled_autocast() ? 1 : 0; }

std::string location_key(const v1::SourceLocation& location, const std::string& stack, const std::string& also) {
  std::string key = std::to_string(location.kind()) + '\x1f' + location.file() + '\x1f' +
                    std::to_string(location.line()) + '\x1f' + location.function() + '\x1f' + stack + '\x1f' +
                    std::to_string(location_flags(location)) + '\x1f' + also;
  return key;
}

// Batch-local id → global id, through the batch's index (0 stays 0: none).
int64_t global_id(uint32_t local, const LocalIdIndex& index, const std::vector<int64_t>& globals) {
  if (local == 0) return 0;
  const int32_t position = index.find(local);
  return position == LocalIdIndex::kAbsent ? 0 : globals[static_cast<size_t>(position)];
}

// Column lists of the writer's statements (store_schema.h): binds and reads
// below take their ordinals from these.
constexpr auto kBatchRow = schema::all_columns<schema::kBatches>();
constexpr auto kRollupRow =
    schema::columns(schema::kShipRollups, {"shipment", "agent", "minute", "op", "arg_name", "location", "codes", "count",
                                           "bytes", "hits", "misses", "stale_hits"});
constexpr auto kRunId = schema::columns(schema::kRuns, {"id"});
constexpr auto kRunState = schema::columns(schema::kRuns, {"id", "last_seen_unix_ns"});
constexpr auto kRunInsert = schema::columns(schema::kRuns, {"run_id", "first_seen_unix_ns", "last_seen_unix_ns"});
constexpr auto kRunUpdate = schema::columns(schema::kRuns, {"last_seen_unix_ns"});
constexpr auto kAgentIdentity =
    schema::columns(schema::kAgents, {"run", "agent_id", "pid", "rank", "local_rank", "world_size", "hostname",
                                      "torch_version", "command", "policy_hash", "policy_files", "castscope_version",
                                      "aggregate"});
constexpr auto kAgentCounters = schema::columns(
    schema::kAgents, {"batches", "casts", "ops", "cache_samples", "kernels", "numerics", "first_sequence", "last_sequence",
                      "events_recorded_total", "events_dropped_total", "internal_errors", "finished", "gpu_timing",
                      "gpu_records_dropped", "overlay_errors"});
constexpr auto kAgentState = schema::columns(
    schema::kAgents, {"id", "batches", "casts", "ops", "cache_samples", "kernels", "numerics", "first_sequence",
                      "last_sequence",
                      "events_recorded_total", "events_dropped_total", "internal_errors", "finished", "gpu_timing",
                      "gpu_records_dropped", "overlay_errors"});
constexpr auto kStringLookup = schema::columns(schema::kStrings, {"id"});
constexpr auto kStringInsert = schema::columns(schema::kStrings, {"text"});
constexpr auto kLocationId = schema::columns(schema::kLocations, {"id"});
// What makes a location distinct (its UNIQUE constraint): lookup and insert bind the same.
constexpr auto kLocationKey =
    schema::columns(schema::kLocations, {"kind", "file", "line", "function", "stack", "flags", "also_consumed_at"});
// A new location row: its key and the text of its line.
constexpr auto kLocationInsert = schema::columns(
    schema::kLocations, {"kind", "file", "line", "function", "stack", "flags", "also_consumed_at", "source"});
constexpr auto kFindingInsert =
    schema::columns(schema::kFindings, {"run", "kind", "severity", "summary", "details_json"});

// "UPDATE t SET a = ?, b = ? WHERE id = ?": the id is the last parameter.
template <size_t N>
std::string update_by_id_sql(const schema::Columns<N>& set) {
  return "UPDATE " + std::string(set.table->name) + " SET " + set.assign_sql() + " WHERE id = ?";
}

}  // namespace

Status StoreWriter::open(const std::string& path, std::unique_ptr<StoreWriter>& out) {
  auto writer = std::unique_ptr<StoreWriter>(new StoreWriter());
  if (Status s = writer->db_.open(path, Database::Mode::kReadWrite); !s.ok()) return s;
  if (Status s = writer->prepare_statements(); !s.ok()) return s;
  if (Status s = writer->checkpointer_.start(writer->db_.handle(), path, WalCheckpointer::Options()); !s.ok())
    return s;
  out = std::move(writer);
  return {};
}

Status StoreWriter::prepare_statements() {
  sqlite3* db = db_.handle();
  const std::pair<Statement*, std::string> statements[] = {
      {&begin_, "BEGIN"},
      {&commit_, "COMMIT"},
      {&rollback_, "ROLLBACK"},
      {&insert_batch_, kBatchRow.insert_sql(1, /*or_ignore=*/true)},
      {&find_run_, kRunState.select_sql() + " WHERE run_id = ?"},
      {&insert_run_, kRunInsert.insert_sql()},
      {&update_run_, update_by_id_sql(kRunUpdate)},
      {&find_agent_, kAgentState.select_sql() + " WHERE run = ? AND agent_id = ?"},
      {&insert_agent_, kAgentIdentity.insert_sql()},
      {&update_agent_, update_by_id_sql(kAgentCounters)},
      {&find_string_, kStringLookup.select_sql() + " WHERE text = ?"},
      {&insert_string_, kStringInsert.insert_sql()},
      {&find_location_, kLocationId.select_sql() + " WHERE " + kLocationKey.match_sql()},
      {&insert_location_, kLocationInsert.insert_sql()},
  };
  for (const auto& [statement, sql] : statements)
    if (Status s = Statement::prepare(db, sql, *statement); !s.ok()) return db_.error(s.message());
  if (Status s = casts_.prepare(db, event_rows::kCast); !s.ok()) return s;
  if (Status s = ship_rollups_.prepare(db, kRollupRow); !s.ok()) return s;
  if (Status s = ops_.prepare(db, event_rows::kOp); !s.ok()) return s;
  if (Status s = cache_samples_.prepare(db, event_rows::kCacheSample); !s.ok()) return s;
  if (Status s = cast_counts_.prepare(db, event_rows::kCastCounts); !s.ok()) return s;
  if (Status s = numerics_.prepare(db, event_rows::kNumerics); !s.ok()) return s;
  if (Status s = segments_.prepare(db); !s.ok()) return db_.error(s.message());
  for (const schema::Table* table : schema::kTables) {
    bool rowid = false;
    if (Status s = segments::id_is_rowid(db, *table, rowid); !s.ok()) return db_.error(s.message());
    if (rowid && table->segmented) id_is_rowid_.push_back(table);
  }
  if (Status s = op_counts_.prepare(db, event_rows::kOpCounts); !s.ok()) return s;
  return kernels_.prepare(db, event_rows::kKernel);
}

Status StoreWriter::begin() {
  checkpointer_.before_begin();
  return begin_.run();
}

Status StoreWriter::replace_findings(const std::string& run_id, const std::vector<StoredFinding>& findings) {
  Statement find, clear, insert;
  if (Status s = Statement::prepare(db_.handle(), kRunId.select_sql() + " WHERE run_id = ?", find); !s.ok()) return s;
  find.bind_text(1, run_id);
  Status error;
  if (!find.step(error)) return error;
  const int64_t run = find.column_int(kRunId["id"]);
  if (Status s = Statement::prepare(db_.handle(), "DELETE FROM " + std::string(schema::kFindings.name) + " WHERE run = ?",
                                    clear);
      !s.ok())
    return s;
  clear.bind(1, run);
  if (Status s = clear.run(); !s.ok()) return s;
  if (Status s = Statement::prepare(db_.handle(), kFindingInsert.insert_sql(), insert); !s.ok()) return s;
  for (const StoredFinding& f : findings) {
    insert.bind(kFindingInsert.param("run"), run);
    insert.bind_text(kFindingInsert.param("kind"), f.kind);
    insert.bind_text(kFindingInsert.param("severity"), f.severity);
    insert.bind_text(kFindingInsert.param("summary"), f.summary);
    insert.bind_text(kFindingInsert.param("details_json"), f.details_json);
    if (Status s = insert.run(); !s.ok()) return s;
  }
  return Status();
}

Status StoreWriter::commit() {
  for (AgentRow* agent : dirty_agents_) {
    Statement& u = update_agent_;
    u.bind(kAgentCounters.param("batches"), agent->batches);
    u.bind(kAgentCounters.param("casts"), agent->casts);
    u.bind(kAgentCounters.param("ops"), agent->ops);
    u.bind(kAgentCounters.param("cache_samples"), agent->cache_samples);
    u.bind(kAgentCounters.param("kernels"), agent->kernels);
    u.bind(kAgentCounters.param("numerics"), agent->numerics);
    u.bind_text(kAgentCounters.param("gpu_timing"), agent->gpu_timing);
    u.bind(kAgentCounters.param("gpu_records_dropped"), agent->gpu_records_dropped);
    u.bind_text(kAgentCounters.param("overlay_errors"), agent->overlay_errors);
    u.bind(kAgentCounters.param("first_sequence"), agent->first_sequence);
    u.bind(kAgentCounters.param("last_sequence"), agent->last_sequence);
    u.bind(kAgentCounters.param("events_recorded_total"), agent->events_recorded_total);
    u.bind(kAgentCounters.param("events_dropped_total"), agent->events_dropped_total);
    u.bind(kAgentCounters.param("internal_errors"), agent->internal_errors);
    u.bind(kAgentCounters.param("finished"), agent->finished ? 1 : 0);
    u.bind(kAgentCounters.size() + 1, agent->id);
    if (Status s = u.run(); !s.ok()) return db_.error(s.message());
    agent->dirty = false;
  }
  dirty_agents_.clear();
  for (RunRow* run : dirty_runs_) {
    update_run_.bind(kRunUpdate.param("last_seen_unix_ns"), static_cast<int64_t>(run->last_seen_unix_ns));
    update_run_.bind(kRunUpdate.size() + 1, run->id);
    if (Status s = update_run_.run(); !s.ok()) return db_.error(s.message());
    run->dirty = false;
  }
  dirty_runs_.clear();
  if (Status s = tiles_.flush(db_.handle()); !s.ok()) return db_.error(s.message());
  if (Status s = append_rollups(); !s.ok()) return s;
  if (Status s = commit_.run(); !s.ok()) return db_.error(s.message());
  checkpointer_.after_commit();
  return {};
}

void StoreWriter::rollback() {
  if (!sqlite3_get_autocommit(db_.handle()) && !rollback_.run().ok())
    log::logger("collector").error("{}: rollback failed: {}", db_.path(), sqlite3_errmsg(db_.handle()));
  string_ids_.clear();
  location_ids_.clear();
  runs_.clear();
  agents_.clear();
  dirty_agents_.clear();
  dirty_runs_.clear();
  tiles_.clear();
  rollups_.clear();
}

Status StoreWriter::find_or_create_run(const std::string& run_id, uint64_t now_unix_ns, RunRow*& out) {
  auto [it, inserted] = runs_.try_emplace(run_id);
  RunRow& run = it->second;
  if (inserted) {
    find_run_.bind_text(1, run_id);
    Status error;
    if (find_run_.step(error)) {
      run.id = find_run_.column_int(kRunState["id"]);
      run.last_seen_unix_ns = static_cast<uint64_t>(find_run_.column_int(kRunState["last_seen_unix_ns"]));
    }
    find_run_.reset();
    if (error.ok() && run.id == 0) {
      insert_run_.bind_text(kRunInsert.param("run_id"), run_id);
      insert_run_.bind(kRunInsert.param("first_seen_unix_ns"), static_cast<int64_t>(now_unix_ns));
      insert_run_.bind(kRunInsert.param("last_seen_unix_ns"), static_cast<int64_t>(now_unix_ns));
      error = insert_run_.run();
      run.id = sqlite3_last_insert_rowid(db_.handle());
    }
    if (!error.ok()) {
      runs_.erase(it);
      return db_.error(error.message());
    }
  }
  if (now_unix_ns > run.last_seen_unix_ns) {
    run.last_seen_unix_ns = now_unix_ns;
    if (!run.dirty) dirty_runs_.push_back(&run);
    run.dirty = true;
  }
  out = &run;
  return {};
}

Status StoreWriter::find_or_create_agent(const v1::Batch& batch, uint64_t now_unix_ns, AgentRow*& out) {
  const v1::AgentIdentity& identity = batch.agent();
  RunRow* run = nullptr;
  if (Status s = find_or_create_run(identity.run_id(), now_unix_ns, run); !s.ok()) return s;
  auto [it, inserted] = agents_.try_emplace(identity.run_id() + '\x1f' + identity.agent_id());
  AgentRow& agent = it->second;
  if (inserted) {
    find_agent_.bind(1, run->id);
    find_agent_.bind_text(2, identity.agent_id());
    Status error;
    if (find_agent_.step(error)) {
      const Statement& f = find_agent_;
      agent.id = f.column_int(kAgentState["id"]);
      agent.batches = f.column_int(kAgentState["batches"]);
      agent.casts = f.column_int(kAgentState["casts"]);
      agent.ops = f.column_int(kAgentState["ops"]);
      agent.cache_samples = f.column_int(kAgentState["cache_samples"]);
      agent.kernels = f.column_int(kAgentState["kernels"]);
      agent.numerics = f.column_int(kAgentState["numerics"]);
      agent.gpu_timing = f.column_text(kAgentState["gpu_timing"]);
      agent.gpu_records_dropped = f.column_int(kAgentState["gpu_records_dropped"]);
      agent.overlay_errors = f.column_text(kAgentState["overlay_errors"]);
      agent.overlay_error_count = nlohmann::json::parse(agent.overlay_errors, nullptr, false).size();
      agent.first_sequence = f.column_int(kAgentState["first_sequence"]);
      agent.last_sequence = f.column_int(kAgentState["last_sequence"]);
      agent.events_recorded_total = f.column_int(kAgentState["events_recorded_total"]);
      agent.events_dropped_total = f.column_int(kAgentState["events_dropped_total"]);
      agent.internal_errors = f.column_int(kAgentState["internal_errors"]);
      agent.finished = f.column_int(kAgentState["finished"]) != 0;
    }
    find_agent_.reset();
    if (error.ok() && agent.id == 0) {
      Statement& a = insert_agent_;
      a.bind(kAgentIdentity.param("run"), run->id);
      a.bind_text(kAgentIdentity.param("agent_id"), identity.agent_id());
      a.bind(kAgentIdentity.param("pid"), identity.pid());
      a.bind(kAgentIdentity.param("rank"), identity.rank());
      a.bind(kAgentIdentity.param("local_rank"), identity.local_rank());
      a.bind(kAgentIdentity.param("world_size"), identity.world_size());
      a.bind_text(kAgentIdentity.param("hostname"), identity.hostname());
      a.bind_text(kAgentIdentity.param("torch_version"), identity.torch_version());
      a.bind_text(kAgentIdentity.param("command"), identity.command());
      a.bind_text(kAgentIdentity.param("policy_hash"), identity.policy_hash());
      const std::string policy_files = nlohmann::json(identity.policy_files()).dump();  // bound, not copied
      a.bind_text(kAgentIdentity.param("policy_files"), policy_files);
      a.bind_text(kAgentIdentity.param("castscope_version"), identity.castscope_version());
      a.bind(kAgentIdentity.param("aggregate"), identity.aggregate() ? 1 : 0);
      error = insert_agent_.run();
      agent.id = sqlite3_last_insert_rowid(db_.handle());
    }
    if (!error.ok()) {
      agents_.erase(it);
      return db_.error(error.message());
    }
  }
  out = &agent;
  return {};
}

Status StoreWriter::intern_string(const std::string& text, int64_t& id) {
  if (auto it = string_ids_.find(text); it != string_ids_.end()) {
    id = it->second;
    return {};
  }
  find_string_.bind_text(1, text);
  Status error;
  id = find_string_.step(error) ? find_string_.column_int(kStringLookup["id"]) : 0;
  find_string_.reset();
  if (error.ok() && id == 0) {
    insert_string_.bind_text(kStringInsert.param("text"), text);
    error = insert_string_.run();
    id = sqlite3_last_insert_rowid(db_.handle());
  }
  if (!error.ok()) return db_.error(error.message());
  string_ids_.emplace(text, id);
  return {};
}

Status StoreWriter::intern_location(const v1::SourceLocation& location, int64_t& id) {
  const std::string stack = lines_text(location.stack());
  const std::string also = lines_text(location.also_consumed_at());
  std::string key = location_key(location, stack, also);
  if (auto it = location_ids_.find(key); it != location_ids_.end()) {
    id = it->second;
    return {};
  }
  // The lookup binds the key; the insert the key (same ordinals) and the source text.
  static_assert(kLocationInsert.param("also_consumed_at") == kLocationKey.param("also_consumed_at"));
  Statement* statements[] = {&find_location_, &insert_location_};
  for (Statement* statement : statements) {
    statement->bind(kLocationKey.param("kind"), location.kind());
    statement->bind_text(kLocationKey.param("file"), location.file());
    statement->bind(kLocationKey.param("line"), location.line());
    statement->bind_text(kLocationKey.param("function"), location.function());
    statement->bind_text(kLocationKey.param("stack"), stack);
    statement->bind(kLocationKey.param("flags"), location_flags(location));
    statement->bind_text(kLocationKey.param("also_consumed_at"), also);
  }
  insert_location_.bind_text(kLocationInsert.param("source"), location.source_text());
  Status error;
  id = find_location_.step(error) ? find_location_.column_int(kLocationId["id"]) : 0;
  find_location_.reset();
  if (error.ok() && id == 0) {
    error = insert_location_.run();
    id = sqlite3_last_insert_rowid(db_.handle());
  }
  insert_location_.reset();
  if (!error.ok()) return db_.error(error.message());
  location_ids_.emplace(std::move(key), id);
  return {};
}

Status StoreWriter::store_batch(const v1::Batch& batch, uint64_t received_unix_ns, bool& duplicate) {
  AgentRow* agent = nullptr;
  if (Status s = find_or_create_agent(batch, received_unix_ns, agent); !s.ok()) return s;

  // The batches primary key is the dedup: a replayed batch inserts nothing.
  insert_batch_.bind(kBatchRow.param("agent"), agent->id);
  insert_batch_.bind(kBatchRow.param("sequence"), static_cast<int64_t>(batch.sequence()));
  insert_batch_.bind(kBatchRow.param("received_unix_ns"), static_cast<int64_t>(received_unix_ns));
  insert_batch_.bind(kBatchRow.param("n_events"), batch.events_size());
  insert_batch_.bind(kBatchRow.param("events_dropped_total"), static_cast<int64_t>(batch.events_dropped_total()));
  const auto [first_ts, last_ts] = event_time_span(batch);
  insert_batch_.bind(kBatchRow.param("first_ts_ns"), first_ts);
  insert_batch_.bind(kBatchRow.param("last_ts_ns"), last_ts);
  if (Status s = insert_batch_.run(); !s.ok()) return db_.error(s.message());
  duplicate = sqlite3_changes(db_.handle()) == 0;
  if (duplicate) return {};

  if (Status s = insert_events(batch, *agent, received_unix_ns); !s.ok()) return s;

  const auto sequence = static_cast<int64_t>(batch.sequence());
  if (agent->batches == 0 || sequence < agent->first_sequence) agent->first_sequence = sequence;
  if (sequence >= agent->last_sequence) {  // counters are cumulative: the latest batch has the truth
    agent->last_sequence = sequence;
    agent->events_recorded_total = static_cast<int64_t>(batch.events_recorded_total());
    agent->events_dropped_total = static_cast<int64_t>(batch.events_dropped_total());
  }
  ++agent->batches;
  agent->finished = agent->finished || batch.final();
  if (!agent->dirty) dirty_agents_.push_back(agent);
  agent->dirty = true;
  return {};
}

Status StoreWriter::append_rollups() {
  if (Status s = ship::add_not_shipped(db_.handle(), rollups_.not_rolled_up()); !s.ok()) return db_.error(s.message());
  rollup_rows_.clear();
  rollups_.for_each([this](const ship::RollupKey& key, const ship::RollupCounts& counts) {
    rollup_rows_.emplace_back(key, counts);
  });
  rollups_.clear();
  int64_t inserted = 0;
  return ship_rollups_.insert(
      rollup_rows_.size(),
      [this](Statement& s, int p, size_t row) {
        const auto& [key, counts] = rollup_rows_[row];
        s.bind(p + kRollupRow["shipment"], 0);
        s.bind(p + kRollupRow["agent"], key.agent);
        s.bind(p + kRollupRow["minute"], key.minute);
        s.bind(p + kRollupRow["op"], key.op);
        s.bind(p + kRollupRow["arg_name"], key.arg_name);
        s.bind(p + kRollupRow["location"], key.location);
        s.bind(p + kRollupRow["codes"], key.codes);
        s.bind(p + kRollupRow["count"], counts.count);
        s.bind(p + kRollupRow["bytes"], counts.bytes);
        s.bind(p + kRollupRow["hits"], counts.hits);
        s.bind(p + kRollupRow["misses"], counts.misses);
        s.bind(p + kRollupRow["stale_hits"], counts.stale_hits);
      },
      inserted);
}

void StoreWriter::add_rollups(int64_t agent, uint64_t received_unix_ns) {
  for (const PendingRow& row : pending_[v1::Event::kCast]) {
    const v1::CastEvent& cast = row.event->cast();
    rollups_.add_cast(agent, rollups_.minute_of(cast.ts_ns(), received_unix_ns), row.op, row.arg_name, row.location,
                      cast);
  }
  for (const PendingRow& row : pending_[v1::Event::kCastCounts]) {
    const v1::CastCounts& counts = row.event->cast_counts();
    rollups_.add_counts(agent, rollups_.minute_of(counts.last_ts_ns(), received_unix_ns), row.op, row.arg_name,
                        row.location, counts);
  }
}

Status StoreWriter::seal_shipment(int64_t shipment, int64_t through_minute, int64_t max_rows, int64_t& sealed) {
  if (Status s = ship::seal(db_.handle(), shipment, through_minute, max_rows, sealed); !s.ok())
    return db_.error(s.message());
  return {};
}

Status StoreWriter::forget_shipment(int64_t shipment) {
  if (Status s = ship::forget(db_.handle(), shipment); !s.ok()) return db_.error(s.message());
  return {};
}

Status StoreWriter::write_ship_state(std::string_view key, std::string_view value) {
  if (Status s = ship::write_state(db_.handle(), key, value); !s.ok()) return db_.error(s.message());
  return {};
}

template <typename BindRow>
Status StoreWriter::insert_rows(const schema::Table& table, MultiRowInsert& insert, std::vector<PendingRow>& pending,
                                BindRow&& bind_row, int64_t& stored) {
  if (std::find(id_is_rowid_.begin(), id_is_rowid_.end(), &table) != id_is_rowid_.end())
    return insert.insert(pending.size(), bind_row, stored);  // INSERT OR IGNORE keeps a repeated id's first row
  if (pending.empty()) return {};
  auto by_id = [](const PendingRow& a, const PendingRow& b) { return a.id < b.id; };
  if (!std::is_sorted(pending.begin(), pending.end(), by_id)) std::stable_sort(pending.begin(), pending.end(), by_id);
  // A seq the batch repeats, or one stored before: the first row stays.
  auto same_id = [](const PendingRow& a, const PendingRow& b) { return a.id == b.id; };
  pending.erase(std::unique(pending.begin(), pending.end(), same_id), pending.end());
  if (Status s = segments_.stored_ids(table, pending.front().id, pending.back().id, stored_ids_); !s.ok())
    return db_.error(s.message());
  if (!stored_ids_.empty())
    std::erase_if(pending, [this](const PendingRow& row) {
      return std::binary_search(stored_ids_.begin(), stored_ids_.end(), row.id);
    });
  if (pending.empty()) return {};
  int64_t written = 0;
  if (Status s = insert.insert(pending.size(), bind_row, written); !s.ok()) return s;
  // SQLite gave the rows the rowids after the table's largest, one by one.
  const int64_t last_row = sqlite3_last_insert_rowid(db_.handle());
  if (written != static_cast<int64_t>(pending.size()))
    return db_.error("wrote " + std::to_string(written) + " of " + std::to_string(pending.size()) + " rows into " +
                     std::string(table.name));
  stored += written;
  if (Status s = segments_.add(table, pending.front().id, pending.back().id, last_row - written + 1, last_row); !s.ok())
    return db_.error(s.message());
  return {};
}

Status StoreWriter::insert_events(const v1::Batch& batch, AgentRow& agent, uint64_t received_unix_ns) {
  if (Status s = intern_batch_names(batch); !s.ok()) return s;
  collect_pending_rows(batch, agent);
  const int64_t casts_before = agent.casts, ops_before = agent.ops, samples_before = agent.cache_samples,
                kernels_before = agent.kernels, numerics_before = agent.numerics;
  if (rollups_.enabled()) add_rollups(agent.id, received_unix_ns);
  int64_t received = 0;
  for (const std::vector<PendingRow>& rows : pending_) received += static_cast<int64_t>(rows.size());
  if (Status s = insert_pending_rows(agent); !s.ok()) return db_.error(s.message());
  const int64_t ignored = received - (agent.casts - casts_before) - (agent.ops - ops_before) -
                       (agent.cache_samples - samples_before) - (agent.kernels - kernels_before) - (agent.numerics - numerics_before);
  // Once per such batch: a client replaying batches under new sequences would flood the log.
  static log::RateLimited repeated(log::logger("collector"), "batches repeating stored events");
  if (ignored > 0)
    repeated.warn("run {} agent {} batch {}: {} events repeat a seq stored before or earlier in the batch; kept the first",
                  batch.agent().run_id(), batch.agent().agent_id(), batch.sequence(), ignored);
  return {};
}

Status StoreWriter::intern_batch_names(const v1::Batch& batch) {
  size_t bad = 0;
  if (!batch_string_index_.build(string_ids(batch), bad) || !batch_location_index_.build(location_ids(batch), bad))
    return Status::invalid_argument("batch not validated: repeated interned id");
  batch_string_ids_.resize(static_cast<size_t>(batch.strings_size()));
  for (int i = 0; i < batch.strings_size(); ++i)
    if (Status s = intern_string(batch.strings(i).text(), batch_string_ids_[static_cast<size_t>(i)]); !s.ok())
      return s;
  batch_location_ids_.resize(static_cast<size_t>(batch.locations_size()));
  for (int i = 0; i < batch.locations_size(); ++i)
    if (Status s = intern_location(batch.locations(i).location(), batch_location_ids_[static_cast<size_t>(i)]);
        !s.ok())
      return s;
  return {};
}

// The batch's events by kind, with their row ids and interned ids; the stats
// events update the agent's row.
void StoreWriter::collect_pending_rows(const v1::Batch& batch, AgentRow& agent) {
  for (std::vector<PendingRow>& rows : pending_) rows.clear();
  for (const v1::Event& event : batch.events()) {
    tiles_.add(agent.id, event);
    v1::names::visit_kind(event, [&](const auto& member) {
      if constexpr (std::is_same_v<std::decay_t<decltype(member)>, v1::AgentStats>)
        take_stats(member, agent);
      else
        pending_[event.kind_case()].push_back(pending_row(event, member, agent.id));
    });
  }
}

template <typename Member>
PendingRow StoreWriter::pending_row(const v1::Event& event, const Member& member, int64_t agent) const {
  PendingRow row{&event, event_row_id(agent, member.seq()), 0, 0, 0};
  auto string_id = [this](uint32_t local) { return global_id(local, batch_string_index_, batch_string_ids_); };
  if constexpr (requires { member.op_id(); }) row.op = string_id(member.op_id());
  if constexpr (requires { member.name_id(); }) row.op = string_id(member.name_id());  // a kernel's, in its op column
  if constexpr (requires { member.arg_name_id(); }) row.arg_name = string_id(member.arg_name_id());
  if constexpr (requires { member.location_id(); })
    row.location = global_id(member.location_id(), batch_location_index_, batch_location_ids_);
  if constexpr (requires { member.module_id(); }) row.module = string_id(member.module_id());
  if constexpr (requires { member.parameter_id(); }) row.parameter = string_id(member.parameter_id());
  return row;
}

void StoreWriter::take_stats(const v1::AgentStats& stats, AgentRow& agent) {
  agent.internal_errors = std::max(agent.internal_errors, static_cast<int64_t>(stats.internal_errors()));
  agent.gpu_records_dropped = std::max(agent.gpu_records_dropped, static_cast<int64_t>(stats.gpu_records_dropped()));
  if (!stats.gpu_timing().empty()) agent.gpu_timing = stats.gpu_timing();
  // Cumulative in the agent: the longest list is the latest, whatever order
  // batches arrive in.
  if (static_cast<size_t>(stats.overlay_errors_size()) > agent.overlay_error_count) {
    agent.overlay_errors =
        nlohmann::json(stats.overlay_errors()).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    agent.overlay_error_count = static_cast<size_t>(stats.overlay_errors_size());
  }
}

// Counters are records of the agent (AgentStats.events_recorded counts them):
// stored, they count as the agent's casts and ops rows.
Status StoreWriter::insert_pending_rows(AgentRow& agent) {
  struct Kind {
    const schema::Table& table;
    MultiRowInsert& insert;
    v1::Event::KindCase kind;
    void (*bind)(Statement&, int, const PendingRow&);
    int64_t& stored;
  };
  const Kind kinds[] = {
      {schema::kCasts, casts_, v1::Event::kCast, bind_cast_row, agent.casts},
      {schema::kOps, ops_, v1::Event::kOp, bind_op_row, agent.ops},
      {schema::kCacheSamples, cache_samples_, v1::Event::kCacheSample, bind_cache_sample_row, agent.cache_samples},
      {schema::kKernels, kernels_, v1::Event::kKernel, bind_kernel_row, agent.kernels},
      {schema::kCastCounts, cast_counts_, v1::Event::kCastCounts, bind_cast_counts_row, agent.casts},
      {schema::kOpCounts, op_counts_, v1::Event::kOpCounts, bind_op_counts_row, agent.ops},
      {schema::kNumerics, numerics_, v1::Event::kNumerics, bind_numerics_row, agent.numerics},
  };
  for (const Kind& kind : kinds) {
    std::vector<PendingRow>& pending = pending_[kind.kind];
    const auto bind = kind.bind;
    if (Status s = insert_rows(
            kind.table, kind.insert, pending,
            [&pending, bind](Statement& s, int p, size_t row) { bind(s, p, pending[row]); }, kind.stored);
        !s.ok())
      return s;
  }
  return {};
}

}  // namespace castscope::collector
