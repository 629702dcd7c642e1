// Runs the analyzers while runs stream in. After each commit the writer
// thread says which runs got events; this thread re-analyzes each such run
// from the store (read-only, like `report`), at most every `interval` and no
// more often than ten times its last analysis took (a big run is not read
// over and over), every 30 s at most while ingest runs above 250k events/s,
// and at once when an agent of the run sends its final batch. New findings are logged; the run's rows of the findings table are
// replaced (through the writer thread) whenever the set of findings changes
// and at an agent's end, so ListFindings and `query findings` see them.
//
// The findings table is a view kept fresh for live readers; `castscope
// report` always analyzes what is stored at that moment.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "server/src/ingest/collector_core.h"

namespace castscope::collector {

class LiveAnalyzer {
 public:
  // `analyze_on_agent_end` false: an agent's last batch waits for the
  // interval like any other (loading a spool of many ranks).
  LiveAnalyzer(CollectorCore& core, std::chrono::milliseconds interval, bool analyze_on_agent_end = true);
  ~LiveAnalyzer();  // stop()
  LiveAnalyzer(const LiveAnalyzer&) = delete;
  LiveAnalyzer& operator=(const LiveAnalyzer&) = delete;

  // From the writer thread, after a commit: only marks the runs.
  void committed(const std::vector<CommittedRun>& runs);
  // Told (on the writer thread, once its findings are stored) that a run was
  // analyzed after one of its agents finished, or at stop: the fleet shipper
  // ships a run's end then. Set before batches arrive.
  void set_analyzed_listener(std::function<void(const std::string& run_id)> listener) {
    analyzed_listener_ = std::move(listener);
  }
  // Analyzes every run with unanalyzed events once more, queues their rows
  // for the writer, and stops the thread. Call before CollectorCore::shutdown.
  void stop();

 private:
  struct RunState {
    bool pending = false;  // events committed since the last analysis
    bool urgent = false;   // an agent finished: analyze now
    std::chrono::steady_clock::time_point last{};
    std::chrono::steady_clock::duration took{};
    std::set<std::string> ids;  // finding ids of the last analysis
  };

  void loop();
  // Returns false when the run could not be read (it stays pending).
  bool analyze(const std::string& run_id, RunState& state, bool store_anyway);

  CollectorCore& core_;
  const std::chrono::milliseconds interval_;
  const bool analyze_on_agent_end_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<std::string, RunState> runs_;
  bool stopping_ = false;
  uint64_t stored_at_last_tick_ = 0;  // CollectorCounters::events_stored: the ingest rate
  std::chrono::steady_clock::time_point last_tick_ = std::chrono::steady_clock::now();
  std::function<void(const std::string&)> analyzed_listener_;
  std::thread thread_;
};

}  // namespace castscope::collector
