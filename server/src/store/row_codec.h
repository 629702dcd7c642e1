// The store's read path: one row codec per event table (docs/store-codec.md).
//
//   table declaration (store_schema.h)  ->  row struct + RowLayout (here)
//     -> decode<kColumns>(row source, row)   the columns a reader selects
//     -> to_event(row, resolver, proto)      or the row's fields as they are
//
// A Stored* row holds a table's columns as stored: string and location ids
// unresolved, packed fields packed (event_columns.h unpacks them). A reader
// names the columns it needs (a schema::Columns list, checked at compile
// time against the table) and gets only those decoded; the others stay 0.
// Readers that need speed fold the rows themselves (run_data.cc, the
// export); readers that answer with protos call to_event. Strings and
// locations resolve through one cache, StoreResolver; agent rows are one
// type, StoredAgent.
//
// The seam for another dialect: decode() reads any row source with
// column_int(i) and column_blob(i) (Statement here); RowScan, StoreResolver,
// read_agents and find_run are what a second store implements over its own
// connection, returning the same rows.
#pragma once

#include <sqlite3.h>

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "castscope/v1/events.pb.h"
#include "server/src/status.h"
#include "server/src/store/event_columns.h"
#include "server/src/store/event_segments.h"
#include "server/src/store/row_id.h"
#include "server/src/store/sqlite_store.h"
#include "server/src/store/store_schema.h"

namespace castscope::collector {

// ---------------------------------------------------------------------------
// Rows of the event tables, one field per column (store_schema.h).

struct StoredCast {
  int64_t id = 0, ts_ns = 0, op = 0, arg_name = 0, slot = 0, codes = 0;
  std::span<const std::byte> shape;  // shape_dims() reads it; valid until the scan steps again
  int64_t bytes = 0, op_seq = 0, source_version = 0, cached_version = 0, location = 0, float8 = 0,
          float8_zero_amax = 0, module = 0, parameter = 0;
  uint64_t seq() const { return seq_of_row(id); }
  uint32_t thread() const { return static_cast<uint32_t>(kSlotThread.unpack(slot)); }
};

struct StoredOp {
  int64_t id = 0, ts_ns = 0, thread = 0, op = 0, codes = 0, input_dtypes = 0, cpu_duration_ns = 0, location = 0,
          autocast_enabled = 0, autocast_nesting = 0, gemm = 0;
  uint64_t seq() const { return seq_of_row(id); }
};

struct StoredCacheSample {
  int64_t id = 0, ts_ns = 0, trigger_code = 0, iteration = 0, live_casts = 0, live_bytes = 0, orphaned_casts = 0,
          orphaned_bytes = 0, cache_hits = 0, released_casts = 0;
  uint64_t seq() const { return seq_of_row(id); }
  v1::CacheSample::Trigger trigger() const { return static_cast<v1::CacheSample::Trigger>(trigger_code); }
};

struct StoredKernel {
  int64_t id = 0, ts_ns = 0, duration_ns = 0, name = 0, codes = 0, device = 0, stream = 0, launch_seq = 0, bytes = 0,
          correlation_id = 0;
  uint64_t seq() const { return seq_of_row(id); }
};

struct StoredCastCounts {
  int64_t id = 0, first_ts_ns = 0, last_ts_ns = 0, thread = 0, op = 0, arg_name = 0, location = 0, codes = 0,
          count = 0, bytes = 0, iteration = 0, max_version_gap = 0, round_trips = 0;
};

struct StoredOpCounts {
  int64_t id = 0, first_ts_ns = 0, last_ts_ns = 0, thread = 0, op = 0, location = 0, codes = 0,
          autocast_enabled = 0, calls = 0, errors = 0, cpu_duration_ns = 0, iteration = 0;
};

// numerics: a numerics window's counts at one site, or a GradScaler update.
struct StoredNumerics {
  int64_t id = 0, first_ts_ns = 0, last_ts_ns = 0, thread = 0, op = 0, arg_name = 0, location = 0, arg_index = 0,
          iteration = 0, tensors = 0, value_count = 0, overflowed = 0, underflowed = 0, nonfinite = 0, nan = 0,
          max_abs_log2 = 0, first_nonfinite_seq = 0, scale_bits = 0, found_inf = 0, saturated = 0;
  // The enum columns as stored; read them typed, below.
  int64_t kind_code = 0, device_type_code = 0, src_dtype_code = 0, dst_dtype_code = 0, mode_code = 0, phase_code = 0;
  uint64_t seq() const { return seq_of_row(id); }
  v1::NumericsSummary::Kind kind() const { return static_cast<v1::NumericsSummary::Kind>(kind_code); }
  v1::DeviceType device_type() const { return static_cast<v1::DeviceType>(device_type_code); }
  v1::DType src_dtype() const { return static_cast<v1::DType>(src_dtype_code); }
  v1::DType dst_dtype() const { return static_cast<v1::DType>(dst_dtype_code); }
  v1::ExecutionMode mode() const { return static_cast<v1::ExecutionMode>(mode_code); }
  v1::Phase phase() const { return static_cast<v1::Phase>(phase_code); }
  double scale() const {
    double value = 0;
    std::memcpy(&value, &scale_bits, sizeof value);
    return value;
  }
};

inline int64_t scale_bits_of(double scale) {
  int64_t bits = 0;
  std::memcpy(&bits, &scale, sizeof bits);
  return bits;
}

// ship_rollups (ship_rollups.h): one key-minute of cast decisions.
struct StoredRollup {
  int64_t id = 0, shipment = 0, agent = 0, minute = 0, op = 0, arg_name = 0, location = 0, codes = 0, count = 0,
          bytes = 0, hits = 0, misses = 0, stale_hits = 0;
};

// casts.shape: the dims as native-endian int64s.
template <typename Add>
void for_each_dim(std::span<const std::byte> shape, Add&& add) {
  for (size_t i = 0; i + 8 <= shape.size(); i += 8) {
    int64_t dim = 0;
    std::memcpy(&dim, shape.data() + i, 8);
    add(dim);
  }
}

// ---------------------------------------------------------------------------
// Which member holds which column. Every column of the table must have one
// (checked at compile time), so a column added to a table is a compile error
// here until its row has it.

template <typename Row>
struct IntegerColumn {
  std::string_view name;
  int64_t Row::*member;
};

template <typename Row>
struct RowLayout;

// What a layout shares: its table, and its one blob column (casts.shape).
template <const schema::Table& T, typename Row>
struct TableLayout {
  static constexpr const schema::Table& kTable = T;
  static constexpr std::string_view kBlob = {};
  using C = IntegerColumn<Row>;
};

template <>
struct RowLayout<StoredCast> : TableLayout<schema::kCasts, StoredCast> {
  static constexpr std::string_view kBlob = "shape";
  using R = StoredCast;
  static constexpr C kIntegers[] = {
      {"id", &R::id}, {"ts_ns", &R::ts_ns}, {"op", &R::op}, {"arg_name", &R::arg_name}, {"slot", &R::slot},
      {"codes", &R::codes}, {"bytes", &R::bytes}, {"op_seq", &R::op_seq}, {"source_version", &R::source_version},
      {"cached_version", &R::cached_version}, {"location", &R::location}, {"float8", &R::float8},
      {"float8_zero_amax", &R::float8_zero_amax}, {"module", &R::module}, {"parameter", &R::parameter}};
};

template <>
struct RowLayout<StoredOp> : TableLayout<schema::kOps, StoredOp> {
  using R = StoredOp;
  static constexpr C kIntegers[] = {
      {"id", &R::id}, {"ts_ns", &R::ts_ns}, {"thread", &R::thread}, {"op", &R::op}, {"codes", &R::codes},
      {"input_dtypes", &R::input_dtypes}, {"cpu_duration_ns", &R::cpu_duration_ns}, {"location", &R::location},
      {"autocast_enabled", &R::autocast_enabled}, {"autocast_nesting", &R::autocast_nesting}, {"gemm", &R::gemm}};
};

template <>
struct RowLayout<StoredCacheSample> : TableLayout<schema::kCacheSamples, StoredCacheSample> {
  using R = StoredCacheSample;
  static constexpr C kIntegers[] = {
      {"id", &R::id}, {"ts_ns", &R::ts_ns}, {"trigger", &R::trigger_code}, {"iteration", &R::iteration},
      {"live_casts", &R::live_casts}, {"live_bytes", &R::live_bytes}, {"orphaned_casts", &R::orphaned_casts},
      {"orphaned_bytes", &R::orphaned_bytes}, {"cache_hits", &R::cache_hits}, {"released_casts", &R::released_casts}};
};

template <>
struct RowLayout<StoredKernel> : TableLayout<schema::kKernels, StoredKernel> {
  using R = StoredKernel;
  static constexpr C kIntegers[] = {
      {"id", &R::id}, {"ts_ns", &R::ts_ns}, {"duration_ns", &R::duration_ns}, {"name", &R::name},
      {"codes", &R::codes}, {"device", &R::device}, {"stream", &R::stream}, {"launch_seq", &R::launch_seq},
      {"bytes", &R::bytes}, {"correlation_id", &R::correlation_id}};
};

template <>
struct RowLayout<StoredCastCounts> : TableLayout<schema::kCastCounts, StoredCastCounts> {
  using R = StoredCastCounts;
  static constexpr C kIntegers[] = {
      {"id", &R::id}, {"first_ts_ns", &R::first_ts_ns}, {"last_ts_ns", &R::last_ts_ns}, {"thread", &R::thread},
      {"op", &R::op}, {"arg_name", &R::arg_name}, {"location", &R::location}, {"codes", &R::codes},
      {"count", &R::count}, {"bytes", &R::bytes}, {"iteration", &R::iteration},
      {"max_version_gap", &R::max_version_gap}, {"round_trips", &R::round_trips}};
};

template <>
struct RowLayout<StoredOpCounts> : TableLayout<schema::kOpCounts, StoredOpCounts> {
  using R = StoredOpCounts;
  static constexpr C kIntegers[] = {
      {"id", &R::id}, {"first_ts_ns", &R::first_ts_ns}, {"last_ts_ns", &R::last_ts_ns}, {"thread", &R::thread},
      {"op", &R::op}, {"location", &R::location}, {"codes", &R::codes}, {"autocast_enabled", &R::autocast_enabled},
      {"calls", &R::calls}, {"errors", &R::errors}, {"cpu_duration_ns", &R::cpu_duration_ns},
      {"iteration", &R::iteration}};
};

template <>
struct RowLayout<StoredNumerics> : TableLayout<schema::kNumerics, StoredNumerics> {
  using R = StoredNumerics;
  static constexpr C kIntegers[] = {
      {"id", &R::id}, {"first_ts_ns", &R::first_ts_ns}, {"last_ts_ns", &R::last_ts_ns}, {"thread", &R::thread},
      {"op", &R::op}, {"arg_name", &R::arg_name}, {"location", &R::location}, {"kind", &R::kind_code},
      {"device_type", &R::device_type_code}, {"src_dtype", &R::src_dtype_code}, {"dst_dtype", &R::dst_dtype_code},
      {"mode", &R::mode_code}, {"phase", &R::phase_code}, {"arg_index", &R::arg_index}, {"iteration", &R::iteration},
      {"tensors", &R::tensors}, {"value_count", &R::value_count}, {"overflowed", &R::overflowed},
      {"underflowed", &R::underflowed}, {"nonfinite", &R::nonfinite}, {"nan", &R::nan},
      {"max_abs_log2", &R::max_abs_log2}, {"first_nonfinite_seq", &R::first_nonfinite_seq},
      {"scale_bits", &R::scale_bits}, {"found_inf", &R::found_inf}, {"saturated", &R::saturated}};
};

template <>
struct RowLayout<StoredRollup> : TableLayout<schema::kShipRollups, StoredRollup> {
  using R = StoredRollup;
  static constexpr C kIntegers[] = {
      {"id", &R::id},         {"shipment", &R::shipment}, {"agent", &R::agent},   {"minute", &R::minute},
      {"op", &R::op},         {"arg_name", &R::arg_name}, {"location", &R::location}, {"codes", &R::codes},
      {"count", &R::count},   {"bytes", &R::bytes},       {"hits", &R::hits},     {"misses", &R::misses},
      {"stale_hits", &R::stale_hits}};
};

namespace detail {
template <typename Row>
consteval bool layout_covers_table() {
  using L = RowLayout<Row>;
  for (const schema::Column& column : L::kTable.columns) {
    bool found = column.name == L::kBlob;
    for (const auto& integer : L::kIntegers) found = found || integer.name == column.name;
    if (!found) return false;
  }
  return std::size(L::kIntegers) + (L::kBlob.empty() ? 0 : 1) == L::kTable.columns.size();
}
}  // namespace detail

// Every column of Row's table, in declaration order.
template <typename Row>
inline constexpr auto kAllColumns = schema::all_columns<RowLayout<Row>::kTable>();

// Reads the columns of `kColumns` (a list of Row's table) from `source`, a
// row whose ordinals follow that list.
template <const auto& kColumns, typename Row, typename Source>
void decode(const Source& source, Row& row) {
  using L = RowLayout<Row>;
  static_assert(detail::layout_covers_table<Row>(), "a column of the table has no member in its RowLayout");
  static_assert(kColumns.table == &L::kTable, "the column list is not of this row's table");
  [&]<size_t... I>(std::index_sequence<I...>) {
    (
        [&] {
          constexpr int ordinal = kColumns.find(L::kIntegers[I].name);
          if constexpr (ordinal >= 0) row.*(L::kIntegers[I].member) = source.column_int(ordinal);
        }(),
        ...);
  }(std::make_index_sequence<std::size(L::kIntegers)>{});
  if constexpr (!L::kBlob.empty()) {
    constexpr int ordinal = kColumns.find(L::kBlob);
    if constexpr (ordinal >= 0) row.shape = source.column_blob(ordinal);
  }
}

// Rows of one table whose ids are in [first, end): one agent's range, or part
// of it. `rest` follows the range condition: more conditions (" AND ...",
// bound from ?3 through statement()), then ORDER BY and LIMIT. An event
// table's rows are found through its segments (event_segments.h).
// `columns` ("e.a, e.b") as a store of an older readable version has them:
// a column added since (schema::kLaterColumns) reads as its default there.
Status columns_in_store(sqlite3* db, const schema::Table& table, const std::string& columns, std::string& out);

template <typename Row, const auto& kColumns = kAllColumns<Row>>
class RowScan {
 public:
  Status open(sqlite3* db, int64_t first, int64_t end, std::string_view rest = " ORDER BY id") {
    std::string columns, sql;
    if (Status s = columns_in_store(db, *kColumns.table, kColumns.list_sql("e."), columns); !s.ok()) return s;
    if (Status s = segments::select_sql(db, *kColumns.table, columns, first, end, rest, sql); !s.ok()) return s;
    if (Status s = Statement::prepare(db, sql, statement_); !s.ok()) return s;
    statement_.bind(1, first);
    statement_.bind(2, end);
    return {};
  }
  Statement& statement() { return statement_; }
  // The next row; false at the end, or on an error (`error` set).
  bool next(Row& row, Status& error) {
    if (!statement_.step(error)) return false;
    decode<kColumns>(statement_, row);
    return true;
  }

 private:
  Statement statement_;
};

// The one row of `id`, when stored.
template <typename Row, const auto& kColumns = kAllColumns<Row>>
Status read_row(sqlite3* db, int64_t id, Row& row, bool& found) {
  RowScan<Row, kColumns> scan;
  if (Status s = scan.open(db, id, id + 1, ""); !s.ok()) return s;
  Status error;
  found = scan.next(row, error);
  return error;
}

// ---------------------------------------------------------------------------
// Strings and locations: one cache for every reader.

struct StoredLocation {
  std::string file;
  uint32_t line = 0;
  std::string function;
  castscope::v1::SourceLocation::Kind kind = castscope::v1::SourceLocation::KIND_UNSPECIFIED;
  bool inside_disabled_autocast = false;
  std::vector<std::string> stack;  // innermost first; empty: none sent
  std::string source_text;
  std::vector<std::string> also_consumed_at;
  void to_proto(castscope::v1::SourceLocation& out) const;
};

// Resolves strings and locations ids, each read once and kept until
// clear(); what it hands out stays valid until then. Id 0 is none. Its
// statements are reset after each lookup, so it holds no read snapshot.
class StoreResolver {
 public:
  explicit StoreResolver(sqlite3* db = nullptr) : db_(db) {}
  void attach(sqlite3* db) { db_ = db; }

  // 0: an empty view.
  Status text(int64_t id, std::string_view& out);
  // 0: `out` left as it is.
  Status text(int64_t id, std::string& out);
  // 0: nullptr.
  Status location(int64_t id, const StoredLocation*& out);
  // 0: `out` left as it is.
  Status location(int64_t id, castscope::v1::SourceLocation& out);

  size_t cached() const { return strings_.size() + locations_.size(); }
  void clear() {
    strings_.clear();
    locations_.clear();
  }

 private:
  sqlite3* db_ = nullptr;
  Statement string_lookup_, location_lookup_;
  std::unordered_map<int64_t, std::string> strings_;
  std::unordered_map<int64_t, StoredLocation> locations_;
};

// ---------------------------------------------------------------------------
// Rows as protos (the Query service, the viewer's events). Strings and
// locations are resolved; a column the scan left out reads as 0.

Status to_event(const StoredCast& row, StoreResolver& resolver, castscope::v1::CastEvent& out);
Status to_event(const StoredOp& row, StoreResolver& resolver, castscope::v1::OpEvent& out);
Status to_event(const StoredKernel& row, StoreResolver& resolver, castscope::v1::KernelEvent& out);
void to_event(const StoredCacheSample& row, castscope::v1::CacheSample& out);

// ---------------------------------------------------------------------------
// Runs and agents: one row type each for every reader.

struct StoredRun {
  int64_t row = 0;  // runs.id
  std::string run_id;
  uint64_t first_seen_unix_ns = 0, last_seen_unix_ns = 0;
};

struct StoredAgent {
  int64_t row = 0;  // agents.id: the agent part of its event rows' ids (row_id.h)
  std::string agent_id;
  uint32_t pid = 0;
  int32_t rank = -1, local_rank = -1, world_size = -1;
  std::string hostname, torch_version, command, policy_hash;
  std::vector<std::string> policy_files;
  std::string castscope_version;  // '' from agents older than the field
  bool finished = false;
  uint64_t batches = 0, first_sequence = 0, last_sequence = 0;
  uint64_t events_recorded = 0, events_dropped = 0;  // AgentStats' totals
  uint64_t casts = 0, ops = 0, cache_samples = 0, kernels = 0;  // rows stored
  uint64_t numerics = 0;  // numerics rows stored (schema version 15; 0 from older stores)
  std::string gpu_timing;  // AgentStats.gpu_timing, the latest
  uint64_t gpu_records_dropped = 0;
  std::vector<std::string> overlay_errors;  // module and function overlay entries skipped, with why
  bool aggregate = false;  // aggregate mode: counters, no per-event records (docs/aggregate.md)

  uint64_t missing_batches() const { return batches == 0 ? 0 : last_sequence - first_sequence + 1 - batches; }
  uint64_t events_stored() const { return casts + ops + cache_samples + kernels + numerics; }
};

// The run named `run_id`; `found` false when it is not stored.
Status find_run(sqlite3* db, std::string_view run_id, StoredRun& out, bool& found);
// Every run, first stored first.
Status list_runs(sqlite3* db, std::vector<StoredRun>& out);
// The agents of run row `run` (only `agent_id` when given), first seen first.
Status read_agents(sqlite3* db, int64_t run, std::string_view agent_id, std::vector<StoredAgent>& out);
// The same agents with `row` and `agent_id` alone (the rest left default):
// what a reader of one agent's events needs, without the identity and counters.
Status read_agent_keys(sqlite3* db, int64_t run, std::string_view agent_id, std::vector<StoredAgent>& out);

}  // namespace castscope::collector
