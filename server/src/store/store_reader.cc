#include "server/src/store/store_reader.h"

#include <algorithm>
#include <type_traits>

#include "castscope/v1/events.names.h"
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

constexpr auto kStringId = schema::columns(schema::kStrings, {"id"});
constexpr auto kBatchSequence = schema::columns(schema::kBatches, {"sequence"});
constexpr auto kFindingRow =
    schema::columns(schema::kFindings, {"id", "run", "kind", "severity", "summary", "details_json"});

uint64_t seq_of(const v1::Event& event) {
  uint64_t seq = 0;
  v1::names::visit_kind(event, [&seq](const auto& member) {
    if constexpr (requires { member.seq(); }) seq = member.seq();
  });
  return seq;
}

}  // namespace

Status StoreReader::open(const std::string& path, std::unique_ptr<StoreReader>& out) {
  auto reader = std::unique_ptr<StoreReader>(new StoreReader());
  if (Status s = reader->db_.open(path, Database::Mode::kReadOnly); !s.ok()) return s;
  reader->resolver_.attach(reader->db_.handle());
  out = std::move(reader);
  return {};
}

Status StoreReader::list_runs(v1::ListRunsResponse& out) {
  ReadTransaction transaction(db_);
  std::vector<StoredRun> runs;
  if (Status s = collector::list_runs(db_.handle(), runs); !s.ok()) return db_.error(s.message());
  for (const StoredRun& stored : runs) {
    v1::RunSummary& run = *out.add_runs();
    run.set_run_id(stored.run_id);
    run.set_first_seen_unix_ns(stored.first_seen_unix_ns);
    run.set_last_seen_unix_ns(stored.last_seen_unix_ns);
    std::vector<StoredAgent> agents;
    if (Status s = read_agents(db_.handle(), stored.row, "", agents); !s.ok()) return db_.error(s.message());
    for (const StoredAgent& a : agents) {
      v1::AgentSummary& agent = *run.add_agents();
      v1::AgentIdentity& identity = *agent.mutable_identity();
      identity.set_run_id(run.run_id());
      identity.set_agent_id(a.agent_id);
      identity.set_pid(a.pid);
      identity.set_rank(a.rank);
      identity.set_local_rank(a.local_rank);
      identity.set_world_size(a.world_size);
      identity.set_hostname(a.hostname);
      identity.set_torch_version(a.torch_version);
      identity.set_command(a.command);
      identity.set_policy_hash(a.policy_hash);
      identity.set_castscope_version(a.castscope_version);
      for (const std::string& file : a.policy_files) identity.add_policy_files(file);
      identity.set_aggregate(a.aggregate);
      agent.set_batches(a.batches);
      agent.set_casts(a.casts);
      agent.set_ops(a.ops);
      agent.set_cache_samples(a.cache_samples);
      agent.set_events_recorded_total(a.events_recorded);
      agent.set_events_dropped_total(a.events_dropped);
      agent.set_first_sequence(a.first_sequence);
      agent.set_last_sequence(a.last_sequence);
      agent.set_missing_sequences(a.missing_batches());
      agent.set_finished(a.finished);
      agent.set_kernels(a.kernels);
      agent.set_numerics(a.numerics);
      agent.set_gpu_timing(a.gpu_timing);
      agent.set_gpu_records_dropped(a.gpu_records_dropped);
    }
  }
  return {};
}

Status StoreReader::find_run(const std::string& run_id, int64_t& run) {
  StoredRun stored;
  bool found = false;
  if (Status s = collector::find_run(db_.handle(), run_id, stored, found); !s.ok()) return db_.error(s.message());
  run = found ? stored.row : 0;
  return {};
}

Status StoreReader::find_agents(const std::string& run_id, const std::string& agent_id, std::vector<StoredAgent>& out,
                                AgentColumns columns) {
  int64_t run = 0;
  if (Status s = find_run(run_id, run); !s.ok() || run == 0) return s;
  const Status s = columns == AgentColumns::kKeys ? read_agent_keys(db_.handle(), run, agent_id, out)
                                                  : read_agents(db_.handle(), run, agent_id, out);
  if (!s.ok()) return db_.error(s.message());
  return {};
}

namespace {

// Rows of one kind (Row) into StoredEvents, through the codec.
template <typename Row, typename Event>
Status read_rows(Database& db, RowScan<Row>& scan, StoreResolver& resolver, const std::string& agent_id,
                 Event* (v1::Event::*mutable_event)(), std::vector<v1::StoredEvent>& out) {
  Row row;
  Status error;
  while (scan.next(row, error)) {
    v1::StoredEvent& stored = out.emplace_back();
    stored.set_agent_id(agent_id);
    Event& event = *(stored.mutable_event()->*mutable_event)();
    if constexpr (std::is_same_v<Row, StoredCacheSample>) {
      to_event(row, event);
    } else if (Status s = to_event(row, resolver, event); !s.ok()) {
      return s;
    }
  }
  return error.ok() ? Status() : db.error(error.message());
}

}  // namespace

Status StoreReader::read_kind(v1::EventFilter::Kind kind, const StoredAgent& agent, const SiteFilter& site,
                              uint64_t after_seq, uint32_t limit, std::vector<v1::StoredEvent>& out) {
  // One of a fixed set of statements (kind x op filter x site filter); values are bound.
  std::string rest;
  if (site.op != 0) rest += " AND op = ?";
  if (!site.file.empty()) rest += " AND location IN (SELECT id FROM locations WHERE file = ? AND (? = 0 OR line = ?))";
  rest += " ORDER BY id LIMIT ?";
  auto read = [&](auto& scan, auto mutable_event) -> Status {
    // Seqs after `after_seq`: ids from the next one to the agent's end.
    if (Status s = scan.open(db_.handle(), event_row_id(agent.row, std::min(after_seq, kMaxRowSeq)) + 1,
                             end_row_of(agent.row), rest);
        !s.ok())
      return db_.error(s.message());
    Statement& rows = scan.statement();
    int param = 3;
    if (site.op != 0) rows.bind(param++, site.op);
    if (!site.file.empty()) {
      rows.bind_text(param++, site.file);
      rows.bind(param++, site.line);
      rows.bind(param++, site.line);
    }
    rows.bind(param, limit);
    return read_rows(db_, scan, resolver_, agent.agent_id, mutable_event, out);
  };
  if (kind == v1::EventFilter::KIND_CAST) {
    RowScan<StoredCast> scan;
    return read(scan, &v1::Event::mutable_cast);
  }
  if (kind == v1::EventFilter::KIND_OP) {
    RowScan<StoredOp> scan;
    return read(scan, &v1::Event::mutable_op);
  }
  RowScan<StoredCacheSample> scan;
  return read(scan, &v1::Event::mutable_cache_sample);
}

Status StoreReader::query_events(const v1::EventFilter& filter, v1::QueryEventsResponse& out) {
  if (filter.run_id().empty()) return Status::invalid_argument("EventFilter.run_id is required");
  ReadTransaction transaction(db_);
  resolver_.clear();
  const uint32_t limit = filter.limit() == 0 ? kMaxQueryEvents : std::min(filter.limit(), kMaxQueryEvents);

  std::vector<StoredAgent> agents;
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

  for (const StoredAgent& agent : agents) {
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
  std::vector<StoredAgent> agents;
  if (Status s = find_agents(request.run_id(), request.agent_id(), agents); !s.ok()) return s;
  if (agents.empty()) return {};
  Statement statement;
  if (Status s = Statement::prepare(db_.handle(), kBatchSequence.select_sql() + " WHERE agent = ? ORDER BY sequence",
                                    statement);
      !s.ok())
    return db_.error(s.message());
  statement.bind(1, agents.front().row);
  Status error;
  while (statement.step(error))
    out.add_batch_sequences(static_cast<uint64_t>(statement.column_int(kBatchSequence["sequence"])));
  return error.ok() ? Status() : db_.error(error.message());
}

Status StoreReader::list_findings(const v1::ListFindingsRequest& request, v1::ListFindingsResponse& out) {
  ReadTransaction transaction(db_);
  // Run row -> run_id, for the runs asked about.
  std::unordered_map<int64_t, std::string> run_ids;
  std::vector<StoredRun> runs;
  Status found = Status();
  if (request.run_id().empty()) {
    found = collector::list_runs(db_.handle(), runs);
  } else {
    bool stored = false;
    found = collector::find_run(db_.handle(), request.run_id(), runs.emplace_back(), stored);
    if (!stored) runs.clear();
  }
  if (!found.ok()) return db_.error(found.message());
  for (const StoredRun& run : runs) run_ids.emplace(run.row, run.run_id);
  Status error;
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

Status StoreReader::batch_losses(int64_t agent_row, std::vector<BatchLoss>& out, int64_t& last_dropped, bool& known) {
  out.clear();
  last_dropped = 0;
  known = db_.schema_version() >= 21;  // older: no times in its batches
  if (!known) return {};
  ReadTransaction transaction(db_);
  Statement batches;
  if (Status s = Statement::prepare(db_.handle(),
                                    "SELECT sequence, events_dropped_total, first_ts_ns, last_ts_ns FROM batches "
                                    "WHERE agent = ? ORDER BY sequence",
                                    batches);
      !s.ok())
    return db_.error(s.message());
  batches.bind(1, agent_row);
  int64_t prev_sequence = -1, known_ts = 0;  // known_ts: the last event time so far (0: none yet)
  BatchLoss pending;                          // losses before any event time: placed at the first one
  Status error;
  while (batches.step(error)) {
    const int64_t sequence = batches.column_int(0), dropped_total = batches.column_int(1);
    const int64_t first_ts = batches.column_int(2), last_ts = batches.column_int(3);
    if (dropped_total < 0) {  // stored before version 21 (the upgrade marked it)
      known = false;
      out.clear();
      return {};
    }
    pending.events_dropped += std::max<int64_t>(0, dropped_total - last_dropped);
    if (prev_sequence >= 0) pending.batches_missing += std::max<int64_t>(0, sequence - prev_sequence - 1);
    last_dropped = std::max(last_dropped, dropped_total);
    prev_sequence = sequence;
    if (pending.events_dropped == 0 && pending.batches_missing == 0) {
      if (last_ts > 0) known_ts = last_ts;
      continue;
    }
    // Drops happened while this batch's events were recorded; a lost batch,
    // between the last event before it and this batch's first.
    const int64_t t0 = known_ts > 0 ? known_ts : first_ts;
    const int64_t t1 = pending.events_dropped > 0 && last_ts > 0 ? last_ts : (first_ts > 0 ? first_ts : t0);
    if (last_ts > 0) known_ts = last_ts;
    if (t0 <= 0) continue;  // no event time yet: carried to the next batch that has one
    pending.t0_ns = t0;
    pending.t1_ns = std::max(t0, t1);
    out.push_back(pending);
    pending = {};
  }
  if (pending.events_dropped > 0 || pending.batches_missing > 0) out.push_back(pending);  // no event time ever: t0 = t1 = 0
  return error.ok() ? Status() : db_.error(error.message());
}

Status StoreReader::finding_counts(std::map<std::string, std::map<std::string, int64_t>>& out) {
  ReadTransaction transaction(db_);
  out.clear();
  Statement counts;
  if (Status s = Statement::prepare(db_.handle(),
                                    "SELECT runs.run_id, findings.severity, count(*) FROM findings "
                                    "JOIN runs ON runs.id = findings.run GROUP BY findings.run, findings.severity",
                                    counts);
      !s.ok())
    return db_.error(s.message());
  Status error;
  while (counts.step(error)) out[counts.column_text(0)][counts.column_text(1)] = counts.column_int(2);
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
