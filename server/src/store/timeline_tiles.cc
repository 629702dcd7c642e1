#include "server/src/store/timeline_tiles.h"

#include <algorithm>
#include <tuple>
#include <vector>

#include "server/src/store/row_codec.h"
#include "server/src/store/store_schema.h"

namespace castscope::collector::tiles {

namespace v1 = castscope::v1;

namespace {

constexpr auto kTileRow = schema::all_columns<schema::kTimelineTiles>();

// Every counter column of a tile, in the order TileCounts lists them.
struct CounterColumn {
  const char* name;
  int64_t TileCounts::*field;
  int param;  // its bind ordinal in kTileRow
};
constexpr CounterColumn kCounters[] = {
    {"ops", &TileCounts::ops, kTileRow.param("ops")},
    {"op_ns", &TileCounts::op_ns, kTileRow.param("op_ns")},
    {"decisions", &TileCounts::decisions, kTileRow.param("decisions")},
    {"casts", &TileCounts::casts, kTileRow.param("casts")},
    {"bytes", &TileCounts::bytes, kTileRow.param("bytes")},
    {"miss", &TileCounts::miss, kTileRow.param("miss")},
    {"hit", &TileCounts::hit, kTileRow.param("hit")},
    {"stale_hit", &TileCounts::stale_hit, kTileRow.param("stale_hit")},
    {"backward", &TileCounts::backward, kTileRow.param("backward")},
    {"to_bfloat16", &TileCounts::to_bfloat16, kTileRow.param("to_bfloat16")},
    {"to_float16", &TileCounts::to_float16, kTileRow.param("to_float16")},
    {"to_float32", &TileCounts::to_float32, kTileRow.param("to_float32")},
    {"kernels", &TileCounts::kernels, kTileRow.param("kernels")},
    {"kernel_ns", &TileCounts::kernel_ns, kTileRow.param("kernel_ns")},
};

// The INSERT's ON CONFLICT: counters add, seqs widen, modes join.
std::string upsert_sql() {
  std::string sql = "ON CONFLICT(agent, track, level, bucket) DO UPDATE SET "
                    "min_seq = min(min_seq, excluded.min_seq), max_seq = max(max_seq, excluded.max_seq), "
                    "modes = modes | excluded.modes";
  for (const CounterColumn& c : kCounters) sql += std::string(", ") + c.name + " = " + c.name + " + excluded." + c.name;
  return sql;
}

int64_t mode_bit(int mode) { return mode > 0 && mode < 63 ? int64_t{1} << mode : 0; }

}  // namespace

void TileCounts::add_seq(uint64_t seq) {
  min_seq = std::min(min_seq, static_cast<int64_t>(seq));
  max_seq = std::max(max_seq, static_cast<int64_t>(seq));
}

void TileCounts::add_op(const v1::OpEvent& op) {
  add_seq(op.seq());
  ++ops;
  op_ns += static_cast<int64_t>(op.cpu_duration_ns());
  if (op.phase() == v1::PHASE_BACKWARD) ++backward;
  modes |= mode_bit(op.mode());
}

void TileCounts::add_cast(const v1::CastEvent& cast) {
  add_seq(cast.seq());
  ++decisions;
  if (cast.outcome() == v1::CAST_OUTCOME_CAST) {
    ++casts;
    bytes += static_cast<int64_t>(cast.bytes());
    switch (cast.dst_dtype()) {
      case v1::DTYPE_BFLOAT16: ++to_bfloat16; break;
      case v1::DTYPE_FLOAT16: ++to_float16; break;
      case v1::DTYPE_FLOAT32: ++to_float32; break;
      default: break;
    }
  }
  switch (cast.cache()) {
    case v1::CACHE_OUTCOME_MISS: ++miss; break;
    case v1::CACHE_OUTCOME_HIT: ++hit; break;
    case v1::CACHE_OUTCOME_STALE_HIT: ++stale_hit; break;
    default: break;
  }
  if (cast.phase() == v1::PHASE_BACKWARD) ++backward;
  modes |= mode_bit(cast.mode());
}

void TileCounts::add_kernel(const v1::KernelEvent& kernel) {
  add_seq(kernel.seq());
  ++kernels;
  kernel_ns += static_cast<int64_t>(kernel.duration_ns());
}

void TileCounts::merge(const TileCounts& other) {
  min_seq = std::min(min_seq, other.min_seq);
  max_seq = std::max(max_seq, other.max_seq);
  modes |= other.modes;
  for (const CounterColumn& c : kCounters) this->*c.field += other.*c.field;
}

TileCounts& TileAccumulator::tile(int64_t agent, int64_t track, uint64_t ts_ns) {
  const TileKey key{agent, track, static_cast<int64_t>(ts_ns >> level_shift(0))};
  if (last_ != nullptr && key == last_key_) return *last_;
  last_key_ = key;
  last_ = &tiles_[key];
  return *last_;
}

void TileAccumulator::add(int64_t agent_row, const v1::Event& event) {
  switch (event.kind_case()) {
    case v1::Event::kCast:
      tile(agent_row, thread_track(event.cast().thread()), event.cast().ts_ns()).add_cast(event.cast());
      break;
    case v1::Event::kOp:
      tile(agent_row, thread_track(event.op().thread()), event.op().ts_ns()).add_op(event.op());
      break;
    case v1::Event::kKernel: {
      const v1::KernelEvent& k = event.kernel();
      tile(agent_row, gpu_track(k.device(), k.stream()), k.ts_ns()).add_kernel(k);
      break;
    }
    default:
      break;
  }
}

Status TileAccumulator::flush(sqlite3* db) {
  if (tiles_.empty()) return {};
  if (!upsert_.prepared())
    if (Status s = upsert_.prepare_upsert(db, kTileRow, upsert_sql()); !s.ok()) return s;
  // Coarser levels from the finest, in memory: a transaction touches few
  // buckets, so each level adds at most as many rows as the one below. Rows
  // go in key order, many per statement: each lands next to the one before.
  rows_.clear();
  for (const auto& [key, counts] : tiles_) rows_.push_back({key.agent, key.track, 0, key.bucket, counts});
  std::sort(rows_.begin(), rows_.end(), [](const LevelRow& a, const LevelRow& b) { return a.key() < b.key(); });
  for (size_t finer = 0, end = rows_.size(); finer < end;) {
    const size_t level_end = end;
    for (size_t i = finer; i < level_end; ++i) {
      const LevelRow row = rows_[i];  // a copy: push_back may move rows_
      if (row.level + 1 == kTileLevels) continue;
      LevelRow coarser{row.agent, row.track, row.level + 1, row.bucket >> kShiftPerLevel, row.counts};
      // Finer rows are in key order, so a coarser bucket's rows are adjacent.
      if (rows_.size() > level_end && rows_.back().key() == coarser.key())
        rows_.back().counts.merge(row.counts);
      else
        rows_.push_back(coarser);
    }
    finer = level_end;
    end = rows_.size();
  }
  std::sort(rows_.begin(), rows_.end(), [](const LevelRow& a, const LevelRow& b) { return a.key() < b.key(); });
  int64_t changed = 0;
  Status status = upsert_.insert(
      rows_.size(),
      [this](Statement& u, int p, size_t i) {
        const LevelRow& row = rows_[i];
        u.bind(p + kTileRow["agent"], row.agent);
        u.bind(p + kTileRow["track"], row.track);
        u.bind(p + kTileRow["level"], row.level);
        u.bind(p + kTileRow["bucket"], row.bucket);
        u.bind(p + kTileRow["min_seq"], row.counts.min_seq);
        u.bind(p + kTileRow["max_seq"], row.counts.max_seq);
        u.bind(p + kTileRow["modes"], row.counts.modes);
        for (const CounterColumn& c : kCounters) u.bind(p + c.param - 1, row.counts.*c.field);
      },
      changed);
  clear();
  return status;
}

namespace {

// What the tiles count of each table: columns an upgrade from version 6 has
// (rebuild runs before later versions add theirs).
constexpr auto kOpTileColumns = schema::columns(schema::kOps, {"id", "ts_ns", "thread", "codes", "cpu_duration_ns"});
constexpr auto kCastTileColumns = schema::columns(schema::kCasts, {"id", "ts_ns", "slot", "codes", "bytes"});
constexpr auto kKernelTileColumns = schema::columns(schema::kKernels, {"id", "ts_ns", "duration_ns", "device", "stream"});

}  // namespace

Status rebuild(sqlite3* db) {
  // One pass per event table (in key order on the tables of the stores it
  // rebuilds, made before version 17); flushed every million events so that
  // memory stays bounded on a large store.
  TileAccumulator accumulator;
  size_t pending = 0;
  StoreResolver no_strings;  // the tiles count no names: the columns read hold none
  auto scan = [&]<typename Row, const auto& kColumns>(RowScan<Row, kColumns>& rows, auto&& to_event) -> Status {
    if (Status s = rows.open(db, 0, INT64_MAX, ""); !s.ok()) return s;
    Status error;
    Row row;
    v1::Event event;
    while (rows.next(row, error)) {
      to_event(row, event);
      accumulator.add(agent_of_row(row.id), event);
      if (++pending == (1u << 20)) {
        if (Status s = accumulator.flush(db); !s.ok()) return s;
        pending = 0;
      }
    }
    return error;
  };
  RowScan<StoredOp, kOpTileColumns> ops;
  Status s = scan(ops, [&](const StoredOp& row, v1::Event& e) {
    e.mutable_op()->Clear();
    (void)to_event(row, no_strings, *e.mutable_op());
  });
  RowScan<StoredCast, kCastTileColumns> casts;
  if (s.ok())
    s = scan(casts, [&](const StoredCast& row, v1::Event& e) {
      e.mutable_cast()->Clear();
      (void)to_event(row, no_strings, *e.mutable_cast());
    });
  RowScan<StoredKernel, kKernelTileColumns> kernels;
  if (s.ok())
    s = scan(kernels, [&](const StoredKernel& row, v1::Event& e) {
      e.mutable_kernel()->Clear();
      (void)to_event(row, no_strings, *e.mutable_kernel());
    });
  if (s.ok()) s = accumulator.flush(db);
  return s;
}

Status read_track_summaries(const Database& store, int64_t agent, std::vector<TrackSummary>& out) {
  sqlite3* db = store.handle();
  const int offset = stored_level_offset(store.schema_version());
  // Every statement seeks on the key (agent, track, level, bucket): one step
  // per track to find the next track, then its coarsest tiles (a handful) and
  // its first and last finest tile. A GROUP BY track over level = ? would read
  // every tile of the agent, all levels (0.07 s per request at 1 M events,
  // growing with the run).
  constexpr auto kTrack = schema::columns(schema::kTimelineTiles, {"track"});
  constexpr auto kBucket = schema::columns(schema::kTimelineTiles, {"bucket"});
  Statement next, count, first, last;
  for (auto [statement, sql] : {
           std::pair{&next, kTrack.select_sql() + " WHERE agent = ? AND track > ? ORDER BY track LIMIT 1"},
           std::pair{&count, "SELECT sum(ops + decisions + kernels) FROM timeline_tiles WHERE agent = ? AND "
                             "track = ? AND level = ?" + std::string()},
           std::pair{&first, kBucket.select_sql() + " WHERE agent = ? AND track = ? AND level = ? ORDER BY bucket LIMIT 1"},
           std::pair{&last,
                     kBucket.select_sql() + " WHERE agent = ? AND track = ? AND level = ? ORDER BY bucket DESC LIMIT 1"}})
    if (Status s = Statement::prepare(db, sql, *statement); !s.ok()) return s;
  Status error;
  for (int64_t after = INT64_MIN;;) {
    next.reset();
    next.bind(1, agent);
    next.bind(2, after);
    if (!next.step(error)) break;
    after = next.column_int(kTrack["track"]);
    count.reset();
    count.bind(1, agent);
    count.bind(2, after);
    count.bind(3, kTileLevels - 1 + offset);
    if (!count.step(error)) break;
    out.push_back({after, count.column_int(0), 0, 0});
  }
  if (!error.ok()) return error;
  for (TrackSummary& track : out) {
    for (auto [statement, field] : {std::pair{&first, &track.first_bucket}, std::pair{&last, &track.last_bucket}}) {
      statement->reset();
      statement->bind(1, agent);
      statement->bind(2, track.track);
      statement->bind(3, offset);
      if (statement->step(error)) *field = statement->column_int(kBucket["bucket"]);
      if (!error.ok()) return error;
    }
  }
  return {};
}

namespace {
// The tiles of one track and level in a bucket range, `columns` selected.
template <size_t N>
Status prepare_tile_range(const Database& store, const schema::Columns<N>& columns, int64_t agent, int64_t track,
                          int level, int64_t first_bucket, int64_t last_bucket, Statement& out) {
  if (Status st = Statement::prepare(
          store.handle(), columns.select_sql() + " WHERE agent = ? AND track = ? AND level = ? AND bucket BETWEEN ? AND ? ORDER BY bucket",
          out);
      !st.ok())
    return st;
  out.bind(1, agent);
  out.bind(2, track);
  out.bind(3, level + stored_level_offset(store.schema_version()));
  out.bind(4, first_bucket);
  out.bind(5, last_bucket);
  return {};
}
}  // namespace

Status read_tiles(const Database& store, int64_t agent, int64_t track, int level, int64_t first_bucket, int64_t last_bucket,
                  std::vector<TileRow>& out) {
  Statement s;
  if (Status st = prepare_tile_range(store, kTileRow, agent, track, level, first_bucket, last_bucket, s); !st.ok()) return st;
  Status error;
  while (s.step(error)) {
    TileRow& row = out.emplace_back();
    row.bucket = s.column_int(kTileRow["bucket"]);
    row.counts.min_seq = s.column_int(kTileRow["min_seq"]);
    row.counts.max_seq = s.column_int(kTileRow["max_seq"]);
    row.counts.modes = s.column_int(kTileRow["modes"]);
    for (const CounterColumn& c : kCounters) row.counts.*c.field = s.column_int(c.param - 1);
  }
  return error;
}

Status read_tile_rates(const Database& store, int64_t agent, int64_t track, int level, int64_t first_bucket,
                       int64_t last_bucket, std::vector<TileRate>& out) {
  static constexpr auto kRate = schema::columns(schema::kTimelineTiles, {"bucket", "casts", "bytes"});
  Statement s;
  if (Status st = prepare_tile_range(store, kRate, agent, track, level, first_bucket, last_bucket, s); !st.ok()) return st;
  Status error;
  while (s.step(error))
    out.push_back({s.column_int(kRate["bucket"]), s.column_int(kRate["casts"]), s.column_int(kRate["bytes"])});
  return error;
}

}  // namespace castscope::collector::tiles
