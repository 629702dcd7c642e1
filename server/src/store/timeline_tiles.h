// Timeline tiles: the store's mipmap for the viewer (Perfetto's idea). Each
// track of an agent (a castscope thread, or a GPU device and stream) is cut
// into buckets of 2^shift ns of the agent's clock at kTileLevels levels, each
// 4 times coarser than the one below. A tile counts what happened in its
// bucket (ops, casts by target dtype and cache outcome, backward, modes,
// kernels) and keeps the lowest and highest seq in it, so that
//   - a range at any zoom is answered from about as many tiles as it has
//     pixels, however many events it holds, and
//   - the events of a small range are a range of the event tables' composite
//     key (row_id.h), read without a time index.
//
// The writer adds every stored event to a TileAccumulator (finest level
// only, in memory) and writes the touched tiles of every level at commit,
// adding to what the tables hold (UPSERT). A store of an older schema gets
// its tiles built from its events when it is upgraded.
//
// The finest buckets are 2^20 ns (1.05 ms). Stores before schema version 16
// had two finer levels (2^16 and 2^18 ns): a training job's events are a few
// µs to a few hundred µs apart on each track, so nearly every event had a
// finest tile of its own, and writing them took three quarters of the
// writer's time (docs/performance.md, "The store: millisecond tiles"). Ranges finer
// than a millisecond are answered with their events.
#pragma once

#include <cstdint>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

#include "castscope/v1/events.pb.h"
#include "server/src/status.h"
#include "server/src/store/multi_row_insert.h"
#include "server/src/store/sqlite_store.h"

namespace castscope::collector::tiles {

inline constexpr int kTileLevels = 11;
inline constexpr int kFinestShift = 20;  // 1.05 ms
inline constexpr int kShiftPerLevel = 2;  // x4 per level: the coarsest is 2^40 ns, 18 min
// A store before schema version 16 holds level l (as above) at level l + 2,
// bucket for bucket: a reader opening one read-only adds this to each level.
inline constexpr int stored_level_offset(int schema_version) { return schema_version < 16 ? 2 : 0; }
inline constexpr int level_shift(int level) { return kFinestShift + kShiftPerLevel * level; }
inline constexpr int64_t bucket_ns(int level) { return int64_t{1} << level_shift(level); }

// Track ids within an agent. Threads are castscope's small thread indexes
// (< 2^24); GPU tracks set bit 40 above the device and stream.
inline constexpr int64_t kGpuTrackBit = int64_t{1} << 40;
inline constexpr int64_t thread_track(uint32_t thread) { return thread; }
inline constexpr int64_t gpu_track(uint32_t device, uint32_t stream) {
  return kGpuTrackBit | (static_cast<int64_t>(device & 0xff) << 32) | stream;
}
inline constexpr bool is_gpu_track(int64_t track) { return (track & kGpuTrackBit) != 0; }
inline constexpr uint32_t track_device(int64_t track) { return static_cast<uint32_t>((track >> 32) & 0xff); }
inline constexpr uint32_t track_stream(int64_t track) { return static_cast<uint32_t>(track & 0xffffffff); }

// Bits of TileCounts::modes: bit m set when an event ran in ExecutionMode m.
struct TileCounts {
  int64_t min_seq = INT64_MAX, max_seq = -1;
  int64_t ops = 0, op_ns = 0;
  int64_t decisions = 0, casts = 0, bytes = 0;  // decisions: every cast event; casts: those that converted
  int64_t miss = 0, hit = 0, stale_hit = 0;
  int64_t backward = 0;
  int64_t to_bfloat16 = 0, to_float16 = 0, to_float32 = 0;
  int64_t modes = 0;
  int64_t kernels = 0, kernel_ns = 0;

  void add_seq(uint64_t seq);
  void add_op(const castscope::v1::OpEvent& op);
  void add_cast(const castscope::v1::CastEvent& cast);
  void add_kernel(const castscope::v1::KernelEvent& kernel);
  void merge(const TileCounts& other);
  int64_t events() const { return ops + decisions + kernels; }
};

struct TileKey {
  int64_t agent, track, bucket;  // bucket at the finest level
  bool operator==(const TileKey&) const = default;
};
struct TileKeyHash {
  size_t operator()(const TileKey& k) const {
    return std::hash<int64_t>()(k.agent * 0x9E3779B97F4A7C15ull ^ k.track * 0xC2B2AE3D27D4EB4Full ^ k.bucket);
  }
};

// Counts of one transaction's events, per finest tile. Writer thread only.
class TileAccumulator {
 public:
  void add(int64_t agent_row, const castscope::v1::Event& event);
  bool empty() const { return tiles_.empty(); }
  void clear() { tiles_.clear(); last_ = nullptr; }
  // Adds every level's tiles to the table (within the caller's transaction),
  // then clears.
  Status flush(sqlite3* db);

 private:
  TileCounts& tile(int64_t agent, int64_t track, uint64_t ts_ns);

  // A tile of some level, as flush writes it.
  struct LevelRow {
    int64_t agent, track;
    int level;
    int64_t bucket;
    TileCounts counts;
    auto key() const { return std::tuple(agent, track, level, bucket); }
  };

  std::unordered_map<TileKey, TileCounts, TileKeyHash> tiles_;
  TileKey last_key_{};
  TileCounts* last_ = nullptr;  // nodes of an unordered_map stay put
  std::vector<LevelRow> rows_;  // reused by flush
  MultiRowInsert upsert_;
};

// Rebuilds the tiles of a whole store from its event tables (an upgrade from
// a schema that had none).
Status rebuild(sqlite3* db);

// Reading the tiles (the viewer). A track of an agent: its events (summed
// over the coarsest level) and its first and last finest bucket.
struct TrackSummary {
  int64_t track = 0;
  int64_t events = 0;
  int64_t first_bucket = 0, last_bucket = 0;
};
// The tracks of agent row `agent`, in track order. Readers take the
// Database, whose schema version says where each level is stored.
Status read_track_summaries(const Database& store, int64_t agent, std::vector<TrackSummary>& out);

struct TileRow {
  int64_t bucket = 0;  // at its level
  TileCounts counts;
};
// The tiles of one track and level with buckets in [first_bucket, last_bucket], in bucket order.
Status read_tiles(const Database& store, int64_t agent, int64_t track, int level, int64_t first_bucket, int64_t last_bucket,
                  std::vector<TileRow>& out);

// Casts and their bytes alone, for the same range (the counters' rates: a
// whole tile row is 21 columns, these are 3).
struct TileRate {
  int64_t bucket = 0;
  int64_t casts = 0, bytes = 0;
};
Status read_tile_rates(const Database& store, int64_t agent, int64_t track, int level, int64_t first_bucket,
                       int64_t last_bucket, std::vector<TileRate>& out);

}  // namespace castscope::collector::tiles
