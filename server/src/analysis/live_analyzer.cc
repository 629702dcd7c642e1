#include "server/src/analysis/live_analyzer.h"

#include <pthread.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

#include "common/log/logger.h"
#include "server/src/analysis/analyzers.h"
#include "server/src/analysis/run_data.h"
#include "server/src/store/sqlite_store.h"

namespace castscope::collector {

using Clock = std::chrono::steady_clock;

namespace {
// Re-reading a run competes with ingest for the CPU, and its reads keep the
// WAL from being reset. Under heavy ingest (bench/collector_bench.py: 1.5 M
// events/s without live analysis, about 1.1 M with a pass every 2 s) a run
// is re-analyzed at most this often; an agent's end still triggers one.
constexpr double kHeavyIngestEventsPerSecond = 250'000;
constexpr auto kHeavyIngestSpacing = std::chrono::seconds(30);
}  // namespace

LiveAnalyzer::LiveAnalyzer(CollectorCore& core, std::chrono::milliseconds interval, bool analyze_on_agent_end)
    : core_(core), interval_(interval), analyze_on_agent_end_(analyze_on_agent_end), thread_([this] { loop(); }) {}

LiveAnalyzer::~LiveAnalyzer() { stop(); }

void LiveAnalyzer::committed(const std::vector<CommittedRun>& runs) {
  bool urgent = false;
  {
    std::lock_guard lock(mutex_);
    for (const CommittedRun& committed : runs) {
      auto [it, first] = runs_.try_emplace(committed.run_id);
      RunState& state = it->second;
      if (first) state.last = Clock::now();  // first analysis one spacing after the first events
      state.pending = true;
      state.urgent |= committed.agent_finished && analyze_on_agent_end_;
      urgent |= committed.agent_finished && analyze_on_agent_end_;
    }
  }
  if (urgent) wake_.notify_one();
}

void LiveAnalyzer::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_one();
  if (thread_.joinable()) thread_.join();
}

void LiveAnalyzer::loop() {
  pthread_setname_np(pthread_self(), "cs-analyzer");  // for perf and top -H
  // Ingest comes first: on a busy machine the analysis waits, not the agents.
  setpriority(PRIO_PROCESS, static_cast<id_t>(gettid()), 10);
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait_for(lock, interval_, [&] {
      return stopping_ || std::any_of(runs_.begin(), runs_.end(), [](const auto& run) { return run.second.urgent; });
    });
    const bool final_pass = stopping_;
    const auto now = Clock::now();
    const uint64_t stored = core_.counters().events_stored;
    const double seconds = std::chrono::duration<double>(now - last_tick_).count();
    const bool heavy_ingest = seconds > 0 && static_cast<double>(stored - stored_at_last_tick_) / seconds > kHeavyIngestEventsPerSecond;
    stored_at_last_tick_ = stored;
    last_tick_ = now;
    std::vector<std::string> due;
    for (const auto& [run_id, state] : runs_) {
      if (!state.pending) continue;
      // A run that takes long to read is read less often; so is every run while ingest is heavy.
      const auto spacing = std::max<Clock::duration>(
          heavy_ingest ? std::max<Clock::duration>(interval_, kHeavyIngestSpacing) : interval_, state.took * 10);
      if (final_pass || state.urgent || now - state.last >= spacing) due.push_back(run_id);
    }
    for (const std::string& run_id : due) {
      RunState& state = runs_[run_id];  // std::map: the reference outlives the unlock
      const bool urgent = state.urgent;
      state.pending = state.urgent = false;
      lock.unlock();
      const bool ok = analyze(run_id, state, urgent || final_pass);  // touches only last, took and ids
      lock.lock();
      if (!ok) {
        state.pending = true;
        state.urgent |= urgent;
      }
    }
    if (final_pass) return;
    // A run quiet for an hour is forgotten (it comes back if events do).
    std::erase_if(runs_, [&](const auto& run) {
      return !run.second.pending && now - run.second.last > std::chrono::hours(1);
    });
  }
}

bool LiveAnalyzer::analyze(const std::string& run_id, RunState& state, bool store_anyway) {
  const auto started = Clock::now();
  Database db;  // opened per analysis: cheap, and it reads the latest commit
  RunData run;
  Status status = db.open(core_.db_path(), Database::Mode::kReadOnly);
  // Between chunks, let a pending WAL checkpoint through (bounded): a long
  // re-read must not make the writer wait for the WAL (ingest latency).
  const auto yield_to_checkpoint = [this] {
    for (int waited = 0; waited < 100 && core_.checkpoint_behind(); ++waited)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
  };
  if (status.ok()) status = load_run_data(db, run_id, run, yield_to_checkpoint);
  if (!status.ok()) {
    log::logger("collector").warn("live analysis of run {}: {}", run_id, status.message());
    return false;
  }
  const std::vector<Finding> findings = analyze_run(run);
  state.last = Clock::now();
  state.took = state.last - started;
  core_.metrics().analyzer_passes.fetch_add(1, std::memory_order_relaxed);
  core_.metrics().analyzer_ns.fetch_add(
      static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(state.took).count()),
      std::memory_order_relaxed);
  log::logger("collector").debug("live analysis of run {}: {} sites, {} findings in {} ms", run_id, run.sites.size(),
                        findings.size(), std::chrono::duration_cast<std::chrono::milliseconds>(state.took).count());

  std::set<std::string> ids;
  std::vector<StoredFinding> rows;
  for (const Finding& f : findings) {
    ids.insert(f.id);
    rows.push_back({f.kind, f.severity, f.summary, finding_json(f).dump()});
    if (state.ids.contains(f.id)) continue;
    const SiteRef* site = f.sites.empty() ? nullptr : &f.sites.front();
    // At the finding's own level: an info finding (a clean job's cast share)
    // is not a warning, and the collector logs warnings and worse by default.
    const auto level = f.severity == "info"      ? spdlog::level::info
                       : f.severity == "warning" ? spdlog::level::warn
                                                 : spdlog::level::err;  // error, critical
    log::logger("collector").log(level, "run {}: finding [{}] {} at {}:{}: {}", run_id, f.severity, f.kind,
                                 site != nullptr ? site->file : "?", site != nullptr ? site->line : 0, f.summary);
  }
  if (ids == state.ids && !store_anyway) return true;
  state.ids = std::move(ids);
  core_.run_on_writer([this, run_id, rows = std::move(rows), tell = store_anyway](StoreWriter& writer) {
    Status s = writer.replace_findings(run_id, rows);
    // Told on the writer thread: a writer task queued by the listener runs
    // after this one's commit.
    if (s.ok() && tell && analyzed_listener_) analyzed_listener_(run_id);
    return s;
  });
  return true;
}

}  // namespace castscope::collector
