// What the viewer asks of the store (docs/viewer.md), without any transport:
// the HTTP adapter (service/http_service.h) and the tests call the same
// methods. Each answer is the JSON body of one route.
//
// Ranges at any zoom are answered from the timeline tiles (timeline_tiles.h):
// a level whose buckets are no wider than two pixels, about as many rows as the
// range has pixels; when few enough events fall in the range, they are read
// one by one through the tiles' seq bounds (a range of the events' key).
//
// Not thread-safe: one ViewerQueries per thread (ViewerQueryPool hands them
// out). Each reads through a StoreReader of its own (one read-only
// connection); under WAL it reads what is committed while the collector
// writes.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "castscope/v1/events.pb.h"
#include "server/src/status.h"
#include "server/src/store/sqlite_store.h"
#include "server/src/store/store_reader.h"
#include "server/src/store/timeline_tiles.h"
#include "server/src/viewer/json_writer.h"

namespace castscope::collector::viewer {

class LaneLocations;  // event_json.h

// At most this many events are sent one by one; past it, buckets.
inline constexpr int64_t kMaxRangeEvents = 5000;
// A range finer than the finest tiles is bucketed from its events when its
// tiles hold at most this many (about 100 ms of reading at worst); past it,
// the tiles as they are.
inline constexpr int64_t kMaxFineBucketEvents = 200000;
// At most this many numerics marks, and as many GradScaler points, per
// answer; past it, `truncated`.
inline constexpr int64_t kMaxNumericsRows = 10000;

// At most this many spans of lost events per process in /api/tracks; past
// it, neighbouring spans are merged.
inline constexpr size_t kMaxLossSpans = 1000;

// At most this many lanes in one /api/timeline request.
inline constexpr size_t kMaxStepTracks = 256;

struct RangeRequest {
  std::string run_id;
  std::string track;  // "<agent_id>/<track number>" as /api/tracks names it
  int64_t t0 = 0, t1 = 0;  // ns since the run's origin
  int pixels = 1000;
};
// Every lane the page shows, over one range: one request per view step.
struct StepRequest {
  std::string run_id;
  std::vector<std::string> tracks;  // each as RangeRequest::track
  int64_t t0 = 0, t1 = 0;
  int pixels = 1000;
};

class ViewerQueries {
 public:
  static Status open(const std::string& db_path, std::unique_ptr<ViewerQueries>& out);

  Status runs(nlohmann::json& out);
  Status tracks(const std::string& run_id, nlohmann::json& out);
  // One lane's answer (tests, tools): the "lanes" entry of timeline_text's.
  Status timeline(const RangeRequest& request, nlohmann::json& out);
  // Every requested lane over one range, as JSON text written without
  // building a tree (what GET /api/timeline sends; viewer-api.schema.json).
  Status timeline_text(const StepRequest& request, std::string& out);
  Status event(const std::string& run_id, const std::string& agent_id, uint64_t seq, nlohmann::json& out);
  Status counters(const std::string& run_id, int64_t t0, int64_t t1, int points, nlohmann::json& out);
  Status findings(const std::string& run_id, nlohmann::json& out);
  Status sites(const std::string& run_id, nlohmann::json& out);
  // The run's precision map (the report's precision_map): per module and parameter.
  Status modules(const std::string& run_id, nlohmann::json& out);
  // The run's GradScaler scale per agent (its changes and skipped steps) and
  // its numerics problems (casts that overflowed, underflowed or met NaN; ops
  // whose outputs went non-finite from finite inputs), each over its window.
  Status numerics(const std::string& run_id, nlohmann::json& out);

  // The run's origin (ns of the agents' clock): the start of its earliest
  // finest tile; 0 when it has no events yet. Live events are sent relative
  // to it too.
  Status origin(const std::string& run_id, int64_t& origin_ns);
  // Whole-store figures (/metrics).
  Status totals(StoreReader::Totals& out) { return reader_->totals(out); }

 private:
  using Agent = StoredAgent;
  using TrackSummary = tiles::TrackSummary;
  // What most answers start from, read once per request: the run's agents,
  // their tracks, and the origin derived from them.
  struct RunTracks {
    std::vector<Agent> agents;
    std::vector<std::vector<TrackSummary>> tracks;  // per agent
    int64_t origin_ns = 0;                          // 0: no events yet
    int64_t end_ns = 0;                             // the end of the last finest tile with events
    const Agent* agent(const std::string& agent_id) const;
  };

  explicit ViewerQueries(std::unique_ptr<StoreReader> reader) : reader_(std::move(reader)) {}
  Database& store() { return reader_->database(); }
  // `agents`: the agents' identities too (the tracks' labels), or their keys alone.
  Status load_run(const std::string& run_id, RunTracks& out,
                  StoreReader::AgentColumns agents = StoreReader::AgentColumns::kKeys);
  // A requested track, its name parsed.
  struct LaneTrack {
    const std::string* name = nullptr;  // as asked ("<agent_id>/<track number>")
    std::string agent_id;
    int64_t track = 0;
  };
  // The process's "losses" in /api/tracks: where its events were dropped or its batches lost.
  Status losses_json(const Agent& agent, const std::vector<TrackSummary>& tracks, int64_t origin, nlohmann::json& out);
  // One lane of timeline_text's answer, written into `w`.
  Status lane_text(const RunTracks& run, const LaneTrack& lane, int64_t t0, int64_t t1, int pixels, JsonWriter& w);
  // A range's events as three JSON arrays, and how many they hold; past
  // `limit` events it stops (count is then limit + 1, the lists unfinished).
  // With `lane`, the events are laid out for a timeline lane (event_json.h):
  // no agent id, locations as indexes into `lane`.
  struct EventLists {
    JsonWriter ops, casts, kernels;
    size_t count = 0;
    LaneLocations* lane = nullptr;
  };
  Status read_events(const Agent& agent, int64_t track, int64_t min_seq, int64_t max_seq, int64_t t0_abs,
                     int64_t t1_abs, int64_t origin, EventLists& out, size_t limit = SIZE_MAX);
  // The same range's events counted into buckets of 2^shift ns (absolute
  // bucket numbers): a range finer than the finest tiles, with too many
  // events to send one by one.
  Status fine_buckets(const Agent& agent, int64_t track, int64_t min_seq, int64_t max_seq, int64_t t0_abs,
                      int64_t t1_abs, int shift, std::map<int64_t, tiles::TileCounts>& out);
  template <typename OnOp, typename OnCast, typename OnKernel>
  Status scan_events(const Agent& agent, int64_t track, int64_t min_seq, int64_t max_seq, int64_t t0_abs,
                     int64_t t1_abs, OnOp&& on_op, OnCast&& on_cast, OnKernel&& on_kernel);

  std::unique_ptr<StoreReader> reader_;
  // The sites view reads a whole run: kept until the run's event count moves.
  struct CachedSites {
    int64_t events = -1;
    nlohmann::json body;
  };
  // An answer built from the run's RunData (sites, modules), kept while the
  // run's cast and op rows do not move: `out` from the cache (true), or
  // `events` to store with the answer made now (false).
  Status cached(const std::string& run_id, const std::map<std::string, CachedSites>& cache, nlohmann::json& out,
                bool& hit, int64_t& events);
  std::map<std::string, CachedSites> sites_cache_;
  std::map<std::string, CachedSites> modules_cache_;  // the same, for modules()
};

// ViewerQueries for request threads: a thread takes one (opening a new one
// when none is free) and gives it back; at most `max_idle` stay open.
class ViewerQueryPool {
 public:
  ViewerQueryPool(std::string db_path, size_t max_idle = 4) : db_path_(std::move(db_path)), max_idle_(max_idle) {}

  // Runs `use` with a ViewerQueries; a store that cannot be opened is the status.
  template <typename Use>
  Status with(Use&& use) {
    std::unique_ptr<ViewerQueries> q;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!idle_.empty()) {
        q = std::move(idle_.back());
        idle_.pop_back();
      }
    }
    if (!q)
      if (Status s = ViewerQueries::open(db_path_, q); !s.ok()) return s;
    Status status = use(*q);
    std::lock_guard<std::mutex> lock(mutex_);
    if (idle_.size() < max_idle_) idle_.push_back(std::move(q));
    return status;
  }

 private:
  const std::string db_path_;
  const size_t max_idle_;
  std::mutex mutex_;
  std::vector<std::unique_ptr<ViewerQueries>> idle_;
};

}  // namespace castscope::collector::viewer
