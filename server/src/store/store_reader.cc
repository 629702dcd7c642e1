#include "server/src/store/store_reader.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "server/src/batch/batch_validation.h"
#include "server/src/store/event_columns.h"

namespace castscope::collector {

namespace v1 = castscope::v1;

namespace {

// A read transaction, so every answer is one consistent snapshot.
class ReadTransaction {
 public:
  explicit ReadTransaction(Database& db) : db_(db) { ok_ = db_.exec("BEGIN").ok(); }
  ~ReadTransaction() {
    if (ok_) (void)db_.exec("COMMIT");
  }
  ReadTransaction(const ReadTransaction&) = delete;
  ReadTransaction& operator=(const ReadTransaction&) = delete;

 private:
  Database& db_;
  bool ok_ = false;
};

constexpr const char* kCastColumns =
    "id, ts_ns, " CASTSCOPE_SLOT_THREAD_SQL ", op, " CASTSCOPE_SLOT_ARG_INDEX_SQL ", arg_name, "
    CASTSCOPE_SLOT_LIST_INDEX_SQL ", codes, shape, bytes, op_seq, source_version, cached_version, location";
constexpr const char* kOpColumns =
    "id, ts_ns, thread, op, codes, input_dtypes, cpu_duration_ns, location, autocast_enabled, autocast_nesting";
constexpr const char* kCacheSampleColumns = "id, ts_ns, trigger, iteration, live_casts, live_bytes";

uint64_t seq_of(const v1::Event& event) {
  switch (event.kind_case()) {
    case v1::Event::kCast:
      return event.cast().seq();
    case v1::Event::kOp:
      return event.op().seq();
    case v1::Event::kCacheSample:
      return event.cache_sample().seq();
    default:
      return 0;
  }
}

}  // namespace

Status StoreReader::open(const std::string& path, std::unique_ptr<StoreReader>& out) {
  auto reader = std::unique_ptr<StoreReader>(new StoreReader());
  if (Status s = reader->db_.open(path, Database::Mode::kReadOnly); !s.ok()) return s;
  out = std::move(reader);
  return {};
}

Status StoreReader::list_runs(v1::ListRunsResponse& out) {
  ReadTransaction transaction(db_);
  Statement runs;
  if (Status s = Statement::prepare(db_.handle(),
                                    "SELECT id, run_id, first_seen_unix_ns, last_seen_unix_ns FROM runs ORDER BY id",
                                    runs);
      !s.ok())
    return db_.error(s.message());
  Statement agents;
  if (Status s = Statement::prepare(
          db_.handle(),
          "SELECT agent_id, pid, rank, local_rank, world_size, hostname, torch_version, command, batches, casts, ops, "
          "cache_samples, events_recorded_total, events_dropped_total, first_sequence, last_sequence, finished, "
          "policy_hash, policy_files FROM agents WHERE run = ? ORDER BY id",
          agents);
      !s.ok())
    return db_.error(s.message());
  Status error;
  while (runs.step(error)) {
    v1::RunSummary& run = *out.add_runs();
    run.set_run_id(runs.column_text(1));
    run.set_first_seen_unix_ns(static_cast<uint64_t>(runs.column_int(2)));
    run.set_last_seen_unix_ns(static_cast<uint64_t>(runs.column_int(3)));
    agents.bind(1, runs.column_int(0));
    while (agents.step(error)) {
      v1::AgentSummary& agent = *run.add_agents();
      v1::AgentIdentity& identity = *agent.mutable_identity();
      identity.set_run_id(run.run_id());
      identity.set_agent_id(agents.column_text(0));
      identity.set_pid(static_cast<uint32_t>(agents.column_int(1)));
      identity.set_rank(static_cast<int32_t>(agents.column_int(2)));
      identity.set_local_rank(static_cast<int32_t>(agents.column_int(3)));
      identity.set_world_size(static_cast<int32_t>(agents.column_int(4)));
      identity.set_hostname(agents.column_text(5));
      identity.set_torch_version(agents.column_text(6));
      identity.set_command(agents.column_text(7));
      identity.set_policy_hash(agents.column_text(17));
      for (const auto& file : nlohmann::json::parse(agents.column_text(18), nullptr, false))
        if (file.is_string()) identity.add_policy_files(file.get<std::string>());
      const auto batches = static_cast<uint64_t>(agents.column_int(8));
      agent.set_batches(batches);
      agent.set_casts(static_cast<uint64_t>(agents.column_int(9)));
      agent.set_ops(static_cast<uint64_t>(agents.column_int(10)));
      agent.set_cache_samples(static_cast<uint64_t>(agents.column_int(11)));
      agent.set_events_recorded_total(static_cast<uint64_t>(agents.column_int(12)));
      agent.set_events_dropped_total(static_cast<uint64_t>(agents.column_int(13)));
      const auto first = static_cast<uint64_t>(agents.column_int(14));
      const auto last = static_cast<uint64_t>(agents.column_int(15));
      agent.set_first_sequence(first);
      agent.set_last_sequence(last);
      agent.set_missing_sequences(batches == 0 ? 0 : last - first + 1 - batches);
      agent.set_finished(agents.column_int(16) != 0);
    }
    agents.reset();
    if (!error.ok()) break;
  }
  return error.ok() ? Status() : db_.error(error.message());
}

Status StoreReader::find_agents(const std::string& run_id, const std::string& agent_id, std::vector<AgentRef>& out) {
  Statement statement;
  const char* sql = agent_id.empty()
                        ? "SELECT a.id, a.agent_id FROM agents a JOIN runs r ON a.run = r.id WHERE r.run_id = ? "
                          "ORDER BY a.id"
                        : "SELECT a.id, a.agent_id FROM agents a JOIN runs r ON a.run = r.id WHERE r.run_id = ? "
                          "AND a.agent_id = ? ORDER BY a.id";
  if (Status s = Statement::prepare(db_.handle(), sql, statement); !s.ok()) return db_.error(s.message());
  statement.bind_text(1, run_id);
  if (!agent_id.empty()) statement.bind_text(2, agent_id);
  Status error;
  while (statement.step(error)) out.push_back({statement.column_int(0), statement.column_text(1)});
  return error.ok() ? Status() : db_.error(error.message());
}

Status StoreReader::resolve_string(int64_t id, std::string& out) {
  if (id == 0) return {};
  if (auto it = strings_.find(id); it != strings_.end()) {
    out = it->second;
    return {};
  }
  Statement statement;
  if (Status s = Statement::prepare(db_.handle(), "SELECT text FROM strings WHERE id = ?", statement); !s.ok())
    return db_.error(s.message());
  statement.bind(1, id);
  Status error;
  if (statement.step(error)) out = statement.column_text(0);
  if (!error.ok()) return db_.error(error.message());
  strings_.emplace(id, out);
  return {};
}

Status StoreReader::resolve_location(int64_t id, v1::SourceLocation& out) {
  if (id == 0) return {};
  if (auto it = locations_.find(id); it != locations_.end()) {
    out = it->second;
    return {};
  }
  Statement statement;
  if (Status s = Statement::prepare(db_.handle(),
                                    "SELECT kind, file, line, function, stack, flags FROM locations WHERE id = ?", statement);
      !s.ok())
    return db_.error(s.message());
  statement.bind(1, id);
  Status error;
  if (statement.step(error)) {
    out.set_kind(static_cast<v1::SourceLocation::Kind>(statement.column_int(0)));
    out.set_file(statement.column_text(1));
    out.set_line(static_cast<uint32_t>(statement.column_int(2)));
    out.set_function(statement.column_text(3));
    out.set_inside_disabled_autocast((statement.column_int(5) & 1) != 0);
    const std::string stack = statement.column_text(4);
    if (!stack.empty()) {
      const auto frames = nlohmann::json::parse(stack, nullptr, false);
      if (frames.is_array())
        for (const auto& frame : frames)
          if (frame.is_string()) out.add_stack(frame.get<std::string>());
    }
  }
  if (!error.ok()) return db_.error(error.message());
  locations_.emplace(id, out);
  return {};
}

Status StoreReader::read_kind(v1::EventFilter::Kind kind, const AgentRef& agent, const std::string& where,
                              uint64_t after_seq, uint32_t limit, std::vector<v1::StoredEvent>& out) {
  const char* table = kind == v1::EventFilter::KIND_CAST ? "casts" : kind == v1::EventFilter::KIND_OP ? "ops"
                                                                                                     : "cache_samples";
  const char* columns = kind == v1::EventFilter::KIND_CAST ? kCastColumns
                        : kind == v1::EventFilter::KIND_OP ? kOpColumns
                                                           : kCacheSampleColumns;
  const std::string sql = std::string("SELECT ") + columns + " FROM " + table + " WHERE id > ? AND id <= ?" + where +
                          " ORDER BY id LIMIT ?";
  Statement rows;
  if (Status s = Statement::prepare(db_.handle(), sql, rows); !s.ok()) return db_.error(s.message());
  rows.bind(1, event_row_id(agent.id, std::min(after_seq, kMaxEventSeq)));
  rows.bind(2, event_row_id(agent.id, kMaxEventSeq));
  rows.bind(3, limit);
  Status error;
  while (rows.step(error)) {
    v1::StoredEvent& stored = out.emplace_back();
    stored.set_agent_id(agent.agent_id);
    const uint64_t seq = seq_of_row(rows.column_int(0));
    Status resolved;
    if (kind == v1::EventFilter::KIND_CAST) {
      v1::CastEvent& c = *stored.mutable_event()->mutable_cast();
      c.set_seq(seq);
      c.set_ts_ns(static_cast<uint64_t>(rows.column_int(1)));
      c.set_thread(static_cast<uint32_t>(rows.column_int(2)));
      resolved = resolve_string(rows.column_int(3), *c.mutable_op());
      c.set_arg_index(static_cast<uint32_t>(rows.column_int(4)));
      if (resolved.ok()) resolved = resolve_string(rows.column_int(5), *c.mutable_arg_name());
      c.set_list_index(static_cast<int32_t>(rows.column_int(6)));
      unpack_cast_codes(rows.column_int(7), c);
      const auto* shape = static_cast<const char*>(sqlite3_column_blob(rows.get(), 8));
      const int shape_bytes = sqlite3_column_bytes(rows.get(), 8);
      for (int i = 0; shape != nullptr && i + 8 <= shape_bytes; i += 8) {
        int64_t dim = 0;
        std::memcpy(&dim, shape + i, 8);
        c.add_shape(dim);
      }
      c.set_bytes(static_cast<uint64_t>(rows.column_int(9)));
      c.set_op_seq(static_cast<uint64_t>(rows.column_int(10)));
      c.set_source_version(rows.column_int(11));
      c.set_cached_version(rows.column_int(12));
      if (resolved.ok() && rows.column_int(13) != 0)
        resolved = resolve_location(rows.column_int(13), *c.mutable_location());
    } else if (kind == v1::EventFilter::KIND_OP) {
      v1::OpEvent& o = *stored.mutable_event()->mutable_op();
      o.set_seq(seq);
      o.set_ts_ns(static_cast<uint64_t>(rows.column_int(1)));
      o.set_thread(static_cast<uint32_t>(rows.column_int(2)));
      resolved = resolve_string(rows.column_int(3), *o.mutable_op());
      unpack_op_codes(rows.column_int(4), o);
      unpack_input_dtypes(rows.column_int(5), o);
      o.set_cpu_duration_ns(static_cast<uint64_t>(rows.column_int(6)));
      if (resolved.ok() && rows.column_int(7) != 0)
        resolved = resolve_location(rows.column_int(7), *o.mutable_location());
      unpack_device_mask(rows.column_int(8), o);
      o.set_autocast_nesting(static_cast<uint32_t>(rows.column_int(9)));
    } else {
      v1::CacheSample& sample = *stored.mutable_event()->mutable_cache_sample();
      sample.set_seq(seq);
      sample.set_ts_ns(static_cast<uint64_t>(rows.column_int(1)));
      sample.set_trigger(static_cast<v1::CacheSample::Trigger>(rows.column_int(2)));
      sample.set_iteration(static_cast<uint64_t>(rows.column_int(3)));
      sample.set_live_casts(static_cast<uint64_t>(rows.column_int(4)));
      sample.set_live_bytes(static_cast<uint64_t>(rows.column_int(5)));
    }
    if (!resolved.ok()) return resolved;
  }
  return error.ok() ? Status() : db_.error(error.message());
}

Status StoreReader::query_events(const v1::EventFilter& filter, v1::QueryEventsResponse& out) {
  if (filter.run_id().empty()) return Status::invalid_argument("EventFilter.run_id is required");
  ReadTransaction transaction(db_);
  strings_.clear();
  locations_.clear();
  const uint32_t limit = filter.limit() == 0 ? kMaxQueryEvents : std::min(filter.limit(), kMaxQueryEvents);

  std::vector<AgentRef> agents;
  if (Status s = find_agents(filter.run_id(), filter.agent_id(), agents); !s.ok()) return s;

  // Op and source filters become integer conditions on the event rows.
  std::string where;
  const bool by_site = !filter.op().empty() || !filter.file().empty();
  if (!filter.op().empty()) {
    Statement find;
    if (Status s = Statement::prepare(db_.handle(), "SELECT id FROM strings WHERE text = ?", find); !s.ok())
      return db_.error(s.message());
    find.bind_text(1, filter.op());
    Status error;
    if (!find.step(error)) return error;  // no such op: nothing matches
    where += " AND op = " + std::to_string(find.column_int(0));
  }
  if (!filter.file().empty()) {
    Statement find;
    if (Status s = Statement::prepare(db_.handle(),
                                      filter.line() == 0 ? "SELECT id FROM locations WHERE file = ?"
                                                         : "SELECT id FROM locations WHERE file = ? AND line = ?",
                                      find);
        !s.ok())
      return db_.error(s.message());
    find.bind_text(1, filter.file());
    if (filter.line() != 0) find.bind(2, filter.line());
    std::string ids;
    Status error;
    while (find.step(error)) ids += (ids.empty() ? "" : ",") + std::to_string(find.column_int(0));
    if (!error.ok()) return db_.error(error.message());
    if (ids.empty()) return {};
    where += " AND location IN (" + ids + ")";
  }

  std::vector<v1::EventFilter::Kind> kinds;
  if (filter.kind() == v1::EventFilter::KIND_UNSPECIFIED) {
    kinds = {v1::EventFilter::KIND_CAST, v1::EventFilter::KIND_OP};
    if (!by_site) kinds.push_back(v1::EventFilter::KIND_CACHE_SAMPLE);  // samples have no op or site
  } else if (filter.kind() != v1::EventFilter::KIND_CACHE_SAMPLE || !by_site) {
    kinds = {filter.kind()};
  }

  for (const AgentRef& agent : agents) {
    const size_t wanted = limit + 1 - static_cast<size_t>(out.events_size());  // one more tells whether there is more
    std::vector<v1::StoredEvent> rows;
    for (v1::EventFilter::Kind kind : kinds)
      if (Status s = read_kind(kind, agent, where, filter.after_seq(), static_cast<uint32_t>(wanted), rows); !s.ok())
        return s;
    std::stable_sort(rows.begin(), rows.end(), [](const v1::StoredEvent& a, const v1::StoredEvent& b) {
      return seq_of(a.event()) < seq_of(b.event());
    });
    for (size_t i = 0; i < rows.size() && i < wanted; ++i) {
      rows[i].set_run_id(filter.run_id());
      *out.add_events() = std::move(rows[i]);
    }
    if (static_cast<uint32_t>(out.events_size()) > limit) {
      out.set_truncated(true);
      out.mutable_events()->RemoveLast();
      break;
    }
  }
  return {};
}

Status StoreReader::list_sequences(const v1::ListSequencesRequest& request, v1::ListSequencesResponse& out) {
  if (request.run_id().empty() || request.agent_id().empty())
    return Status::invalid_argument("ListSequencesRequest needs run_id and agent_id");
  ReadTransaction transaction(db_);
  std::vector<AgentRef> agents;
  if (Status s = find_agents(request.run_id(), request.agent_id(), agents); !s.ok()) return s;
  if (agents.empty()) return {};
  Statement statement;
  if (Status s = Statement::prepare(db_.handle(), "SELECT sequence FROM batches WHERE agent = ? ORDER BY sequence",
                                    statement);
      !s.ok())
    return db_.error(s.message());
  statement.bind(1, agents.front().id);
  Status error;
  while (statement.step(error)) out.add_batch_sequences(static_cast<uint64_t>(statement.column_int(0)));
  return error.ok() ? Status() : db_.error(error.message());
}

Status StoreReader::list_findings(const v1::ListFindingsRequest& request, v1::ListFindingsResponse& out) {
  ReadTransaction transaction(db_);
  Statement statement;
  if (Status s = Statement::prepare(db_.handle(),
                                    "SELECT f.id, r.run_id, f.kind, f.severity, f.summary, f.details_json FROM "
                                    "findings f JOIN runs r ON f.run = r.id WHERE ?1 = '' OR r.run_id = ?1 "
                                    "ORDER BY f.id",
                                    statement);
      !s.ok())
    return db_.error(s.message());
  statement.bind_text(1, request.run_id());
  Status error;
  while (statement.step(error)) {
    v1::Finding& finding = *out.add_findings();
    finding.set_id(std::to_string(statement.column_int(0)));
    finding.set_run_id(statement.column_text(1));
    finding.set_kind(statement.column_text(2));
    finding.set_severity(statement.column_text(3));
    finding.set_summary(statement.column_text(4));
    finding.set_details_json(statement.column_text(5));
  }
  return error.ok() ? Status() : db_.error(error.message());
}

}  // namespace castscope::collector
