#include "server/src/viewer/viewer_queries.h"

#include <algorithm>
#include <array>
#include <filesystem>
#include <optional>
#include <set>
#include <tuple>

#include "common/numerics/no_magnitude.h"
#include "server/src/analysis/run_data.h"
#include "server/src/report/precision_map.h"
#include "server/src/store/numerics_problems.h"
#include "server/src/store/row_codec.h"
#include "server/src/store/store_queries.h"
#include "server/src/store/store_schema.h"
#include "server/src/store/timeline_tiles.h"
#include "server/src/viewer/event_json.h"

namespace castscope::collector::viewer {

namespace v1 = castscope::v1;
using nlohmann::json;
namespace t = tiles;

namespace {

int severity_rank(const std::string& severity) {
  if (severity == "critical") return 0;
  if (severity == "error") return 1;
  if (severity == "warning") return 2;
  if (severity == "info") return 3;
  return 4;
}

// A run's stored findings by severity, every severity named (0 when none).
json finding_counts_json(const std::map<std::string, std::map<std::string, int64_t>>& counts, const std::string& run_id) {
  json out = {{"critical", 0}, {"error", 0}, {"warning", 0}, {"info", 0}};
  if (auto it = counts.find(run_id); it != counts.end())
    for (const auto& [severity, count] : it->second) out[severity] = count;
  return out;
}

std::string track_name(const std::string& agent_id, int64_t track) { return agent_id + "/" + std::to_string(track); }

// "agent/123" -> agent, 123. Agent ids may hold '/': the number is after the last.
bool parse_track(const std::string& text, std::string& agent_id, int64_t& track) {
  const size_t slash = text.rfind('/');
  if (slash == std::string::npos || slash == 0 || slash + 1 == text.size()) return false;
  track = 0;
  for (size_t i = slash + 1; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9' || track > (int64_t{1} << 50)) return false;
    track = track * 10 + (text[i] - '0');
  }
  agent_id = text.substr(0, slash);
  return true;
}

// Column lists of the viewer's reads (row_codec.h): what its JSON shows.
constexpr auto kViewerOpColumns = schema::columns(
    schema::kOps, {"id", "ts_ns", "thread", "op", "codes", "input_dtypes", "cpu_duration_ns", "location"});
constexpr auto kViewerCastColumns = schema::columns(
    schema::kCasts, {"id", "ts_ns", "op", "arg_name", "slot", "codes", "shape", "bytes", "op_seq", "location",
                     "source_version", "cached_version", "module", "parameter"});
constexpr auto kViewerKernelColumns = schema::columns(
    schema::kKernels, {"id", "ts_ns", "duration_ns", "name", "codes", "device", "stream", "launch_seq", "bytes"});
// Where one event is: its time, track and location.
constexpr auto kCastWhere = schema::columns(schema::kCasts, {"ts_ns", "slot", "location"});
constexpr auto kOpWhere = schema::columns(schema::kOps, {"ts_ns", "thread", "location"});
constexpr auto kKernelWhere = schema::columns(schema::kKernels, {"ts_ns", "device", "stream"});
constexpr auto kSampleSeries =
    schema::columns(schema::kCacheSamples, {"ts_ns", "trigger", "iteration", "live_casts", "live_bytes"});
constexpr auto kScalerPoint = schema::columns(
    schema::kNumerics, {"id", "first_ts_ns", "thread", "location", "iteration", "tensors", "scale_bits", "found_inf"});

// The coarsest level whose buckets are no wider than `pixel_ns` (at least the finest).
int level_no_wider_than(int64_t pixel_ns) {
  int level = 0;
  while (level + 1 < t::kTileLevels && t::bucket_ns(level + 1) <= pixel_ns) ++level;
  return level;
}

// The finest level whose buckets are at least `bucket_ns` wide (at most the coarsest).
int level_at_least(int64_t bucket_ns) {
  int level = 0;
  while (level + 1 < t::kTileLevels && t::bucket_ns(level) < bucket_ns) ++level;
  return level;
}

}  // namespace

Status ViewerQueries::open(const std::string& db_path, std::unique_ptr<ViewerQueries>& out) {
  std::unique_ptr<StoreReader> reader;
  if (Status s = StoreReader::open(db_path, reader); !s.ok()) return s;
  out = std::unique_ptr<ViewerQueries>(new ViewerQueries(std::move(reader)));
  return {};
}

const StoredAgent* ViewerQueries::RunTracks::agent(const std::string& agent_id) const {
  for (const Agent& a : agents)
    if (a.agent_id == agent_id) return &a;
  return nullptr;
}

Status ViewerQueries::load_run(const std::string& run_id, RunTracks& out, StoreReader::AgentColumns agents) {
  if (Status s = reader_->find_agents(run_id, "", out.agents, agents); !s.ok()) return s;
  if (out.agents.empty()) return Status::not_found("no run " + run_id + " in " + store().path());
  out.tracks.resize(out.agents.size());
  int64_t first = INT64_MAX, last = 0;
  for (size_t i = 0; i < out.agents.size(); ++i) {
    if (Status s = t::read_track_summaries(store(), out.agents[i].row, out.tracks[i]); !s.ok())
      return store().error(s.message());
    for (const TrackSummary& track : out.tracks[i]) {
      first = std::min(first, track.first_bucket);
      last = std::max(last, track.last_bucket + 1);
    }
  }
  if (first != INT64_MAX) {
    out.origin_ns = first << t::level_shift(0);
    out.end_ns = last << t::level_shift(0);
  }
  return {};
}

Status ViewerQueries::runs(json& out) {
  v1::ListRunsResponse response;
  if (Status s = reader_->list_runs(response); !s.ok()) return s;
  std::map<std::string, std::map<std::string, int64_t>> findings;
  if (Status s = reader_->finding_counts(findings); !s.ok()) return s;
  json runs = json::array();
  for (const v1::RunSummary& run : response.runs()) {
    json agents = json::array();
    bool live = false;
    for (const v1::AgentSummary& a : run.agents()) {
      live = live || !a.finished();
      const v1::AgentIdentity& id = a.identity();
      agents.push_back({{"agent_id", id.agent_id()},
                        {"pid", id.pid()},
                        {"rank", id.rank()},
                        {"local_rank", id.local_rank()},
                        {"world_size", id.world_size()},
                        {"hostname", id.hostname()},
                        {"command", id.command()},
                        {"torch_version", id.torch_version()},
                        {"castscope_version", id.castscope_version()},
                        {"batches", a.batches()},
                        {"missing_batches", a.missing_sequences()},
                        {"casts", a.casts()},
                        {"ops", a.ops()},
                        {"kernels", a.kernels()},
                        {"cache_samples", a.cache_samples()},
                        {"events_recorded", a.events_recorded_total()},
                        {"events_stored", a.casts() + a.ops() + a.kernels() + a.cache_samples() + a.numerics()},
                        {"events_dropped", a.events_dropped_total()},
                        {"gpu_timing", a.gpu_timing()},
                        {"gpu_records_dropped", a.gpu_records_dropped()},
                        {"finished", a.finished()},
                        {"aggregate", id.aggregate()}});  // counters only: no timeline of casts (docs/aggregate.md)
    }
    // Decimal strings, like origin_ns: Unix nanoseconds are past 2^53, where a JavaScript number is not exact.
    runs.push_back({{"run_id", run.run_id()},
                    {"first_seen_unix_ns", std::to_string(run.first_seen_unix_ns())},
                    {"last_seen_unix_ns", std::to_string(run.last_seen_unix_ns())},
                    {"live", live},
                    {"findings", finding_counts_json(findings, run.run_id())},
                    {"agents", agents}});
  }
  // The store's file, absolute: what `castscope view` opens once a job's own viewer has stopped.
  std::error_code ec;
  const std::filesystem::path store_path = std::filesystem::absolute(store().path(), ec);
  out = {{"runs", runs}, {"store", ec ? store().path() : store_path.string()}};
  return {};
}

Status ViewerQueries::origin(const std::string& run_id, int64_t& origin_ns) {
  RunTracks run;
  if (Status s = load_run(run_id, run); !s.ok()) return s;
  origin_ns = run.origin_ns;
  return {};
}

Status ViewerQueries::losses_json(const Agent& agent, const std::vector<TrackSummary>& tracks, int64_t origin,
                                  json& out) {
  out = json::array();
  std::vector<StoreReader::BatchLoss> losses;
  int64_t batches_dropped = 0;
  bool known = false;
  if (Status s = reader_->batch_losses(agent.row, losses, batches_dropped, known); !s.ok()) return s;
  if (!known || tracks.empty()) return {};  // nowhere to place them (the Runs page still counts them)
  // Drops counted after the last batch (an accounting file's: the spool's
  // disk was full), and any the batches never gave a time, go at the end of
  // the agent's events.
  int64_t last_bucket = 0;
  for (const TrackSummary& track : tracks) last_bucket = std::max(last_bucket, track.last_bucket);
  StoreReader::BatchLoss at_end{last_bucket << t::level_shift(0), (last_bucket + 1) << t::level_shift(0), 0, 0};
  at_end.events_dropped = std::max<int64_t>(0, static_cast<int64_t>(agent.events_dropped) - batches_dropped);
  if (!losses.empty() && losses.back().t0_ns == 0) {
    at_end.events_dropped += losses.back().events_dropped;
    at_end.batches_missing += losses.back().batches_missing;
    losses.pop_back();
  }
  if (at_end.events_dropped > 0 || at_end.batches_missing > 0) losses.push_back(at_end);
  // In time order (batches drain out of order), then at most kMaxLossSpans:
  // neighbours merged, nothing left out.
  std::sort(losses.begin(), losses.end(), [](const auto& a, const auto& b) { return a.t0_ns < b.t0_ns; });
  const size_t per_span = (losses.size() + kMaxLossSpans - 1) / kMaxLossSpans;
  for (size_t at = 0; at < losses.size(); at += per_span) {
    StoreReader::BatchLoss merged = losses[at];
    for (size_t j = at + 1; j < std::min(losses.size(), at + per_span); ++j) {
      merged.t1_ns = std::max(merged.t1_ns, losses[j].t1_ns);
      merged.events_dropped += losses[j].events_dropped;
      merged.batches_missing += losses[j].batches_missing;
    }
    out.push_back({{"t0", merged.t0_ns - origin},
                   {"t1", merged.t1_ns - origin},
                   {"events_dropped", merged.events_dropped},
                   {"batches_missing", merged.batches_missing}});
  }
  return {};
}

Status ViewerQueries::tracks(const std::string& run_id, json& out) {
  RunTracks run;
  if (Status s = load_run(run_id, run, StoreReader::AgentColumns::kWhole); !s.ok()) return s;
  const std::vector<Agent>& agents = run.agents;
  const int64_t origin = run.origin_ns;
  json processes = json::array();
  for (size_t i = 0; i < agents.size(); ++i) {
    const int64_t pid = agents[i].pid, rank = agents[i].rank;
    const std::string& hostname = agents[i].hostname;
    const std::string& command = agents[i].command;
    std::string label = (rank >= 0 ? "rank " + std::to_string(rank) + " · " : std::string()) + hostname + " · pid " +
                        std::to_string(pid);
    json tracks = json::array();
    // Threads first, then GPU streams under them (track numbers sort that way).
    for (const TrackSummary& track : run.tracks[i]) {
      const bool gpu = t::is_gpu_track(track.track);
      json entry = {{"track", track_name(agents[i].agent_id, track.track)},
                    {"kind", gpu ? "gpu" : "thread"},
                    {"events", track.events},
                    {"t_min", (track.first_bucket << t::level_shift(0)) - origin},
                    {"t_max", ((track.last_bucket + 1) << t::level_shift(0)) - origin}};
      if (gpu) {
        entry["device"] = t::track_device(track.track);
        entry["stream"] = t::track_stream(track.track);
        entry["name"] = "GPU " + std::to_string(t::track_device(track.track)) + " stream " +
                        std::to_string(t::track_stream(track.track));
      } else {
        entry["thread"] = track.track;
        entry["name"] = "thread " + std::to_string(track.track);
      }
      tracks.push_back(entry);
    }
    json losses;
    if (Status s = losses_json(agents[i], run.tracks[i], origin, losses); !s.ok()) return s;
    processes.push_back({{"agent_id", agents[i].agent_id},
                         {"label", label},
                         {"pid", pid},
                         {"rank", rank},
                         {"hostname", hostname},
                         {"command", command},
                         {"tracks", tracks},
                         {"losses", losses}});
  }
  out = {{"run_id", run_id},
         {"origin_ns", std::to_string(origin)},
         {"t_max", run.end_ns - origin},
         {"processes", processes}};
  return {};
}

// Visits the events of one track of `agent` with seq in [min_seq, max_seq]
// and time in [t0_abs, t1_abs), table by table (ops, casts; or kernels), each
// as its proto (one reused per table); a visitor returning false stops the scan.
template <typename OnOp, typename OnCast, typename OnKernel>
Status ViewerQueries::scan_events(const Agent& agent, int64_t track, int64_t min_seq, int64_t max_seq, int64_t t0_abs,
                                  int64_t t1_abs, OnOp&& on_op, OnCast&& on_cast, OnKernel&& on_kernel) {
  const int64_t first = event_row_id(agent.row, static_cast<uint64_t>(min_seq));
  const int64_t end = event_row_id(agent.row, static_cast<uint64_t>(max_seq)) + 1;
  StoreResolver& resolver = reader_->resolver();
  bool stopped = false;
  auto visit_rows = [&]<typename Row, const auto& kColumns, typename Event>(RowScan<Row, kColumns>& scan, Event& event,
                                                                          auto&& on_track, auto&& visit) -> Status {
    if (stopped) return {};
    if (Status s = scan.open(store().handle(), first, end, " ORDER BY id"); !s.ok()) return s;
    Row row;
    Status error;
    while (scan.next(row, error)) {
      if (!on_track(row) || row.ts_ns < t0_abs || row.ts_ns >= t1_abs) continue;
      event.Clear();
      if (Status s = to_event(row, resolver, event); !s.ok()) return s;
      if (!visit(event)) {
        stopped = true;
        return {};
      }
    }
    return error;
  };
  if (!t::is_gpu_track(track)) {
    RowScan<StoredOp, kViewerOpColumns> op_rows;
    v1::OpEvent o;
    if (Status s = visit_rows(op_rows, o, [&](const StoredOp& row) { return row.thread == track; }, on_op); !s.ok())
      return s;
    RowScan<StoredCast, kViewerCastColumns> cast_rows;
    v1::CastEvent c;
    return visit_rows(cast_rows, c, [&](const StoredCast& row) { return row.thread() == track; }, on_cast);
  }
  RowScan<StoredKernel, kViewerKernelColumns> kernel_rows;
  v1::KernelEvent k;
  return visit_rows(
      kernel_rows, k,
      [&](const StoredKernel& row) {
        return t::gpu_track(static_cast<uint32_t>(row.device), static_cast<uint32_t>(row.stream)) == track;
      },
      on_kernel);
}

Status ViewerQueries::read_events(const Agent& agent, int64_t track, int64_t min_seq, int64_t max_seq, int64_t t0_abs,
                                  int64_t t1_abs, int64_t origin, EventLists& out, size_t limit) {
  JsonWriter& ops = out.ops.begin_array();
  JsonWriter& casts = out.casts.begin_array();
  JsonWriter& kernels = out.kernels.begin_array();
  const EventLayout layout{out.lane != nullptr ? nullptr : &agent.agent_id, out.lane};
  // Past `limit`, more than the caller takes: the scan stops, the lists left unfinished.
  bool more = false;
  auto written = [&](auto&& write) {
    write();
    more = ++out.count > limit;
    return !more;
  };
  if (Status s = scan_events(
          agent, track, min_seq, max_seq, t0_abs, t1_abs,
          [&](const v1::OpEvent& e) { return written([&] { write_op(ops, layout, e, origin); }); },
          [&](const v1::CastEvent& e) { return written([&] { write_cast(casts, layout, e, origin); }); },
          [&](const v1::KernelEvent& e) { return written([&] { write_kernel(kernels, layout, e, origin); }); });
      !s.ok() || more)
    return s;
  ops.end_array();
  casts.end_array();
  kernels.end_array();
  return {};
}

Status ViewerQueries::fine_buckets(const Agent& agent, int64_t track, int64_t min_seq, int64_t max_seq, int64_t t0_abs,
                                   int64_t t1_abs, int shift, std::map<int64_t, t::TileCounts>& out) {
  auto bucket = [&](uint64_t ts) -> t::TileCounts& { return out[static_cast<int64_t>(ts) >> shift]; };
  return scan_events(
      agent, track, min_seq, max_seq, t0_abs, t1_abs,
      [&](const v1::OpEvent& e) {
        bucket(e.ts_ns()).add_op(e);
        return true;
      },
      [&](const v1::CastEvent& e) {
        bucket(e.ts_ns()).add_cast(e);
        return true;
      },
      [&](const v1::KernelEvent& e) {
        bucket(e.ts_ns()).add_kernel(e);
        return true;
      });
}

Status ViewerQueries::timeline(const RangeRequest& request, json& out) {
  std::string text;
  if (Status s = timeline_text({request.run_id, {request.track}, request.t0, request.t1, request.pixels}, text); !s.ok())
    return s;
  out = std::move(json::parse(text)["lanes"][0]);
  return {};
}

Status ViewerQueries::timeline_text(const StepRequest& request, std::string& out) {
  if (request.tracks.empty()) return Status::invalid_argument("tracks: expected one or more AGENT/NUMBER, comma-separated");
  if (request.tracks.size() > kMaxStepTracks)
    return Status::invalid_argument("tracks: at most " + std::to_string(kMaxStepTracks) + " per request, got " +
                                    std::to_string(request.tracks.size()));
  if (request.t1 <= request.t0) return Status::invalid_argument("t1 must be greater than t0");
  if (request.pixels < 1 || request.pixels > 20000) return Status::invalid_argument("px must be 1 to 20000");
  // Every name checked before any is read: a bad one is a 400 whatever the run.
  std::vector<LaneTrack> lanes(request.tracks.size());
  for (size_t i = 0; i < lanes.size(); ++i) {
    lanes[i].name = &request.tracks[i];
    if (!parse_track(request.tracks[i], lanes[i].agent_id, lanes[i].track))
      return Status::invalid_argument("track: expected AGENT/NUMBER as /api/tracks names it, got \"" +
                                      request.tracks[i].substr(0, 80) + "\"");
  }
  RunTracks run;
  if (Status s = load_run(request.run_id, run); !s.ok()) return s;
  JsonWriter w;
  w.begin_object();
  w.key("t0").value(request.t0);
  w.key("t1").value(request.t1);
  // Bit m of a bucket's `modes` is ExecutionMode m: the names once per answer.
  w.key("mode_names").begin_array();
  for (int m = 0; m <= v1::ExecutionMode_MAX; ++m) w.value(m == 0 ? "" : mode_name(static_cast<v1::ExecutionMode>(m)));
  w.end_array();
  w.key("lanes").begin_array();
  for (const LaneTrack& lane : lanes)
    if (Status s = lane_text(run, lane, request.t0, request.t1, request.pixels, w); !s.ok()) return s;
  w.end_array();
  w.end_object();
  out = w.take();
  return {};
}

Status ViewerQueries::lane_text(const RunTracks& run, const LaneTrack& lane, int64_t range_t0, int64_t range_t1,
                                int pixels, JsonWriter& w) {
  const int64_t track = lane.track;
  const Agent* agent = run.agent(lane.agent_id);
  if (agent == nullptr) return Status::not_found("no agent " + lane.agent_id + " in this run");
  const int64_t origin = run.origin_ns;
  const int64_t t0 = origin + range_t0, t1 = origin + range_t1;
  // Buckets at most two pixels wide: levels are 4x apart, so this gives 0.5 to
  // 2 rows per pixel; at most one pixel wide gave 1 to 4, twice the rows to
  // read, encode and parse for no visible difference.
  const int level = level_no_wider_than(std::max<int64_t>(1, 2 * (range_t1 - range_t0) / pixels));
  const int shift = t::level_shift(level);

  std::vector<t::TileRow> tiles;
  if (Status st = t::read_tiles(store(), agent->row, track, level, std::max<int64_t>(0, t0) >> shift,
                                std::max<int64_t>(0, t1 - 1) >> shift, tiles);
      !st.ok())
    return store().error(st.message());
  int64_t events = 0, min_seq = INT64_MAX, max_seq = -1;
  for (const t::TileRow& tile : tiles) {
    events += tile.counts.events();
    min_seq = std::min(min_seq, tile.counts.min_seq);
    max_seq = std::max(max_seq, tile.counts.max_seq);
  }
  w.begin_object();
  w.key("track").value(*lane.name);
  w.key("events").value(events);
  LaneLocations locations;
  auto events_answer = [&](EventLists& lists) {
    w.key("kind").value("events");
    // The lane's agent once, and its events' locations as a table.
    w.key("agent_id").value(agent->agent_id);
    w.key("locations");
    locations.write(w);
    w.key("ops").raw(lists.ops.text());
    w.key("casts").raw(lists.casts.text());
    w.key("kernels").raw(lists.kernels.text());
    w.end_object();
  };
  if (events <= kMaxRangeEvents) {
    EventLists lists;
    lists.lane = &locations;
    if (max_seq < 0) {
      for (JsonWriter* list : {&lists.ops, &lists.casts, &lists.kernels}) list->begin_array().end_array();
    } else if (Status st = read_events(*agent, track, min_seq, max_seq, t0, t1, origin, lists); !st.ok()) {
      return st;
    }
    events_answer(lists);
    return {};
  }
  // Finer than the finest tiles: the range itself may hold few enough events
  // even though its tiles hold more (a dense burst). Read them, within reason.
  if (level == 0 && events <= 50 * kMaxRangeEvents) {
    EventLists found;
    found.lane = &locations;
    if (Status st = read_events(*agent, track, min_seq, max_seq, t0, t1, origin, found, kMaxRangeEvents); !st.ok())
      return st;
    if (found.count <= static_cast<size_t>(kMaxRangeEvents)) {
      events_answer(found);
      return {};
    }
  }
  // Finer than the finest tiles, with too many events to send: buckets of
  // the range's own events at about two pixels, rather than a few
  // millisecond blocks across the view (a dense range zoomed in).
  int bucket_shift = shift;
  const int64_t wanted_ns = std::max<int64_t>(1, 2 * (range_t1 - range_t0) / pixels);
  if (level == 0 && t::bucket_ns(0) > 2 * wanted_ns && events <= kMaxFineBucketEvents) {
    std::map<int64_t, t::TileCounts> fine;
    int fine_shift = 0;
    while ((int64_t{1} << (fine_shift + 1)) <= wanted_ns) ++fine_shift;
    if (Status st = fine_buckets(*agent, track, min_seq, max_seq, t0, t1, fine_shift, fine); !st.ok()) return st;
    tiles.clear();
    for (const auto& [bucket, counts] : fine) tiles.push_back({bucket, counts});
    bucket_shift = fine_shift;
  }
  // Buckets as columns: one array per count, the i-th entries of all of them
  // one bucket. Keys once per lane instead of once per bucket: a third of the
  // bytes to write and for the page to parse.
  w.key("kind").value("buckets");
  w.key("bucket_ns").value(int64_t{1} << bucket_shift);
  w.key("buckets").begin_object();
  w.key("t").begin_array();
  for (const t::TileRow& tile : tiles) w.value((tile.bucket << bucket_shift) - origin);
  w.end_array();
  static constexpr std::pair<const char*, int64_t t::TileCounts::*> kCounts[] = {
      {"ops", &t::TileCounts::ops},           {"op_ns", &t::TileCounts::op_ns},
      {"decisions", &t::TileCounts::decisions}, {"casts", &t::TileCounts::casts},
      {"bytes", &t::TileCounts::bytes},       {"miss", &t::TileCounts::miss},
      {"hit", &t::TileCounts::hit},           {"stale_hit", &t::TileCounts::stale_hit},
      {"backward", &t::TileCounts::backward}, {"to_bfloat16", &t::TileCounts::to_bfloat16},
      {"to_float16", &t::TileCounts::to_float16}, {"to_float32", &t::TileCounts::to_float32},
      {"modes", &t::TileCounts::modes},       {"kernels", &t::TileCounts::kernels},
      {"kernel_ns", &t::TileCounts::kernel_ns}};
  for (const auto& [name, field] : kCounts) {
    w.key(name).begin_array();
    for (const t::TileRow& tile : tiles) w.value(tile.counts.*field);
    w.end_array();
  }
  w.end_object();
  w.end_object();
  return {};
}

Status ViewerQueries::event(const std::string& run_id, const std::string& agent_id, uint64_t seq, json& out) {
  if (seq > kMaxRowSeq) return Status::invalid_argument("seq out of range");
  RunTracks run;
  if (Status s = load_run(run_id, run); !s.ok()) return s;
  const Agent* agent = run.agent(agent_id);
  if (agent == nullptr) return Status::not_found("no agent " + agent_id + " in run " + run_id);
  const int64_t origin = run.origin_ns;
  const int64_t id = event_row_id(agent->row, seq);
  // Where the row is (its time and track), then read_events over that one seq.
  struct Where {
    bool found = false;
    int64_t ts = 0, track = 0, location = 0;
  };
  enum Kind { kCast, kOp, kKernel };
  for (const Kind kind : {kCast, kOp, kKernel}) {
    Where where;
    Status st;
    if (kind == kCast) {
      StoredCast row;
      st = read_row<StoredCast, kCastWhere>(store().handle(), id, row, where.found);
      where = {where.found, row.ts_ns, row.thread(), row.location};
    } else if (kind == kOp) {
      StoredOp row;
      st = read_row<StoredOp, kOpWhere>(store().handle(), id, row, where.found);
      where = {where.found, row.ts_ns, row.thread, row.location};
    } else {
      StoredKernel row;
      st = read_row<StoredKernel, kKernelWhere>(store().handle(), id, row, where.found);
      where = {where.found, row.ts_ns,
               t::gpu_track(static_cast<uint32_t>(row.device), static_cast<uint32_t>(row.stream)), 0};
    }
    if (!st.ok()) return store().error(st.message());
    if (!where.found) continue;
    EventLists found;
    if (Status s = read_events(*agent, where.track, static_cast<int64_t>(seq), static_cast<int64_t>(seq), where.ts,
                               where.ts + 1, origin, found);
        !s.ok())
      return s;
    const json list = json::parse(kind == kKernel ? found.kernels.text() : kind == kCast ? found.casts.text() : found.ops.text());
    if (list.empty()) continue;
    out = list[0];
    out["kind"] = kind == kKernel ? "kernel" : kind == kCast ? "cast" : "op";
    if (kind != kKernel) {
      v1::SourceLocation location;
      if (Status s = reader_->resolver().location(where.location, location); !s.ok()) return s;
      out["location"] = location_json(location, true);
    }
    return {};
  }
  return Status::not_found("no event " + std::to_string(seq) + " of agent " + agent_id + " in run " + run_id);
}

Status ViewerQueries::counters(const std::string& run_id, int64_t t0, int64_t t1, int points, json& out) {
  if (t1 <= t0) return Status::invalid_argument("t1 must be greater than t0");
  if (points < 1 || points > 20000) return Status::invalid_argument("points must be 1 to 20000");
  RunTracks run;
  if (Status s = load_run(run_id, run); !s.ok()) return s;
  const int64_t origin = run.origin_ns;
  const int level = level_at_least((t1 - t0) / points);
  const int shift = t::level_shift(level);
  const int64_t a0 = std::max<int64_t>(0, origin + t0), a1 = origin + t1;
  std::map<int64_t, std::pair<int64_t, int64_t>> rates;  // bucket -> casts, bytes
  json cache = json::array(), steps = json::array();
  for (size_t i = 0; i < run.agents.size(); ++i) {
    const Agent& agent = run.agents[i];
    for (const TrackSummary& track : run.tracks[i]) {
      if (t::is_gpu_track(track.track)) continue;
      std::vector<t::TileRate> tiles;
      if (Status st = t::read_tile_rates(store(), agent.row, track.track, level, a0 >> shift,
                                         std::max<int64_t>(0, a1 - 1) >> shift, tiles);
          !st.ok())
        return store().error(st.message());
      for (const t::TileRate& tile : tiles) {
        auto& [casts, bytes] = rates[tile.bucket];
        casts += tile.casts;
        bytes += tile.bytes;
      }
    }
    RowScan<StoredCacheSample, kSampleSeries> samples;
    if (Status st = samples.open(store().handle(), first_row_of(agent.row), end_row_of(agent.row)); !st.ok())
      return store().error(st.message());
    std::vector<std::array<int64_t, 5>> rows;
    // The cache holds what a sample saw until the next one: the last sample
    // before the range and the first after it frame it, so a range between
    // two samples (zoomed in) still draws its line edge to edge.
    std::optional<std::array<int64_t, 5>> before, after;
    StoredCacheSample sample;
    Status error;
    while (samples.next(sample, error)) {
      const std::array<int64_t, 5> row = {sample.ts_ns - origin, sample.trigger_code, sample.iteration, sample.live_casts,
                                          sample.live_bytes};
      if (sample.ts_ns < a0) {
        if (!before || row[0] >= (*before)[0]) before = row;
      } else if (sample.ts_ns >= a1) {
        if (!after || row[0] < (*after)[0]) after = row;
      } else {
        rows.push_back(row);
      }
    }
    if (!error.ok()) return store().error(error.message());
    const size_t in_range = rows.size();
    if (before) rows.insert(rows.begin(), *before);
    if (after) rows.push_back(*after);
    json series = {{"agent_id", agent.agent_id}, {"t", json::array()}, {"live_casts", json::array()}, {"live_bytes", json::array()}};
    const size_t stride = std::max<size_t>(1, in_range / static_cast<size_t>(points));
    for (size_t i = 0; i < rows.size(); ++i) {
      const bool framing = (before && i == 0) || (after && i + 1 == rows.size());
      if (!framing && rows[i][1] == v1::CacheSample::TRIGGER_ITERATION && steps.size() < 5000)
        steps.push_back({{"agent_id", agent.agent_id}, {"t", rows[i][0]}, {"iteration", rows[i][2]}});
      // Thinned as before the framing samples: every stride-th in range, and the last in range.
      const size_t k = i - (before ? 1 : 0);
      if (!framing && k % stride != 0 && k + 1 != in_range) continue;
      series["t"].push_back(rows[i][0]);
      series["live_casts"].push_back(rows[i][3]);
      series["live_bytes"].push_back(rows[i][4]);
    }
    cache.push_back(std::move(series));
  }
  const double seconds = static_cast<double>(t::bucket_ns(level)) / 1e9;
  json ts = json::array(), casts_per_s = json::array(), bytes_per_s = json::array();
  for (const auto& [bucket, counts] : rates) {
    ts.push_back((bucket << shift) - origin);
    casts_per_s.push_back(static_cast<double>(counts.first) / seconds);
    bytes_per_s.push_back(static_cast<double>(counts.second) / seconds);
  }
  out = {{"bucket_ns", t::bucket_ns(level)}, {"t", ts}, {"casts_per_s", casts_per_s}, {"bytes_per_s", bytes_per_s},
         {"cache", cache}, {"steps", steps}};
  return {};
}

Status ViewerQueries::findings(const std::string& run_id, json& out) {
  std::vector<Agent> agents;
  if (Status s = reader_->find_agents(run_id, "", agents); !s.ok()) return s;
  if (agents.empty()) return Status::not_found("no run " + run_id + " in " + store().path());
  v1::ListFindingsRequest request;
  request.set_run_id(run_id);
  v1::ListFindingsResponse response;
  if (Status s = reader_->list_findings(request, response); !s.ok()) return s;
  std::vector<json> list;
  for (const v1::Finding& f : response.findings()) {
    json details = json::parse(f.details_json(), nullptr, false);
    if (!details.is_object()) details = {{"id", f.id()}, {"kind", f.kind()}, {"severity", f.severity()}, {"summary", f.summary()}};
    list.push_back(std::move(details));
  }
  std::stable_sort(list.begin(), list.end(), [](const json& a, const json& b) {
    return severity_rank(a.value("severity", "")) < severity_rank(b.value("severity", ""));
  });
  out = {{"findings", list}};
  return {};
}

Status ViewerQueries::cached(const std::string& run_id, const std::map<std::string, CachedSites>& cache, json& out,
                             bool& hit, int64_t& events) {
  std::vector<Agent> agents;
  if (Status s = reader_->find_agents(run_id, "", agents, StoreReader::AgentColumns::kWhole); !s.ok()) return s;
  if (agents.empty()) return Status::not_found("no run " + run_id + " in " + store().path());
  events = 0;
  for (const Agent& agent : agents) events += static_cast<int64_t>(agent.casts + agent.ops);
  auto it = cache.find(run_id);
  hit = it != cache.end() && it->second.events == events;
  if (hit) out = it->second.body;
  return {};
}

Status ViewerQueries::sites(const std::string& run_id, json& out) {
  bool hit = false;
  int64_t events = 0;
  if (Status s = cached(run_id, sites_cache_, out, hit, events); !s.ok() || hit) return s;
  RunData data;
  if (Status s = load_run_data(store(), run_id, data); !s.ok()) return s;
  struct Site {
    SiteRef ref;
    uint64_t first_seq = UINT64_MAX, total = 0, bytes = 0, hits = 0, stale_hits = 0;
    std::map<std::string, std::map<std::string, uint64_t>> by_mode;
  };
  std::map<std::tuple<std::string, uint32_t, std::string, std::string>, Site> sites;
  // torch.compile's compile-time decisions get their column ("compiling")
  // beside the run-time modes, but no part in the site's counts.
  std::vector<const SiteRow*> rows;
  for (const SiteRow& row : data.sites) rows.push_back(&row);
  for (const SiteRow& row : data.compile_decisions) rows.push_back(&row);
  for (const SiteRow* each : rows) {
    const SiteRow& row = *each;
    Site& site = sites[row.site.key()];
    site.ref = row.site;
    site.first_seq = std::min(site.first_seq, row.first_seq);
    if (row.mode != v1::EXECUTION_MODE_COMPILING) {
      site.total += row.count;
      if (row.outcome == v1::CAST_OUTCOME_CAST) site.bytes += row.bytes;
      site.hits += row.hits;
      site.stale_hits += row.stale_hits;
    }
    const std::string pair = row.outcome == v1::CAST_OUTCOME_CAST
                                 ? dtype_name(row.src) + "->" + dtype_name(row.dst)
                                 : dtype_name(row.src) + " (" + std::string(value_name(row.outcome)) + ")";
    site.by_mode[mode_name(row.mode)][pair] += row.count;
  }
  std::vector<const Site*> ordered;
  for (const auto& [key, site] : sites) ordered.push_back(&site);
  std::sort(ordered.begin(), ordered.end(), [](const Site* a, const Site* b) { return a->first_seq < b->first_seq; });
  json list = json::array();
  for (const Site* site : ordered) {
    bool mismatch = false;
    const std::map<std::string, uint64_t>* first = nullptr;
    for (const auto& [mode, pairs] : site->by_mode) {
      if (first != nullptr) {
        std::set<std::string> a, b;
        for (const auto& [pair, n] : *first) a.insert(pair);
        for (const auto& [pair, n] : pairs) b.insert(pair);
        mismatch = mismatch || a != b;
      }
      first = &pairs;
    }
    list.push_back({{"file", site->ref.file},
                    {"line", site->ref.line},
                    {"function", site->ref.function},
                    {"op", site->ref.op},
                    {"arg", site->ref.arg},
                    {"first_seq", site->first_seq},
                    {"total", site->total},
                    {"bytes", site->bytes},
                    {"hits", site->hits},
                    {"stale_hits", site->stale_hits},
                    {"by_mode", site->by_mode},
                    {"mismatch", mismatch}});
  }
  out = {{"sites", list}};
  sites_cache_[run_id] = {events, out};
  return {};
}

Status ViewerQueries::modules(const std::string& run_id, json& out) {
  bool hit = false;
  int64_t events = 0;
  if (Status s = cached(run_id, modules_cache_, out, hit, events); !s.ok() || hit) return s;
  RunData data;
  if (Status s = load_run_data(store(), run_id, data); !s.ok()) return s;
  out = precision_map_json(data);
  modules_cache_[run_id] = {events, out};
  return {};
}

Status ViewerQueries::numerics(const std::string& run_id, json& out) {
  RunTracks run;
  if (Status s = load_run(run_id, run); !s.ok()) return s;
  const int64_t origin = run.origin_ns;
  json scalers = json::array(), marks = json::array();
  bool truncated = false;
  bool has_table = false;  // a store of schema 14 or older, read as it is, has none
  if (Status s = table_exists(store().handle(), schema::kNumerics, has_table); !s.ok())
    return store().error(s.message());
  if (!has_table) {
    out = {{"scalers", scalers}, {"marks", marks}, {"truncated", false}};
    return {};
  }
  StoreResolver& resolver = reader_->resolver();
  auto location_of = [&](int64_t id, json& into) {
    const StoredLocation* location = nullptr;
    if (Status s = resolver.location(id, location); !s.ok()) return s;
    into = location == nullptr
               ? json{{"file", ""}, {"line", 0}, {"function", ""}}
               : json{{"file", location->file}, {"line", location->line}, {"function", location->function}};
    return Status();
  };
  const std::string update_kind =
      " AND kind = " + std::to_string(static_cast<int>(v1::NumericsSummary::KIND_SCALER_UPDATE)) + " ORDER BY id";
  int64_t points_left = kMaxNumericsRows;
  for (const Agent& agent : run.agents) {
    // GradScaler's updates: the first and last, each skipped step and each
    // change of scale (it grows only every growth_interval updates), so a
    // long run's scale stays a few points.
    RowScan<StoredNumerics, kScalerPoint> updates;
    if (Status s = updates.open(store().handle(), first_row_of(agent.row), end_row_of(agent.row), update_kind);
        !s.ok())
      return store().error(s.message());
    json points = json::array();
    uint64_t total = 0, skipped = 0;
    int64_t update_location = 0;
    StoredNumerics row, last;
    bool has_last = false, last_kept = false;
    auto point = [&](const StoredNumerics& r) {
      if (points_left <= 0) {
        truncated = true;
        return;
      }
      --points_left;
      points.push_back({{"t", r.first_ts_ns - origin},
                        {"seq", r.seq()},
                        {"thread", r.thread},
                        {"scale", r.scale()},
                        {"found_inf", r.found_inf != 0},
                        {"updates", r.tensors},
                        {"iteration", r.iteration}});
    };
    Status error;
    while (updates.next(row, error)) {
      ++total;
      if (row.found_inf != 0) ++skipped;
      if (update_location == 0) update_location = row.location;
      last_kept = !has_last || row.found_inf != 0 || row.scale() != last.scale();
      if (last_kept) point(row);
      last = row;
      has_last = true;
    }
    if (!error.ok()) return store().error(error.message());
    if (total == 0) continue;
    if (!last_kept) point(last);
    json where;
    if (Status s = location_of(update_location, where); !s.ok()) return s;
    scalers.push_back({{"agent_id", agent.agent_id},
                       {"updates_total", total},
                       {"skipped_total", skipped},
                       {"location", std::move(where)},
                       {"points", std::move(points)}});
  }
  // Problems, in seq order per agent, at most kMaxNumericsRows in all.
  int64_t marks_left = kMaxNumericsRows;
  for (const Agent& agent : run.agents) {
    if (marks_left <= 0) break;
    RowScan<StoredNumerics> problems;
    if (Status s = problems.open(store().handle(), first_row_of(agent.row), end_row_of(agent.row),
                                 numerics_problems_sql() + " ORDER BY id LIMIT " + std::to_string(marks_left + 1));
        !s.ok())
      return store().error(s.message());
    StoredNumerics n;
    Status error;
    while (problems.next(n, error)) {
      if (marks_left-- <= 0) {
        truncated = true;
        break;
      }
      std::string op, arg;
      if (Status s = resolver.text(n.op, op); !s.ok()) return s;
      if (Status s = resolver.text(n.arg_name, arg); !s.ok()) return s;
      json where;
      if (Status s = location_of(n.location, where); !s.ok()) return s;
      const bool cast = n.kind() == v1::NumericsSummary::KIND_CAST;
      const NumericsCounts counts = numerics_counts(n);
      const std::string src = dtype_name(n.src_dtype());
      const std::string dst = cast ? dtype_name(n.dst_dtype()) : std::string();
      const std::string at = where["file"].get<std::string>().empty()
                                 ? std::string()
                                 : where["file"].get<std::string>() + ":" + std::to_string(where["line"].get<int64_t>());
      marks.push_back({{"agent_id", agent.agent_id},
                       {"seq", n.seq()},
                       {"thread", n.thread},
                       {"t0", n.first_ts_ns - origin},
                       {"t1", n.last_ts_ns - origin},
                       {"kind", std::string(value_name(n.kind()))},
                       {"op", op},
                       {"arg", arg},
                       {"arg_index", n.arg_index},
                       {"src", src},
                       {"dst", dst},
                       {"device", device_name(n.device_type())},
                       {"mode", mode_name(n.mode())},
                       {"phase", std::string(value_name(n.phase()))},
                       {"iteration", n.iteration},
                       {"tensors", n.tensors},
                       {"values", n.value_count},
                       {"overflowed", n.overflowed},
                       {"underflowed", n.underflowed},
                       {"nonfinite", n.nonfinite},
                       {"nan", n.nan},
                       {"max_abs_log2", n.max_abs_log2 == kNoMagnitude ? json(nullptr) : json(n.max_abs_log2)},
                       {"first_nonfinite_seq", n.first_nonfinite_seq},
                       {"worst", numerics_problem_name(worst_numerics_problem(counts))},
                       {"problems", numerics_problem_lines({counts, static_cast<uint64_t>(n.value_count), op, arg, src,
                                                            dst, at},
                                                           grouped_count)},
                       {"location", std::move(where)}});
    }
    if (!error.ok()) return store().error(error.message());
  }
  std::stable_sort(marks.begin(), marks.end(),
                   [](const json& a, const json& b) { return a["t0"].get<int64_t>() < b["t0"].get<int64_t>(); });
  out = {{"scalers", std::move(scalers)}, {"marks", std::move(marks)}, {"truncated", truncated}};
  return {};
}

}  // namespace castscope::collector::viewer
