#include "server/src/store/store_queries.h"

#include <algorithm>
#include <map>
#include <string>
#include <tuple>

#include "server/src/store/event_columns.h"
#include "server/src/store/row_codec.h"
#include "server/src/store/row_id.h"
#include "server/src/store/sqlite_store.h"

namespace castscope::collector {

namespace v1 = castscope::v1;

namespace {

// Steps `sql` bound with the range [first, end) as ?1 and ?2, calling `read` per row.
template <typename Read>
Status each_row(sqlite3* db, const std::string& sql, int64_t first, int64_t end, Read&& read) {
  Statement rows;
  if (Status s = Statement::prepare(db, sql, rows); !s.ok()) return s;
  rows.bind(1, first);
  rows.bind(2, end);
  Status error;
  while (rows.step(error)) read(rows);
  return error;
}

constexpr auto kKernelTime = schema::columns(schema::kKernels, {"id", "duration_ns", "name", "codes", "launch_seq"});
constexpr auto kLauncherCast = schema::columns(schema::kCasts, {"id", "op", "location"});
constexpr auto kLauncherOp = schema::columns(schema::kOps, {"id", "op", "location"});

// Calls visit(kernel) for each kernel in [first, end) launched as `by` says.
template <typename Visit>
Status each_kernel(sqlite3* db, int64_t first, int64_t end, v1::LaunchedBy by, Visit&& visit) {
  RowScan<StoredKernel, kKernelTime> kernels;
  if (Status s = kernels.open(db, first, end,
                              " AND " + packed_field_sql("codes", kKernelCodeFields[kKernelLaunchedBy]) + " = " +
                                  std::to_string(by));
      !s.ok())
    return s;
  StoredKernel kernel;
  Status error;
  while (kernels.next(kernel, error)) visit(kernel);
  return error;
}

struct Launch {
  int64_t launcher = 0;  // the launching cast's or op's id: its agent's, with launch_seq as seq
  int64_t name = 0;
  int activity = 0;
  uint64_t ns = 0;
};

// One chunk of join_launches: the kernels in [first, end), into `launches`.
template <typename Row, const auto& kColumns, typename Visit>
Status join_chunk(sqlite3* db, int64_t first, int64_t end, v1::LaunchedBy by, std::vector<Launch>& launches,
                  Visit&& visit) {
  auto add = [&](const StoredKernel& k) {
    const int64_t launcher = event_row_id(agent_of_row(k.id), static_cast<uint64_t>(k.launch_seq));
    launches.push_back({launcher, k.name, KernelCodes{k.codes}.activity(), static_cast<uint64_t>(k.duration_ns)});
  };
  if (Status s = each_kernel(db, first, end, by, add); !s.ok() || launches.empty()) return s;
  std::sort(launches.begin(), launches.end(), [](const Launch& a, const Launch& b) { return a.launcher < b.launcher; });
  RowScan<Row, kColumns> launchers;
  if (Status s = launchers.open(db, launches.front().launcher, launches.back().launcher + 1); !s.ok()) return s;
  const Row* const none = nullptr;
  Row row;
  Status error;
  size_t next = 0;
  while (next < launches.size() && launchers.next(row, error)) {
    for (; next < launches.size() && launches[next].launcher < row.id; ++next) visit(launches[next], none);
    for (; next < launches.size() && launches[next].launcher == row.id; ++next) visit(launches[next], &row);
  }
  if (!error.ok()) return error;
  for (; next < launches.size(); ++next) visit(launches[next], none);
  return {};
}

// Kernel ids per join: a chunk's launches (32 bytes each) are held and sorted.
constexpr int64_t kKernelChunkIds = int64_t{1} << 20;

// Kernels in [first, end) launched by a cast or an op (`by`), each with the
// launching row (nullptr when it is not stored): a chunk of kernels at a time,
// in launcher order, merged with one scan of the launchers' rows (event tables
// have no index on id since version 17; event_segments.h).
template <typename Row, const auto& kColumns, typename Visit>
Status join_launches(sqlite3* db, int64_t first, int64_t end, v1::LaunchedBy by, Visit&& visit) {
  std::optional<int64_t> last;
  if (Status s = last_row_in(db, schema::kKernels, first, end, last); !s.ok() || !last) return s;
  std::vector<Launch> launches;
  for (int64_t from = first; from <= *last; from += kKernelChunkIds) {
    launches.clear();
    const int64_t chunk_end = std::min(*last + 1, from + kKernelChunkIds);
    if (Status s = join_chunk<Row, kColumns>(db, from, chunk_end, by, launches, visit); !s.ok()) return s;
  }
  return {};
}

}  // namespace

Status table_exists(sqlite3* db, const schema::Table& table, bool& out) {
  Statement statement;
  if (Status s = Statement::prepare(db, "SELECT COUNT(*) FROM sqlite_master WHERE type = 'table' AND name = ?", statement);
      !s.ok())
    return s;
  statement.bind_text(1, table.name);
  Status error;
  out = statement.step(error) && statement.column_int(0) > 0;
  return error;
}

Status last_row_in(sqlite3* db, const schema::Table& table, int64_t first, int64_t end, std::optional<int64_t>& out) {
  out.reset();
  auto keep_max = [&](const Statement& r) {
    if (!r.column_is_null(0)) out = std::max(out.value_or(r.column_int(0)), r.column_int(0));
  };
  bool rowid = true;
  if (Status s = segments::id_is_rowid(db, table, rowid); !s.ok()) return s;
  const std::string name(table.name);
  if (rowid) return each_row(db, "SELECT MAX(id) FROM " + name + " WHERE id >= ?1 AND id < ?2", first, end, keep_max);
  return segments::last_id(db, table, first, end, out);
}

Status kernel_time_by_launcher(sqlite3* db, int64_t first, int64_t end, v1::LaunchedBy by,
                               std::vector<LaunchedKernelTime>& out, uint64_t& unjoined_ns) {
  // By the launcher's location and op; for ops, by kernel name and activity too.
  std::map<std::tuple<int64_t, int64_t, int64_t, int>, LaunchedKernelTime> times;
  auto add = [&](const Launch& launch, int64_t location, int64_t op) {
    const bool by_name = by == v1::LAUNCHED_BY_OP;
    const int64_t name = by_name ? launch.name : 0;
    const int activity = by_name ? launch.activity : 0;
    LaunchedKernelTime& time = times[{location, op, name, activity}];
    time = {location, op, name, activity, time.ns + launch.ns, time.kernels + 1};
  };
  auto visit = [&](const Launch& launch, const auto* launcher) {
    if (launcher == nullptr)
      unjoined_ns += launch.ns;
    else
      add(launch, launcher->location, launcher->op);
  };
  Status s = by == v1::LAUNCHED_BY_CAST ? join_launches<StoredCast, kLauncherCast>(db, first, end, by, visit)
                                        : join_launches<StoredOp, kLauncherOp>(db, first, end, by, visit);
  for (auto& [key, time] : times) out.push_back(time);
  return s;
}

Status unlaunched_kernel_time_by_name(sqlite3* db, int64_t first, int64_t end, std::vector<LaunchedKernelTime>& out) {
  std::map<int64_t, LaunchedKernelTime> by_name;
  Status s = each_kernel(db, first, end, v1::LAUNCHED_BY_NONE, [&](const StoredKernel& k) {
    if (KernelCodes{k.codes}.activity() != v1::GPU_ACTIVITY_KERNEL) return;
    LaunchedKernelTime& time = by_name[k.name];
    time = {0, 0, k.name, v1::GPU_ACTIVITY_KERNEL, time.ns + static_cast<uint64_t>(k.duration_ns), time.kernels + 1};
  });
  for (auto& [name, time] : by_name) out.push_back(time);
  return s;
}

Status unattributed_kernel_ns(sqlite3* db, int64_t first, int64_t end, uint64_t& out) {
  return each_kernel(db, first, end, v1::LAUNCHED_BY_NONE,
                     [&](const StoredKernel& k) { out += static_cast<uint64_t>(k.duration_ns); });
}

}  // namespace castscope::collector
