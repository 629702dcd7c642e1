#include "server/src/store/store_writer.h"

#include <nlohmann/json.hpp>

#include <algorithm>

#include "server/src/batch/batch_validation.h"
#include "common/log/logger.h"
#include "server/src/store/event_columns.h"

namespace castscope::collector {

namespace v1 = castscope::v1;

namespace {

// Stacks are stored as a JSON array of frames; empty when the agent sent none.
std::string stack_text(const v1::SourceLocation& location) {
  if (location.stack_size() == 0) return {};
  return nlohmann::json(std::vector<std::string>(location.stack().begin(), location.stack().end())).dump();
}

// locations.flags
int64_t location_flags(const v1::SourceLocation& location) { return location.inside_disabled_autocast() ? 1 : 0; }

std::string location_key(const v1::SourceLocation& location, const std::string& stack) {
  std::string key = std::to_string(location.kind()) + '\x1f' + location.file() + '\x1f' +
                    std::to_string(location.line()) + '\x1f' + location.function() + '\x1f' + stack + '\x1f' +
                    std::to_string(location_flags(location));
  return key;
}

// Batch-local id → global id, through the batch's index (0 stays 0: none).
int64_t global_id(uint32_t local, const LocalIdIndex& index, const std::vector<int64_t>& globals) {
  if (local == 0) return 0;
  const int32_t position = index.find(local);
  return position == LocalIdIndex::kAbsent ? 0 : globals[static_cast<size_t>(position)];
}

}  // namespace

Status MultiRowInsert::prepare(sqlite3* db, const std::string& table, const std::vector<std::string>& columns) {
  db_ = db;
  columns_ = static_cast<int>(columns.size());
  std::string names;
  std::string one_row = "(";
  for (size_t i = 0; i < columns.size(); ++i) {
    names += (i ? "," : "") + columns[i];
    one_row += i ? ",?" : "?";
  }
  one_row += ")";
  for (size_t k = 0; k < kRowsPerStatement.size(); ++k) {
    std::string sql = "INSERT OR IGNORE INTO " + table + "(" + names + ") VALUES ";
    for (size_t r = 0; r < kRowsPerStatement[k]; ++r) sql += (r ? "," : "") + one_row;
    if (Status s = Statement::prepare(db, sql, statements_[k]); !s.ok()) return s;
  }
  return {};
}

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
  const std::pair<Statement*, const char*> statements[] = {
      {&begin_, "BEGIN"},
      {&commit_, "COMMIT"},
      {&rollback_, "ROLLBACK"},
      {&insert_batch_, "INSERT OR IGNORE INTO batches(agent, sequence, received_unix_ns, n_events) VALUES (?,?,?,?)"},
      {&find_run_, "SELECT id, last_seen_unix_ns FROM runs WHERE run_id = ?"},
      {&insert_run_, "INSERT INTO runs(run_id, first_seen_unix_ns, last_seen_unix_ns) VALUES (?,?,?)"},
      {&update_run_, "UPDATE runs SET last_seen_unix_ns = ? WHERE id = ?"},
      {&find_agent_,
       "SELECT id, batches, casts, ops, cache_samples, first_sequence, last_sequence, events_recorded_total, "
       "events_dropped_total, internal_errors, finished FROM agents WHERE run = ? AND agent_id = ?"},
      {&insert_agent_,
       "INSERT INTO agents(run, agent_id, pid, rank, local_rank, world_size, hostname, torch_version, command, "
       "policy_hash, policy_files) VALUES (?,?,?,?,?,?,?,?,?,?,?)"},
      {&update_agent_,
       "UPDATE agents SET batches=?, casts=?, ops=?, cache_samples=?, first_sequence=?, last_sequence=?, "
       "events_recorded_total=?, events_dropped_total=?, internal_errors=?, finished=? WHERE id=?"},
      {&find_string_, "SELECT id FROM strings WHERE text = ?"},
      {&insert_string_, "INSERT INTO strings(text) VALUES (?)"},
      {&find_location_,
       "SELECT id FROM locations WHERE kind = ? AND file = ? AND line = ? AND function = ? AND stack = ? AND flags = ?"},
      {&insert_location_, "INSERT INTO locations(kind, file, line, function, stack, flags) VALUES (?,?,?,?,?,?)"},
  };
  for (const auto& [statement, sql] : statements)
    if (Status s = Statement::prepare(db, sql, *statement); !s.ok()) return db_.error(s.message());
  if (Status s = casts_.prepare(db, "casts",
                                {"id", "ts_ns", "op", "arg_name", "slot", "codes", "shape", "bytes", "op_seq",
                                 "source_version", "cached_version", "location"});
      !s.ok())
    return s;
  if (Status s = ops_.prepare(db, "ops",
                              {"id", "ts_ns", "thread", "op", "codes", "input_dtypes", "cpu_duration_ns",
                               "location", "autocast_enabled", "autocast_nesting"});
      !s.ok())
    return s;
  return cache_samples_.prepare(db, "cache_samples",
                                {"id", "ts_ns", "trigger", "iteration", "live_casts", "live_bytes"});
}

Status StoreWriter::begin() {
  checkpointer_.before_begin();
  return begin_.run();
}

Status StoreWriter::replace_findings(const std::string& run_id, const std::vector<StoredFinding>& findings) {
  Statement find, clear, insert;
  if (Status s = Statement::prepare(db_.handle(), "SELECT id FROM runs WHERE run_id = ?", find); !s.ok()) return s;
  find.bind_text(1, run_id);
  Status error;
  if (!find.step(error)) return error;
  const int64_t run = find.column_int(0);
  if (Status s = Statement::prepare(db_.handle(), "DELETE FROM findings WHERE run = ?", clear); !s.ok()) return s;
  clear.bind(1, run);
  if (Status s = clear.run(); !s.ok()) return s;
  if (Status s = Statement::prepare(db_.handle(),
                                    "INSERT INTO findings(run, kind, severity, summary, details_json) VALUES (?,?,?,?,?)",
                                    insert);
      !s.ok())
    return s;
  for (const StoredFinding& f : findings) {
    insert.bind(1, run);
    insert.bind_text(2, f.kind);
    insert.bind_text(3, f.severity);
    insert.bind_text(4, f.summary);
    insert.bind_text(5, f.details_json);
    if (Status s = insert.run(); !s.ok()) return s;
  }
  return Status();
}

Status StoreWriter::commit() {
  for (AgentRow* agent : dirty_agents_) {
    const int64_t values[] = {agent->batches,         agent->casts,          agent->ops,
                              agent->cache_samples,   agent->first_sequence, agent->last_sequence,
                              agent->events_recorded_total, agent->events_dropped_total, agent->internal_errors,
                              agent->finished ? 1 : 0, agent->id};
    for (size_t i = 0; i < std::size(values); ++i) update_agent_.bind(static_cast<int>(i) + 1, values[i]);
    if (Status s = update_agent_.run(); !s.ok()) return db_.error(s.message());
    agent->dirty = false;
  }
  dirty_agents_.clear();
  for (RunRow* run : dirty_runs_) {
    update_run_.bind(1, static_cast<int64_t>(run->last_seen_unix_ns));
    update_run_.bind(2, run->id);
    if (Status s = update_run_.run(); !s.ok()) return db_.error(s.message());
    run->dirty = false;
  }
  dirty_runs_.clear();
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
}

Status StoreWriter::find_or_create_run(const std::string& run_id, uint64_t now_unix_ns, RunRow*& out) {
  auto [it, inserted] = runs_.try_emplace(run_id);
  RunRow& run = it->second;
  if (inserted) {
    find_run_.bind_text(1, run_id);
    Status error;
    if (find_run_.step(error)) {
      run.id = find_run_.column_int(0);
      run.last_seen_unix_ns = static_cast<uint64_t>(find_run_.column_int(1));
    }
    find_run_.reset();
    if (error.ok() && run.id == 0) {
      insert_run_.bind_text(1, run_id);
      insert_run_.bind(2, static_cast<int64_t>(now_unix_ns));
      insert_run_.bind(3, static_cast<int64_t>(now_unix_ns));
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
      agent.id = find_agent_.column_int(0);
      int64_t* counters[] = {&agent.batches,         &agent.casts,          &agent.ops,
                             &agent.cache_samples,   &agent.first_sequence, &agent.last_sequence,
                             &agent.events_recorded_total, &agent.events_dropped_total, &agent.internal_errors};
      for (size_t i = 0; i < std::size(counters); ++i) *counters[i] = find_agent_.column_int(static_cast<int>(i) + 1);
      agent.finished = find_agent_.column_int(10) != 0;
    }
    find_agent_.reset();
    if (error.ok() && agent.id == 0) {
      insert_agent_.bind(1, run->id);
      insert_agent_.bind_text(2, identity.agent_id());
      insert_agent_.bind(3, identity.pid());
      insert_agent_.bind(4, identity.rank());
      insert_agent_.bind(5, identity.local_rank());
      insert_agent_.bind(6, identity.world_size());
      insert_agent_.bind_text(7, identity.hostname());
      insert_agent_.bind_text(8, identity.torch_version());
      insert_agent_.bind_text(9, identity.command());
      insert_agent_.bind_text(10, identity.policy_hash());
      const std::string policy_files = nlohmann::json(identity.policy_files()).dump();  // bound, not copied
      insert_agent_.bind_text(11, policy_files);
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
  id = find_string_.step(error) ? find_string_.column_int(0) : 0;
  find_string_.reset();
  if (error.ok() && id == 0) {
    insert_string_.bind_text(1, text);
    error = insert_string_.run();
    id = sqlite3_last_insert_rowid(db_.handle());
  }
  if (!error.ok()) return db_.error(error.message());
  string_ids_.emplace(text, id);
  return {};
}

Status StoreWriter::intern_location(const v1::SourceLocation& location, int64_t& id) {
  const std::string stack = stack_text(location);
  std::string key = location_key(location, stack);
  if (auto it = location_ids_.find(key); it != location_ids_.end()) {
    id = it->second;
    return {};
  }
  Statement* statements[] = {&find_location_, &insert_location_};
  for (Statement* statement : statements) {
    statement->bind(1, location.kind());
    statement->bind_text(2, location.file());
    statement->bind(3, location.line());
    statement->bind_text(4, location.function());
    statement->bind_text(5, stack);
    statement->bind(6, location_flags(location));
  }
  Status error;
  id = find_location_.step(error) ? find_location_.column_int(0) : 0;
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
  insert_batch_.bind(1, agent->id);
  insert_batch_.bind(2, static_cast<int64_t>(batch.sequence()));
  insert_batch_.bind(3, static_cast<int64_t>(received_unix_ns));
  insert_batch_.bind(4, batch.events_size());
  if (Status s = insert_batch_.run(); !s.ok()) return db_.error(s.message());
  duplicate = sqlite3_changes(db_.handle()) == 0;
  if (duplicate) return {};

  if (Status s = insert_events(batch, *agent); !s.ok()) return s;

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

Status StoreWriter::insert_events(const v1::Batch& batch, AgentRow& agent) {
  LocalIdIndex string_index;
  LocalIdIndex location_index;
  size_t bad = 0;
  if (!string_index.build(string_ids(batch), bad) || !location_index.build(location_ids(batch), bad))
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

  casts_pending_.clear();
  ops_pending_.clear();
  samples_pending_.clear();
  for (const v1::Event& event : batch.events()) {
    switch (event.kind_case()) {
      case v1::Event::kCast: {
        const v1::CastEvent& cast = event.cast();
        casts_pending_.push_back({&event, event_row_id(agent.id, cast.seq()),
                                  global_id(cast.op_id(), string_index, batch_string_ids_),
                                  global_id(cast.arg_name_id(), string_index, batch_string_ids_),
                                  global_id(cast.location_id(), location_index, batch_location_ids_)});
        break;
      }
      case v1::Event::kOp: {
        const v1::OpEvent& op = event.op();
        ops_pending_.push_back({&event, event_row_id(agent.id, op.seq()),
                                global_id(op.op_id(), string_index, batch_string_ids_), 0,
                                global_id(op.location_id(), location_index, batch_location_ids_)});
        break;
      }
      case v1::Event::kCacheSample:
        samples_pending_.push_back({&event, event_row_id(agent.id, event.cache_sample().seq()), 0, 0, 0});
        break;
      case v1::Event::kStats:
        agent.internal_errors = std::max(agent.internal_errors, static_cast<int64_t>(event.stats().internal_errors()));
        break;
      case v1::Event::KIND_NOT_SET:
        break;
    }
  }

  const int64_t casts_before = agent.casts, ops_before = agent.ops, samples_before = agent.cache_samples;
  Status status = casts_.insert(
      casts_pending_.size(),
      [this](Statement& s, int p, size_t row) {
        const PendingRow& pending = casts_pending_[row];
        const v1::CastEvent& c = pending.event->cast();
        s.bind(p, pending.id);
        s.bind(p + 1, static_cast<int64_t>(c.ts_ns()));
        s.bind(p + 2, pending.op);
        s.bind(p + 3, pending.arg_name);
        s.bind(p + 4, pack_cast_slot(c));
        s.bind(p + 5, pack_cast_codes(c));
        if (c.shape_size() == 0)
          sqlite3_bind_null(s.get(), p + 6);
        else
          sqlite3_bind_blob(s.get(), p + 6, c.shape().data(), c.shape_size() * 8, SQLITE_STATIC);
        s.bind(p + 7, static_cast<int64_t>(c.bytes()));
        s.bind(p + 8, static_cast<int64_t>(c.op_seq()));
        s.bind(p + 9, c.source_version());
        s.bind(p + 10, c.cached_version());
        s.bind(p + 11, pending.location);
      },
      agent.casts);
  if (status.ok())
    status = ops_.insert(
        ops_pending_.size(),
        [this](Statement& s, int p, size_t row) {
          const PendingRow& pending = ops_pending_[row];
          const v1::OpEvent& o = pending.event->op();
          s.bind(p, pending.id);
          s.bind(p + 1, static_cast<int64_t>(o.ts_ns()));
          s.bind(p + 2, o.thread());
          s.bind(p + 3, pending.op);
          s.bind(p + 4, pack_op_codes(o));
          s.bind(p + 5, pack_input_dtypes(o));
          s.bind(p + 6, static_cast<int64_t>(o.cpu_duration_ns()));
          s.bind(p + 7, pending.location);
          s.bind(p + 8, pack_device_mask(o));
          s.bind(p + 9, o.autocast_nesting());
        },
        agent.ops);
  if (status.ok())
    status = cache_samples_.insert(
        samples_pending_.size(),
        [this](Statement& s, int p, size_t row) {
          const PendingRow& pending = samples_pending_[row];
          const v1::CacheSample& sample = pending.event->cache_sample();
          s.bind(p, pending.id);
          s.bind(p + 1, static_cast<int64_t>(sample.ts_ns()));
          s.bind(p + 2, sample.trigger());
          s.bind(p + 3, static_cast<int64_t>(sample.iteration()));
          s.bind(p + 4, static_cast<int64_t>(sample.live_casts()));
          s.bind(p + 5, static_cast<int64_t>(sample.live_bytes()));
        },
        agent.cache_samples);
  if (!status.ok()) return db_.error(status.message());

  const auto ignored = static_cast<int64_t>(casts_pending_.size() + ops_pending_.size() + samples_pending_.size()) -
                       (agent.casts - casts_before) - (agent.ops - ops_before) -
                       (agent.cache_samples - samples_before);
  if (ignored > 0)
    log::logger("collector").warn("run {} agent {} batch {}: {} events repeat the seq of events stored earlier; kept the first",
                         batch.agent().run_id(), batch.agent().agent_id(), batch.sequence(), ignored);
  return {};
}

}  // namespace castscope::collector
