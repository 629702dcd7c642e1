#include "server/src/store/store_reader.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>

#include "server/src/batch/batch_validation.h"
#include "server/src/store/event_columns.h"
#include "server/src/store/store_schema.h"

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

// Column lists of the reader's statements (store_schema.h): reads below take
// their ordinals from these.
constexpr auto kCastRow = schema::all_columns<schema::kCasts>();
constexpr auto kOpRow = schema::all_columns<schema::kOps>();
constexpr auto kSampleRow = schema::all_columns<schema::kCacheSamples>();
constexpr auto kRunRow = schema::columns(schema::kRuns, {"id", "run_id", "first_seen_unix_ns", "last_seen_unix_ns"});
constexpr auto kRunId = schema::columns(schema::kRuns, {"id"});
constexpr auto kAgentSummary = schema::columns(
    schema::kAgents, {"agent_id", "pid", "rank", "local_rank", "world_size", "hostname", "torch_version", "command",
                      "batches", "casts", "ops", "cache_samples", "events_recorded_total", "events_dropped_total",
                      "first_sequence", "last_sequence", "finished", "policy_hash", "policy_files", "kernels",
                      "gpu_timing", "gpu_records_dropped", "castscope_version"});
constexpr auto kAgentRef = schema::columns(schema::kAgents, {"id", "agent_id"});
constexpr auto kStringId = schema::columns(schema::kStrings, {"id"});
constexpr auto kStringText = schema::columns(schema::kStrings, {"text"});
constexpr auto kLocationRow =
    schema::columns(schema::kLocations, {"kind", "file", "line", "function", "stack", "flags", "source", "also_consumed_at"});
constexpr auto kBatchSequence = schema::columns(schema::kBatches, {"sequence"});
constexpr auto kFindingRow =
    schema::columns(schema::kFindings, {"id", "run", "kind", "severity", "summary", "details_json"});

// A JSON array of strings as stored (stacks, consumer lines); '' is none.
std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  if (text.empty()) return lines;
  const auto array = nlohmann::json::parse(text, nullptr, false);
  if (array.is_array())
    for (const auto& line : array)
      if (line.is_string()) lines.push_back(line.get<std::string>());
  return lines;
}

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
  if (Status s = Statement::prepare(db_.handle(), kRunRow.select_sql() + " ORDER BY id", runs); !s.ok())
    return db_.error(s.message());
  Statement agents;
  if (Status s = Statement::prepare(db_.handle(), kAgentSummary.select_sql() + " WHERE run = ? ORDER BY id", agents);
      !s.ok())
    return db_.error(s.message());
  // agents.aggregate (schema version 13; a version-12 store, read as it is,
  // has no aggregate agent): read apart, so older stores list as before.
  Statement aggregate;
  {
    Statement has_column;
    if (Status s = Statement::prepare(db_.handle(),
                                      "SELECT COUNT(*) FROM pragma_table_info('agents') WHERE name = 'aggregate'",
                                      has_column);
        !s.ok())
      return db_.error(s.message());
    Status error;
    if (has_column.step(error) && has_column.column_int(0) > 0)
      if (Status s = Statement::prepare(db_.handle(), "SELECT aggregate FROM agents WHERE run = ? ORDER BY id", aggregate);
          !s.ok())
        return db_.error(s.message());
    if (!error.ok()) return db_.error(error.message());
  }
  Status error;
  while (runs.step(error)) {
    v1::RunSummary& run = *out.add_runs();
    run.set_run_id(runs.column_text(kRunRow["run_id"]));
    run.set_first_seen_unix_ns(static_cast<uint64_t>(runs.column_int(kRunRow["first_seen_unix_ns"])));
    run.set_last_seen_unix_ns(static_cast<uint64_t>(runs.column_int(kRunRow["last_seen_unix_ns"])));
    agents.bind(1, runs.column_int(kRunRow["id"]));
    if (aggregate.get() != nullptr) aggregate.bind(1, runs.column_int(kRunRow["id"]));
    while (agents.step(error)) {
      const Statement& a = agents;
      v1::AgentSummary& agent = *run.add_agents();
      v1::AgentIdentity& identity = *agent.mutable_identity();
      identity.set_run_id(run.run_id());
      identity.set_agent_id(a.column_text(kAgentSummary["agent_id"]));
      identity.set_pid(static_cast<uint32_t>(a.column_int(kAgentSummary["pid"])));
      identity.set_rank(static_cast<int32_t>(a.column_int(kAgentSummary["rank"])));
      identity.set_local_rank(static_cast<int32_t>(a.column_int(kAgentSummary["local_rank"])));
      identity.set_world_size(static_cast<int32_t>(a.column_int(kAgentSummary["world_size"])));
      identity.set_hostname(a.column_text(kAgentSummary["hostname"]));
      identity.set_torch_version(a.column_text(kAgentSummary["torch_version"]));
      identity.set_command(a.column_text(kAgentSummary["command"]));
      identity.set_policy_hash(a.column_text(kAgentSummary["policy_hash"]));
      identity.set_castscope_version(a.column_text(kAgentSummary["castscope_version"]));
      for (const auto& file : nlohmann::json::parse(a.column_text(kAgentSummary["policy_files"]), nullptr, false))
        if (file.is_string()) identity.add_policy_files(file.get<std::string>());
      const auto batches = static_cast<uint64_t>(a.column_int(kAgentSummary["batches"]));
      agent.set_batches(batches);
      agent.set_casts(static_cast<uint64_t>(a.column_int(kAgentSummary["casts"])));
      agent.set_ops(static_cast<uint64_t>(a.column_int(kAgentSummary["ops"])));
      agent.set_cache_samples(static_cast<uint64_t>(a.column_int(kAgentSummary["cache_samples"])));
      agent.set_events_recorded_total(static_cast<uint64_t>(a.column_int(kAgentSummary["events_recorded_total"])));
      agent.set_events_dropped_total(static_cast<uint64_t>(a.column_int(kAgentSummary["events_dropped_total"])));
      const auto first = static_cast<uint64_t>(a.column_int(kAgentSummary["first_sequence"]));
      const auto last = static_cast<uint64_t>(a.column_int(kAgentSummary["last_sequence"]));
      agent.set_first_sequence(first);
      agent.set_last_sequence(last);
      agent.set_missing_sequences(batches == 0 ? 0 : last - first + 1 - batches);
      agent.set_finished(a.column_int(kAgentSummary["finished"]) != 0);
      agent.set_kernels(static_cast<uint64_t>(a.column_int(kAgentSummary["kernels"])));
      agent.set_gpu_timing(a.column_text(kAgentSummary["gpu_timing"]));
      agent.set_gpu_records_dropped(static_cast<uint64_t>(a.column_int(kAgentSummary["gpu_records_dropped"])));
      if (aggregate.get() != nullptr && aggregate.step(error)) identity.set_aggregate(aggregate.column_int(0) != 0);
    }
    agents.reset();
    if (aggregate.get() != nullptr) aggregate.reset();
    if (!error.ok()) break;
  }
  return error.ok() ? Status() : db_.error(error.message());
}

Status StoreReader::find_run(const std::string& run_id, int64_t& run) {
  run = 0;
  Statement statement;
  if (Status s = Statement::prepare(db_.handle(), kRunId.select_sql() + " WHERE run_id = ?", statement); !s.ok())
    return db_.error(s.message());
  statement.bind_text(1, run_id);
  Status error;
  if (statement.step(error)) run = statement.column_int(kRunId["id"]);
  return error.ok() ? Status() : db_.error(error.message());
}

Status StoreReader::find_agents(const std::string& run_id, const std::string& agent_id, std::vector<AgentRef>& out) {
  int64_t run = 0;
  if (Status s = find_run(run_id, run); !s.ok() || run == 0) return s;
  Statement statement;
  const std::string sql =
      kAgentRef.select_sql() + (agent_id.empty() ? " WHERE run = ? ORDER BY id" : " WHERE run = ? AND agent_id = ? ORDER BY id");
  if (Status s = Statement::prepare(db_.handle(), sql, statement); !s.ok()) return db_.error(s.message());
  statement.bind(1, run);
  if (!agent_id.empty()) statement.bind_text(2, agent_id);
  Status error;
  while (statement.step(error))
    out.push_back({statement.column_int(kAgentRef["id"]), statement.column_text(kAgentRef["agent_id"])});
  return error.ok() ? Status() : db_.error(error.message());
}

Status StoreReader::resolve_string(int64_t id, std::string& out) {
  if (id == 0) return {};
  if (auto it = strings_.find(id); it != strings_.end()) {
    out = it->second;
    return {};
  }
  Statement statement;
  if (Status s = Statement::prepare(db_.handle(), kStringText.select_sql() + " WHERE id = ?", statement); !s.ok())
    return db_.error(s.message());
  statement.bind(1, id);
  Status error;
  if (statement.step(error)) out = statement.column_text(kStringText["text"]);
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
  if (Status s = Statement::prepare(db_.handle(), kLocationRow.select_sql() + " WHERE id = ?", statement); !s.ok())
    return db_.error(s.message());
  statement.bind(1, id);
  Status error;
  if (statement.step(error)) {
    out.set_kind(static_cast<v1::SourceLocation::Kind>(statement.column_int(kLocationRow["kind"])));
    out.set_file(statement.column_text(kLocationRow["file"]));
    out.set_line(static_cast<uint32_t>(statement.column_int(kLocationRow["line"])));
    out.set_function(statement.column_text(kLocationRow["function"]));
    out.set_inside_disabled_autocast((statement.column_int(kLocationRow["flags"]) & 1) != 0);
    out.set_source_text(statement.column_text(kLocationRow["source"]));
    for (const auto& frame : lines_of(statement.column_text(kLocationRow["stack"]))) out.add_stack(frame);
    for (const auto& line : lines_of(statement.column_text(kLocationRow["also_consumed_at"])))
      out.add_also_consumed_at(line);
  }
  if (!error.ok()) return db_.error(error.message());
  locations_.emplace(id, out);
  return {};
}

Status StoreReader::read_kind(v1::EventFilter::Kind kind, const AgentRef& agent, const SiteFilter& site,
                              uint64_t after_seq, uint32_t limit, std::vector<v1::StoredEvent>& out) {
  // One of a fixed set of statements (kind x op filter x site filter); values are bound.
  std::string sql = kind == v1::EventFilter::KIND_CAST ? kCastRow.select_sql()
                    : kind == v1::EventFilter::KIND_OP ? kOpRow.select_sql()
                                                       : kSampleRow.select_sql();
  sql += " WHERE id > ? AND id <= ?";
  if (site.op != 0) sql += " AND op = ?";
  if (!site.file.empty()) sql += " AND location IN (SELECT id FROM locations WHERE file = ? AND (? = 0 OR line = ?))";
  sql += " ORDER BY id LIMIT ?";
  Statement rows;
  if (Status s = Statement::prepare(db_.handle(), sql, rows); !s.ok()) return db_.error(s.message());
  int param = 1;
  rows.bind(param++, event_row_id(agent.id, std::min(after_seq, kMaxEventSeq)));
  rows.bind(param++, event_row_id(agent.id, kMaxEventSeq));
  if (site.op != 0) rows.bind(param++, site.op);
  if (!site.file.empty()) {
    rows.bind_text(param++, site.file);
    rows.bind(param++, site.line);
    rows.bind(param++, site.line);
  }
  rows.bind(param, limit);
  Status error;
  while (rows.step(error)) {
    const Statement& r = rows;
    v1::StoredEvent& stored = out.emplace_back();
    stored.set_agent_id(agent.agent_id);
    Status resolved;
    if (kind == v1::EventFilter::KIND_CAST) {
      v1::CastEvent& c = *stored.mutable_event()->mutable_cast();
      c.set_seq(seq_of_row(r.column_int(kCastRow["id"])));
      c.set_ts_ns(static_cast<uint64_t>(r.column_int(kCastRow["ts_ns"])));
      unpack_cast_slot(r.column_int(kCastRow["slot"]), c);
      resolved = resolve_string(r.column_int(kCastRow["op"]), *c.mutable_op());
      if (resolved.ok()) resolved = resolve_string(r.column_int(kCastRow["arg_name"]), *c.mutable_arg_name());
      unpack_cast_codes(r.column_int(kCastRow["codes"]), c);
      const auto* shape = static_cast<const char*>(sqlite3_column_blob(r.get(), kCastRow["shape"]));
      const int shape_bytes = sqlite3_column_bytes(r.get(), kCastRow["shape"]);
      for (int i = 0; shape != nullptr && i + 8 <= shape_bytes; i += 8) {
        int64_t dim = 0;
        std::memcpy(&dim, shape + i, 8);
        c.add_shape(dim);
      }
      c.set_bytes(static_cast<uint64_t>(r.column_int(kCastRow["bytes"])));
      c.set_op_seq(static_cast<uint64_t>(r.column_int(kCastRow["op_seq"])));
      c.set_source_version(r.column_int(kCastRow["source_version"]));
      c.set_cached_version(r.column_int(kCastRow["cached_version"]));
      if (const int64_t location = r.column_int(kCastRow["location"]); resolved.ok() && location != 0)
        resolved = resolve_location(location, *c.mutable_location());
    } else if (kind == v1::EventFilter::KIND_OP) {
      v1::OpEvent& o = *stored.mutable_event()->mutable_op();
      o.set_seq(seq_of_row(r.column_int(kOpRow["id"])));
      o.set_ts_ns(static_cast<uint64_t>(r.column_int(kOpRow["ts_ns"])));
      o.set_thread(static_cast<uint32_t>(r.column_int(kOpRow["thread"])));
      resolved = resolve_string(r.column_int(kOpRow["op"]), *o.mutable_op());
      unpack_op_codes(r.column_int(kOpRow["codes"]), o);
      unpack_input_dtypes(r.column_int(kOpRow["input_dtypes"]), o);
      o.set_cpu_duration_ns(static_cast<uint64_t>(r.column_int(kOpRow["cpu_duration_ns"])));
      if (const int64_t location = r.column_int(kOpRow["location"]); resolved.ok() && location != 0)
        resolved = resolve_location(location, *o.mutable_location());
      unpack_device_mask(r.column_int(kOpRow["autocast_enabled"]), o);
      o.set_autocast_nesting(static_cast<uint32_t>(r.column_int(kOpRow["autocast_nesting"])));
      unpack_gemm(r.column_int(kOpRow["gemm"]), o);
    } else {
      v1::CacheSample& sample = *stored.mutable_event()->mutable_cache_sample();
      sample.set_seq(seq_of_row(r.column_int(kSampleRow["id"])));
      sample.set_ts_ns(static_cast<uint64_t>(r.column_int(kSampleRow["ts_ns"])));
      sample.set_trigger(static_cast<v1::CacheSample::Trigger>(r.column_int(kSampleRow["trigger"])));
      sample.set_iteration(static_cast<uint64_t>(r.column_int(kSampleRow["iteration"])));
      sample.set_live_casts(static_cast<uint64_t>(r.column_int(kSampleRow["live_casts"])));
      sample.set_live_bytes(static_cast<uint64_t>(r.column_int(kSampleRow["live_bytes"])));
      sample.set_orphaned_casts(static_cast<uint64_t>(r.column_int(kSampleRow["orphaned_casts"])));
      sample.set_orphaned_bytes(static_cast<uint64_t>(r.column_int(kSampleRow["orphaned_bytes"])));
      sample.set_cache_hits(static_cast<uint64_t>(r.column_int(kSampleRow["cache_hits"])));
      sample.set_released_casts(static_cast<uint64_t>(r.column_int(kSampleRow["released_casts"])));
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

  // The op filter becomes its string id (no such string: nothing matches); the
  // source filter a bound subquery on locations.
  SiteFilter site;
  const bool by_site = !filter.op().empty() || !filter.file().empty();
  if (!filter.op().empty()) {
    Statement find;
    if (Status s = Statement::prepare(db_.handle(), kStringId.select_sql() + " WHERE text = ?", find); !s.ok())
      return db_.error(s.message());
    find.bind_text(1, filter.op());
    Status error;
    if (!find.step(error)) return error;  // no such op: nothing matches
    site.op = find.column_int(kStringId["id"]);
  }
  site.file = filter.file();
  site.line = filter.file().empty() ? 0 : filter.line();

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
      if (Status s = read_kind(kind, agent, site, filter.after_seq(), static_cast<uint32_t>(wanted), rows); !s.ok())
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
  if (Status s = Statement::prepare(db_.handle(), kBatchSequence.select_sql() + " WHERE agent = ? ORDER BY sequence",
                                    statement);
      !s.ok())
    return db_.error(s.message());
  statement.bind(1, agents.front().id);
  Status error;
  while (statement.step(error))
    out.add_batch_sequences(static_cast<uint64_t>(statement.column_int(kBatchSequence["sequence"])));
  return error.ok() ? Status() : db_.error(error.message());
}

Status StoreReader::list_findings(const v1::ListFindingsRequest& request, v1::ListFindingsResponse& out) {
  ReadTransaction transaction(db_);
  // Run row -> run_id, for the runs asked about.
  std::unordered_map<int64_t, std::string> run_ids;
  Statement runs;
  if (Status s = Statement::prepare(db_.handle(),
                                    kRunRow.select_sql() + (request.run_id().empty() ? "" : " WHERE run_id = ?"), runs);
      !s.ok())
    return db_.error(s.message());
  if (!request.run_id().empty()) runs.bind_text(1, request.run_id());
  Status error;
  while (runs.step(error)) run_ids.emplace(runs.column_int(kRunRow["id"]), runs.column_text(kRunRow["run_id"]));
  if (!error.ok()) return db_.error(error.message());
  if (run_ids.empty()) return {};

  Statement statement;
  if (Status s = Statement::prepare(
          db_.handle(), kFindingRow.select_sql() + (request.run_id().empty() ? " ORDER BY id" : " WHERE run = ? ORDER BY id"),
          statement);
      !s.ok())
    return db_.error(s.message());
  if (!request.run_id().empty()) statement.bind(1, run_ids.begin()->first);
  while (statement.step(error)) {
    const Statement& f = statement;
    const auto run = run_ids.find(f.column_int(kFindingRow["run"]));
    if (run == run_ids.end()) continue;  // findings reference runs; never taken
    v1::Finding& finding = *out.add_findings();
    finding.set_id(std::to_string(f.column_int(kFindingRow["id"])));
    finding.set_run_id(run->second);
    finding.set_kind(f.column_text(kFindingRow["kind"]));
    finding.set_severity(f.column_text(kFindingRow["severity"]));
    finding.set_summary(f.column_text(kFindingRow["summary"]));
    finding.set_details_json(f.column_text(kFindingRow["details_json"]));
  }
  return error.ok() ? Status() : db_.error(error.message());
}

Status StoreReader::totals(Totals& out) {
  ReadTransaction transaction(db_);
  out = {};
  Status error;
  Statement findings;
  if (Status s = Statement::prepare(db_.handle(), "SELECT kind, severity, count(*) FROM findings GROUP BY kind, severity",
                                    findings);
      !s.ok())
    return db_.error(s.message());
  while (findings.step(error)) out.findings[{findings.column_text(0), findings.column_text(1)}] = findings.column_int(2);
  if (!error.ok()) return db_.error(error.message());
  Statement agents;
  if (Status s = Statement::prepare(db_.handle(),
                                    "SELECT coalesce(sum(events_dropped_total), 0), count(*) FROM agents",
                                    agents);
      !s.ok())
    return db_.error(s.message());
  if (agents.step(error)) {
    out.agent_events_dropped = agents.column_int(0);
    out.agents = agents.column_int(1);
  }
  if (!error.ok()) return db_.error(error.message());
  Statement runs;
  if (Status s = Statement::prepare(db_.handle(), "SELECT count(*) FROM runs", runs); !s.ok()) return db_.error(s.message());
  if (runs.step(error)) out.runs = runs.column_int(0);
  return error.ok() ? Status() : db_.error(error.message());
}

}  // namespace castscope::collector
