#include "server/src/fleet/shipper.h"

#include <unistd.h>

#include <algorithm>
#include <future>
#include <map>
#include <random>
#include <span>
#include <tuple>
#include <unordered_map>
#include <unordered_set>

#include <absl/container/flat_hash_map.h>
#include <nlohmann/json.hpp>

#include "common/log/logger.h"
#include "server/src/fleet/fleet_rows.h"
#include "server/src/fleet/fleet_schema.h"
#include "server/src/fleet/pg_copy.h"
#include "server/src/ingest/collector_core.h"
#include "server/src/store/event_columns.h"
#include "server/src/store/row_codec.h"
#include "server/src/store/ship_rollups.h"
#include "server/src/store/store_reader.h"

namespace castscope::collector::fleet {

namespace v1 = castscope::v1;
using Clock = std::chrono::steady_clock;
using json = nlohmann::json;

namespace {

constexpr int64_t kAllMinutes = INT64_MAX / 2;
constexpr auto kRetryMin = std::chrono::seconds(1);
constexpr auto kRetryMax = std::chrono::seconds(30);
constexpr uint64_t kSettleNs = uint64_t{3} * 1000000000;
constexpr int64_t kAgentSnapshotEveryS = 60;

// Runs `task` on the writer thread and waits for its commit, after which
// this shipper's own connection sees what it wrote (bounded: a collector
// shutting down drops tasks, and says so).
Status on_writer(CollectorCore& core, std::function<Status(StoreWriter&)> task) {
  auto committed = std::make_shared<std::promise<Status>>();
  std::future<Status> result = committed->get_future();
  core.run_on_writer(std::move(task), [committed](const Status& s) { committed->set_value(s); });
  if (result.wait_for(std::chrono::seconds(60)) != std::future_status::ready)
    return Status::unavailable("the store's writer did not run the shipper's task in 60 s");
  return result.get();
}

int64_t unix_now_s() {
  return std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string host_name() {
  char name[256] = {};
  gethostname(name, sizeof(name) - 1);
  return name;
}

// A site as the store names it: location, op and argument ids.
using SiteIds = std::tuple<int64_t, int64_t, int64_t>;

// Agents of the store, by row, with their run.
struct AgentInfo {
  StoredAgent agent;
  StoredRun run;
};

}  // namespace

struct Shipper::State {
  CollectorCore& core;
  ShipperOptions options;
  std::unique_ptr<StoreReader> reader;
  PgConnection pg;
  std::string collector_id;
  int64_t next_shipment = 1;
  std::unordered_set<int64_t> known_sites;  // sites this connection has inserted
  std::unordered_map<int64_t, AgentInfo> agents;  // by agents.id, read each cycle
  std::map<std::string, std::string> shipped_ends;  // run -> the signature its shipped end covered
  std::map<std::string, int64_t> agents_shipped_at;  // run -> when its agents' snapshot last landed (unix s)

  std::mutex mutex;
  std::condition_variable wake;
  std::set<std::string> analyzed_runs;  // under mutex
  bool stopping = false;                 // under mutex
  std::string last_error;                // the thread's: what was last written to ship_state
  bool paused = false;                   // the thread's: the writer was told to stop rolling up

  State(CollectorCore& c, ShipperOptions o) : core(c), options(std::move(o)) {}

  CollectorMetrics::Shipping& metrics() { return core.metrics().shipping; }

  // A failed attempt: counted, and its message logged and kept in the store
  // (once per new message: retries of the same failure say nothing new).
  void set_error(const Status& s) {
    metrics().failures.fetch_add(1, std::memory_order_relaxed);
    metrics().up.store(false, std::memory_order_relaxed);
    if (last_error == s.message()) return;
    last_error = s.message();
    log::logger("collector").warn("fleet shipping: {}", s.message());
    core.run_on_writer([message = s.message()](StoreWriter& w) { return w.write_ship_state("last_error", message); });
  }

  Status read_state(std::string_view key, std::string& value) {
    return ship::read_state(reader->database().handle(), key, value);
  }

  Status load_agents() {
    std::vector<StoredRun> runs;
    if (Status s = list_runs(reader->database().handle(), runs); !s.ok()) return s;
    for (const StoredRun& run : runs) {
      std::vector<StoredAgent> found;
      if (Status s = read_agents(reader->database().handle(), run.row, {}, found); !s.ok()) return s;
      for (StoredAgent& a : found) agents[a.row] = AgentInfo{std::move(a), run};
    }
    return {};
  }

  // What a run's shipped end covered: its agents' stored events and batches.
  // A run whose agents have more now ends again.
  static std::string end_signature(uint64_t events) { return std::to_string(events); }

  // Runs whose agents here all finished, and whose end was not shipped with
  // what they have now (run -> signature): at once when the analyzer said so
  // (`analyzed`: their findings are stored), else once quiet for kSettleNs
  // (an agent's last batch may hold no event, and then no analysis follows).
  void runs_to_end(const std::set<std::string>& analyzed, bool all, std::map<std::string, std::string>& out) const {
    struct RunState {
      bool finished = true;
      uint64_t events = 0, last_seen_unix_ns = 0;
    };
    std::map<std::string, RunState> runs;
    for (const auto& [row, info] : agents) {
      RunState& run = runs[info.run.run_id];
      run.finished = run.finished && info.agent.finished;
      run.events += info.agent.events_stored() + info.agent.batches;
      run.last_seen_unix_ns = info.run.last_seen_unix_ns;
    }
    const auto now_ns = static_cast<uint64_t>(unix_now_s()) * 1000000000;
    for (const auto& [run_id, run] : runs) {
      const bool settled = now_ns >= run.last_seen_unix_ns + kSettleNs;
      if (!run.finished || !(all || settled || analyzed.contains(run_id))) continue;
      const std::string signature = end_signature(run.events);
      const auto shipped = shipped_ends.find(run_id);
      if (shipped == shipped_ends.end() || shipped->second != signature) out[run_id] = signature;
    }
  }

  // A connection is kept only once its schema version checked out: a failed
  // check closes it, so the next cycle connects and checks again (and says
  // the same thing) instead of shipping over an unchecked connection.
  Status connect() {
    if (pg.connected()) return {};
    known_sites.clear();
    if (Status s = pg.connect(options.target); !s.ok()) return s;
    Status checked = check_schema_version();
    if (!checked.ok()) pg.close();
    return checked;
  }

  Status check_schema_version() {
    PgResult version;
    if (Status s = pg.query("SELECT coalesce(max(version), 0) FROM castscope.schema_version", version); !s.ok())
      return Status::failed_precondition(s.message() + " (run `castscope fleet init URL` once as the database owner)");
    const int64_t found = version.integer(0, 0);
    if (found != kFleetSchemaVersion)
      return Status::failed_precondition("PostgreSQL " + pg.where() + ": fleet schema version " + std::to_string(found) +
                                         ", this collector ships version " + std::to_string(kFleetSchemaVersion) +
                                         " (run `castscope fleet init URL` with this release)");
    return {};
  }

  // One cycle: send a sealed shipment, or seal one and send it. `final`:
  // every minute, and every finished run's end. Returns whether there may be more.
  Status cycle(bool final, bool& more) {
    more = false;
    if (Status s = connect(); !s.ok()) return s;
    agents.clear();
    if (Status s = load_agents(); !s.ok()) return s;
    ship::Backlog backlog;
    if (Status s = ship::read_backlog(reader->database().handle(), backlog); !s.ok()) return s;
    if (backlog.first_sealed_shipment != 0) {
      more = true;
      return send(backlog.first_sealed_shipment);
    }
    std::set<std::string> candidates;
    {
      std::lock_guard lock(mutex);
      candidates.swap(analyzed_runs);
    }
    // The signatures are taken before sealing: events stored after this
    // read and sealed with the shipment make the run end again next cycle.
    std::map<std::string, std::string> ended;
    runs_to_end(candidates, final, ended);
    const int64_t now_minute = unix_now_s() / 60;
    const int64_t through = final || options.partial_minutes || !ended.empty() ? kAllMinutes : now_minute - 1;
    const int64_t shipment = next_shipment;
    int64_t sealed = 0;
    const auto sealing = Clock::now();
    if (Status s = on_writer(core,
                             [&](StoreWriter& writer) -> Status {
                               if (Status s = writer.seal_shipment(shipment, through, options.max_shipment_rows, sealed);
                                   !s.ok())
                                 return s;
                               // More rows than a shipment takes: the ends go with the last of them.
                               if (sealed == options.max_shipment_rows) ended.clear();
                               if (sealed == 0 && ended.empty()) return {};
                               if (Status s = writer.write_ship_state("next_shipment", std::to_string(shipment + 1));
                                   !s.ok())
                                 return s;
                               return writer.write_ship_state(ends_key(shipment), json(ended).dump());
                             });
        !s.ok()) {
      std::lock_guard lock(mutex);
      analyzed_runs.insert(candidates.begin(), candidates.end());
      return s;
    }
    if (sealed == options.max_shipment_rows) {  // the runs end with a later shipment
      std::lock_guard lock(mutex);
      analyzed_runs.insert(candidates.begin(), candidates.end());
    }
    if (sealed == 0 && ended.empty()) return {};
    log::logger("collector").debug("fleet shipping: shipment {}: {} rollup rows sealed in {} ms", shipment, sealed,
                                   std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - sealing).count());
    next_shipment = shipment + 1;
    more = true;
    return send(shipment);
  }

  static std::string ends_key(int64_t shipment) { return "ends:" + std::to_string(shipment); }

  Status agent_info(int64_t row, const AgentInfo*& out) {
    auto it = agents.find(row);
    if (it == agents.end()) {
      if (Status s = load_agents(); !s.ok()) return s;
      it = agents.find(row);
      if (it == agents.end()) return Status::internal("rollup of agent row " + std::to_string(row) + " not stored");
    }
    out = &it->second;
    return {};
  }

  // A shipment as read from the store, ready to send: send's steps fill it.
  struct Outgoing {
    int64_t shipment = 0;
    std::map<std::string, std::string> end_signature;  // the runs it ends -> what each end covers
    std::vector<std::string> ended;                    // those runs
    PgCopyBuffer rollups;
    std::vector<std::string> new_sites;      // SiteRow parameters: sites new to this connection
    std::map<SiteIds, int64_t> site_of_key;  // this shipment's sites
    std::set<std::string> runs_touched;      // ended or rolled up; after add_agents, those snapshotted
    int64_t min_minute = INT64_MAX, max_minute = 0;
    int64_t snapshot_s = 0;  // when its agents were read (unix s)
    PgCopyBuffer agent_rows;
    PgCopyBuffer finding_rows;
    std::map<std::string, int> finding_counts;  // per run ended
  };

  // Sends sealed shipment `shipment`: read from the store, then landed in
  // one PostgreSQL transaction, then forgotten here.
  Status send(int64_t shipment) {
    const auto started = Clock::now();
    Outgoing out;
    out.shipment = shipment;
    if (Status s = read_ends(out); !s.ok()) return s;
    if (Status s = add_rollups(out); !s.ok()) return s;
    add_agents(out);
    if (Status s = add_findings(out); !s.ok()) return s;
    const auto read = Clock::now();
    if (Status s = ensure_partitions(out); !s.ok()) return s;
    bool landed_before = false;
    if (Status s = land(out, landed_before); !s.ok()) return s;
    if (landed_before) {  // only forgotten here
      metrics().resent.fetch_add(1, std::memory_order_relaxed);
      return forget(shipment, out.end_signature);
    }
    for (const std::string& run_id : out.runs_touched) agents_shipped_at[run_id] = out.snapshot_s;
    metrics().shipments.fetch_add(1, std::memory_order_relaxed);
    metrics().rollup_rows.fetch_add(out.rollups.rows(), std::memory_order_relaxed);
    const auto landed = Clock::now();
    const Status forgotten = forget(shipment, out.end_signature);
    const auto ms = [](Clock::duration d) { return std::chrono::duration_cast<std::chrono::milliseconds>(d).count(); };
    log::logger("collector").debug("fleet shipping: shipment {}: {} rollup rows, {} run ends: read {} ms, "
                                   "PostgreSQL {} ms, forgotten {} ms",
                                   shipment, out.rollups.rows(), out.ended.size(), ms(read - started),
                                   ms(landed - read), ms(Clock::now() - landed));
    return forgotten;
  }

  // The runs the shipment ends, with what each end covers (sealed with it).
  Status read_ends(Outgoing& out) {
    std::string ends_text;
    if (Status s = read_state(ends_key(out.shipment), ends_text); !s.ok()) return s;
    const json ends_json = json::parse(ends_text.empty() ? "{}" : ends_text, nullptr, false);
    if (!ends_json.is_object())
      return Status::internal("ship_state " + ends_key(out.shipment) + " is not a JSON object: " + ends_text);
    out.end_signature = ends_json.get<std::map<std::string, std::string>>();
    for (const auto& [run_id, signature] : out.end_signature) out.ended.push_back(run_id);
    out.runs_touched.insert(out.ended.begin(), out.ended.end());
    return {};
  }

  // The shipment's rollup rows summed per key and minute: each commit
  // appended its own rows, one row per key and minute is sent.
  Status sum_rollups(int64_t shipment, absl::flat_hash_map<ship::RollupKey, ship::RollupCounts>& summed) {
    sqlite3* db = reader->database().handle();
    int64_t first = 0, end = 0;
    if (Status s = ship::shipment_ids(db, shipment, first, end); !s.ok()) return s;
    RowScan<StoredRollup> scan;
    if (Status s = scan.open(db, first, end, " AND shipment = ?3 ORDER BY id"); !s.ok()) return s;
    scan.statement().bind(3, shipment);
    StoredRollup row;
    Status error;
    while (scan.next(row, error)) {
      ship::RollupCounts& sum =
          summed[ship::RollupKey{row.agent, row.minute, row.op, row.arg_name, row.location, row.codes}];
      sum.count += row.count;
      sum.bytes += row.bytes;
      sum.hits += row.hits;
      sum.misses += row.misses;
      sum.stale_hits += row.stale_hits;
    }
    return error;
  }

  // A site per (location, op, arg) of the store, hashed once per shipment;
  // one this connection has not inserted goes with the shipment.
  Status site_of(const ship::RollupKey& key, StoreResolver& resolver, Outgoing& out, int64_t& site) {
    const SiteIds site_key{key.location, key.op, key.arg_name};
    auto found = out.site_of_key.find(site_key);
    if (found == out.site_of_key.end()) {
      std::string_view op, arg;
      const StoredLocation* location = nullptr;
      if (Status s = resolver.text(key.op, op); !s.ok()) return s;
      if (Status s = resolver.text(key.arg_name, arg); !s.ok()) return s;
      if (Status s = resolver.location(key.location, location); !s.ok()) return s;
      const std::string file = location ? location->file : "";
      const uint32_t line = location ? location->line : 0;
      const std::string function = location ? location->function : "";
      const int64_t id = site_id(file, line, function, op, arg);
      found = out.site_of_key.emplace(site_key, id).first;
      if (known_sites.insert(id).second) append_params(SiteRow{id, file, line, function, op, arg}, out.new_sites);
    }
    site = found->second;
    return {};
  }

  // The shipment's rollups, resolved into sites, as rows of castscope.rollups.
  Status add_rollups(Outgoing& out) {
    absl::flat_hash_map<ship::RollupKey, ship::RollupCounts> summed;
    if (Status s = sum_rollups(out.shipment, summed); !s.ok()) return s;
    StoreResolver resolver(reader->database().handle());
    for (const auto& [key, sum] : summed) {
      const AgentInfo* info = nullptr;
      if (Status s = agent_info(key.agent, info); !s.ok()) return s;
      out.runs_touched.insert(info->run.run_id);
      RollupRow row;
      if (Status s = site_of(key, resolver, out, row.site); !s.ok()) return s;
      out.min_minute = std::min(out.min_minute, key.minute);
      out.max_minute = std::max(out.max_minute, key.minute);
      row.minute = {key.minute * ship::kNsPerMinute};
      row.collector = collector_id;
      row.shipment = out.shipment;
      row.job = info->run.run_id;
      row.rank = info->agent.rank;
      const auto code = [codes = key.codes](int index) { return static_cast<int16_t>(code_at(codes, index)); };
      row.policy = code(kCastPolicy);
      row.src = code(kCastSrcDtype);
      row.dst = code(kCastDstDtype);
      row.outcome = code(kCastOutcome);
      row.device = code(kCastDeviceType);
      row.role = code(kCastRole);
      row.mode = code(kCastMode);
      row.phase = code(kCastPhase);
      row.count = sum.count;
      row.bytes = sum.bytes;
      row.hits = sum.hits;
      row.misses = sum.misses;
      row.stale_hits = sum.stale_hits;
      append_row(out.rollups, row);
    }
    return {};
  }

  // Agents of the runs touched, as snapshots (the latest wins): each run's
  // at most once a minute, and at its end.
  void add_agents(Outgoing& out) {
    out.snapshot_s = unix_now_s();
    std::erase_if(out.runs_touched, [&](const std::string& run_id) {
      const auto shipped = agents_shipped_at.find(run_id);
      return shipped != agents_shipped_at.end() && out.snapshot_s - shipped->second < kAgentSnapshotEveryS &&
             !out.end_signature.contains(run_id);
    });
    for (const auto& [row, info] : agents) {
      if (!out.runs_touched.contains(info.run.run_id)) continue;
      const StoredAgent& a = info.agent;
      append_row(out.agent_rows, AgentRow{.collector = collector_id,
                                          .shipment = out.shipment,
                                          .job = info.run.run_id,
                                          .agent_id = a.agent_id,
                                          .node = options.node,
                                          .rank = a.rank,
                                          .local_rank = a.local_rank,
                                          .world_size = a.world_size,
                                          .pid = static_cast<int32_t>(a.pid),
                                          .torch_version = a.torch_version,
                                          .policy_hash = a.policy_hash,
                                          .casts = static_cast<int64_t>(a.casts),
                                          .ops = static_cast<int64_t>(a.ops),
                                          .events_dropped = static_cast<int64_t>(a.events_dropped),
                                          .finished = a.finished,
                                          .first_seen = {static_cast<int64_t>(info.run.first_seen_unix_ns)},
                                          .last_seen = {static_cast<int64_t>(info.run.last_seen_unix_ns)},
                                          .viewer = options.viewer_url});
    }
  }

  // The findings of the runs the shipment ends: file and line are the first
  // site's, ranks the finding's (when its details have them).
  Status add_findings(Outgoing& out) {
    for (const std::string& run_id : out.ended) {
      v1::ListFindingsRequest request;
      request.set_run_id(run_id);
      v1::ListFindingsResponse response;
      if (Status s = reader->list_findings(request, response); !s.ok()) return s;
      for (const v1::Finding& f : response.findings()) {
        const json details = json::parse(f.details_json(), nullptr, false);
        std::string file;
        int32_t line = 0;
        json ranks = json::array();
        if (details.is_object()) {
          if (details.contains("sites") && details["sites"].is_array() && !details["sites"].empty()) {
            const json& site = details["sites"][0];
            file = site.value("file", "");
            line = site.value("line", 0);
          }
          if (details.contains("ranks")) ranks = details["ranks"];
        }
        const std::string ranks_text = ranks.dump();
        const std::string_view details_text = details.is_discarded() ? std::string_view("{}") : f.details_json();
        append_row(out.finding_rows, FindingRow{.collector = collector_id,
                                                .shipment = out.shipment,
                                                .job = run_id,
                                                .kind = f.kind(),
                                                .severity = f.severity(),
                                                .summary = f.summary(),
                                                .file = file,
                                                .line = line,
                                                .ranks = ranks_text,
                                                .details = details_text});
        ++out.finding_counts[run_id];
      }
    }
    return {};
  }

  // The day partitions the shipment's minutes fall in, through today (their
  // own transaction, before the shipment's).
  Status ensure_partitions(const Outgoing& out) {
    const int64_t now_ns = unix_now_s() * 1000000000;
    const int64_t first_ns = out.min_minute == INT64_MAX ? now_ns : out.min_minute * ship::kNsPerMinute;
    const int64_t last_ns = std::max(now_ns, out.max_minute * ship::kNsPerMinute);
    const auto to_text = [](int64_t unix_ns) { return std::to_string(unix_ns / 1000000000); };
    PgResult ignored;
    const std::string days[] = {to_text(first_ns), to_text(last_ns)};
    return pg.query("SELECT castscope.ensure_days(to_timestamp($1), to_timestamp($2))", days, ignored);
  }

  // The shipment in one PostgreSQL transaction: all of it lands, or none.
  // `landed_before`: PostgreSQL had it already (rolled back here, not an error).
  Status land(Outgoing& out, bool& landed_before) {
    landed_before = false;
    if (Status s = pg.exec("BEGIN"); !s.ok()) return s;
    Status result = transmit(out);
    if (!result.ok() && result.code() == StatusCode::kNotFound) {
      (void)pg.exec("ROLLBACK");
      landed_before = true;
      return {};
    }
    if (result.ok()) result = pg.exec("COMMIT");
    if (!result.ok()) {
      if (pg.connected()) (void)pg.exec("ROLLBACK");
      known_sites.clear();  // inserted sites may have been rolled back
    }
    return result;
  }

  // Within the transaction. NOT_FOUND: the shipment landed before.
  Status transmit(Outgoing& out) {
    PgResult began;
    // through_minute: the shipment's last minute (0 when it has no rollups).
    const std::string begin_params[] = {collector_id, std::to_string(out.shipment), std::to_string(out.max_minute),
                                        std::to_string(out.rollups.rows())};
    if (Status s = pg.query("SELECT castscope.begin_shipment($1, $2::bigint, $3::bigint, $4::bigint)", begin_params,
                            began);
        !s.ok())
      return s;
    if (began.text(0, 0) != "t") return Status::not_found("landed");
    if (Status s = insert_sites(out.new_sites); !s.ok()) return s;
    if (out.rollups.rows() > 0)
      if (Status s = pg.copy_in(copy_sql<RollupRow>(), out.rollups.finish()); !s.ok()) return s;
    if (out.agent_rows.rows() > 0)
      if (Status s = pg.copy_in(copy_sql<AgentRow>(), out.agent_rows.finish()); !s.ok()) return s;
    if (out.finding_rows.rows() > 0)
      if (Status s = pg.copy_in(copy_sql<FindingRow>(), out.finding_rows.finish()); !s.ok()) return s;
    return end_jobs(out);
  }

  // Sites new to this connection, a thousand per INSERT (one that another
  // collector inserted first is skipped).
  Status insert_sites(const std::vector<std::string>& params) {
    constexpr size_t kPerRow = params_per_row<SiteRow>();
    constexpr size_t kRowsPerInsert = 1000;
    for (size_t at = 0; at < params.size(); at += kPerRow * kRowsPerInsert) {
      const size_t n = std::min(params.size() - at, kPerRow * kRowsPerInsert);
      PgResult inserted;
      if (Status s = pg.query(insert_sql<SiteRow>(n / kPerRow) + " ON CONFLICT DO NOTHING",
                              std::span<const std::string>(params).subspan(at, n), inserted);
          !s.ok())
        return s;
    }
    return {};
  }

  // The runs the shipment ends: each one's end, then its summary and
  // rank-divergence made again (castscope.job_ended).
  Status end_jobs(const Outgoing& out) {
    for (const std::string& run_id : out.ended) {
      int64_t first_seen_ns = 0;
      for (const auto& [row, info] : agents)
        if (info.run.run_id == run_id) first_seen_ns = static_cast<int64_t>(info.run.first_seen_unix_ns);
      const auto count = out.finding_counts.find(run_id);
      std::vector<std::string> params;
      append_params(JobEndRow{.collector = collector_id,
                              .shipment = out.shipment,
                              .job = run_id,
                              .first_seen = {first_seen_ns},
                              .ended_at = {},
                              .findings = count == out.finding_counts.end() ? 0 : count->second},
                    params);
      PgResult done;
      if (Status s = pg.query(insert_sql<JobEndRow>(1), params, done); !s.ok()) return s;
      const std::string job[] = {run_id};
      if (Status s = pg.query("SELECT castscope.job_ended($1)", job, done); !s.ok()) return s;
    }
    return {};
  }

  // PostgreSQL has `shipment`: its rows leave the store, and its ends are
  // recorded as shipped.
  Status forget(int64_t shipment, const std::map<std::string, std::string>& end_signature) {
    if (Status s = on_writer(core,
                             [&](StoreWriter& writer) -> Status {
                               if (Status s = writer.forget_shipment(shipment); !s.ok()) return s;
                               for (const auto& [run_id, signature] : end_signature)
                                 if (Status s = writer.write_ship_state(ended_key(run_id), signature); !s.ok())
                                   return s;
                               if (Status s = writer.write_ship_state("last_success_unix_s",
                                                                      std::to_string(unix_now_s()));
                                   !s.ok())
                                 return s;
                               if (Status s = writer.write_ship_state("last_error", ""); !s.ok()) return s;
                               return writer.write_ship_state(ends_key(shipment), "");
                             });
        !s.ok())
      return s;
    last_error.clear();
    for (const auto& [run_id, signature] : end_signature) shipped_ends[run_id] = signature;
    return {};
  }

  static std::string ended_key(const std::string& run_id) { return "ended:" + run_id; }

  // The backlog's figures, and its bound: past backlog_max_rows the writer
  // stops rolling up (counting what it leaves out) until below 90 % again.
  void update_backlog() {
    ship::Backlog backlog;
    sqlite3* db = reader->database().handle();
    if (!ship::read_backlog(db, backlog).ok()) return;
    metrics().backlog_rows.store(backlog.rows, std::memory_order_relaxed);
    metrics().lag_seconds.store(ship::lag_seconds(backlog, unix_now_s()), std::memory_order_relaxed);
    std::string not_shipped;
    if (read_state("events_not_shipped", not_shipped).ok() && !not_shipped.empty())
      metrics().events_not_shipped.store(std::stoull(not_shipped), std::memory_order_relaxed);
    const bool over = backlog.rows >= options.backlog_max_rows;
    const bool under = backlog.rows < options.backlog_max_rows / 10 * 9;
    if ((over && !paused) || (under && paused)) {
      paused = over;
      if (paused)
        log::logger("collector").warn("fleet shipping: {} rollup rows wait in the store (--ship-backlog-max-rows {}): "
                                      "new casts are counted, not shipped, until PostgreSQL takes the backlog",
                                      backlog.rows, options.backlog_max_rows);
      core.run_on_writer([pause = paused](StoreWriter& w) {
        w.pause_rollups(pause);
        return Status();
      });
    }
  }
};

Shipper::Shipper(CollectorCore& core, ShipperOptions options)
    : state_(std::make_unique<State>(core, std::move(options))) {}

Shipper::~Shipper() { stop(); }

Status Shipper::start(CollectorCore& core, const ShipperOptions& options, std::unique_ptr<Shipper>& out) {
  std::unique_ptr<Shipper> shipper(new Shipper(core, options));
  State& state = *shipper->state_;
  if (state.options.node.empty()) state.options.node = host_name();
  if (Status s = StoreReader::open(core.db_path(), state.reader); !s.ok()) return s;
  // The collector's id, made once per store: shipments are numbered per store.
  if (Status s = state.read_state("collector_id", state.collector_id); !s.ok()) return s;
  if (state.collector_id.empty()) {
    std::random_device random;
    char suffix[17];
    snprintf(suffix, sizeof(suffix), "%08x%08x", random(), random());
    state.collector_id = state.options.node + "-" + suffix;
    const std::string id = state.collector_id;
    if (Status s = on_writer(core, [&](StoreWriter& w) { return w.write_ship_state("collector_id", id); }); !s.ok())
      return s;
  }
  if (Status s = ship::read_states(state.reader->database().handle(), "ended:", state.shipped_ends); !s.ok()) return s;
  std::string next;
  if (Status s = state.read_state("next_shipment", next); !s.ok()) return s;
  state.next_shipment = next.empty() ? 1 : std::stoll(next);
  state.metrics().enabled.store(true, std::memory_order_relaxed);
  shipper->thread_ = std::thread([s = shipper.get()] { s->loop(); });
  out = std::move(shipper);
  return {};
}

void Shipper::run_analyzed(const std::string& run_id) {
  {
    std::lock_guard lock(state_->mutex);
    state_->analyzed_runs.insert(run_id);
  }
  state_->wake.notify_all();
}

void Shipper::loop() {
  State& state = *state_;
  auto retry = std::chrono::milliseconds(kRetryMin);
  bool first = true;
  for (;;) {
    bool final = false;
    {
      std::unique_lock lock(state.mutex);
      final = state.stopping;
    }
    bool more = false;
    // At start, every finished run is a candidate: runs that ended while no
    // shipper ran, or before their end landed.
    Status s = state.cycle(final || first, more);
    state.update_backlog();
    if (!s.ok()) {
      state.set_error(s);
      if (final) return;
      std::unique_lock lock(state.mutex);
      state.wake.wait_for(lock, retry, [&] { return state.stopping; });
      retry = std::min<std::chrono::milliseconds>(retry * 2, kRetryMax);
      continue;
    }
    first = false;
    retry = kRetryMin;
    state.metrics().up.store(true, std::memory_order_relaxed);
    if (more) continue;
    if (final) return;
    std::unique_lock lock(state.mutex);
    state.wake.wait_for(lock, state.options.interval, [&] { return state.stopping || !state.analyzed_runs.empty(); });
  }
}

void Shipper::stop() {
  if (!thread_.joinable()) return;
  {
    std::lock_guard lock(state_->mutex);
    state_->stopping = true;
  }
  state_->wake.notify_all();
  thread_.join();
  state_->pg.close();
}


}  // namespace castscope::collector::fleet
