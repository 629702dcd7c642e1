#include "server/src/store/store_queries.h"

#include <string>

#include "server/src/store/event_columns.h"
#include "server/src/store/row_id.h"
#include "server/src/store/sqlite_store.h"

namespace castscope::collector {

namespace v1 = castscope::v1;

namespace {

// kernels.codes' fields over the alias k (event_columns.h).
std::string launched_by_sql() { return packed_field_sql("k.codes", kKernelCodeFields[kKernelLaunchedBy]); }
std::string activity_sql() { return packed_field_sql("k.codes", kKernelCodeFields[kKernelActivity]); }
// The row id of a kernel's launching cast or op.
std::string launch_sql() { return same_agent_row_sql("k.id", "k.launch_seq"); }

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
  return each_row(db, "SELECT MAX(id) FROM " + std::string(table.name) + " WHERE id >= ? AND id < ?", first, end,
                  [&](const Statement& r) {
                    if (!r.column_is_null(0)) out = r.column_int(0);
                  });
}

Status kernel_time_by_launcher(sqlite3* db, int64_t first, int64_t end, v1::LaunchedBy by,
                               std::vector<LaunchedKernelTime>& out) {
  const bool by_name = by == v1::LAUNCHED_BY_OP;
  const std::string sql = "SELECT e.location, e.op, SUM(k.duration_ns), COUNT(*), " +
                          (by_name ? "k.name, " + activity_sql() : std::string("0, 0")) + " FROM kernels k JOIN " +
                          (by == v1::LAUNCHED_BY_CAST ? "casts" : "ops") + " e ON e.id = " + launch_sql() +
                          " WHERE k.id >= ? AND k.id < ? AND " + launched_by_sql() + " = " + std::to_string(by) +
                          " GROUP BY e.location, e.op" + (by_name ? ", k.name, k.codes" : "");
  return each_row(db, sql, first, end, [&](const Statement& r) {
    out.push_back({r.column_int(0), r.column_int(1), r.column_int(4), static_cast<int>(r.column_int(5)),
                   static_cast<uint64_t>(r.column_int(2)), static_cast<uint64_t>(r.column_int(3))});
  });
}

Status unlaunched_kernel_time_by_name(sqlite3* db, int64_t first, int64_t end, std::vector<LaunchedKernelTime>& out) {
  const std::string sql = "SELECT k.name, SUM(k.duration_ns), COUNT(*) FROM kernels k WHERE k.id >= ? AND k.id < ? "
                          "AND " + launched_by_sql() + " = " + std::to_string(v1::LAUNCHED_BY_NONE) + " AND " +
                          activity_sql() + " = " + std::to_string(v1::GPU_ACTIVITY_KERNEL) + " GROUP BY k.name";
  return each_row(db, sql, first, end, [&](const Statement& r) {
    out.push_back({0, 0, r.column_int(0), v1::GPU_ACTIVITY_KERNEL, static_cast<uint64_t>(r.column_int(1)),
                   static_cast<uint64_t>(r.column_int(2))});
  });
}

Status kernel_time_totals(sqlite3* db, int64_t first, int64_t end, KernelTimeTotals& out) {
  const std::string launched_by = launched_by_sql();
  const std::string unattributed = launched_by + " = " + std::to_string(v1::LAUNCHED_BY_NONE);
  const std::string unjoined = "((" + launched_by + " = " + std::to_string(v1::LAUNCHED_BY_CAST) +
                               " AND NOT EXISTS (SELECT 1 FROM casts e WHERE e.id = " + launch_sql() + ")) OR (" +
                               launched_by + " = " + std::to_string(v1::LAUNCHED_BY_OP) +
                               " AND NOT EXISTS (SELECT 1 FROM ops e WHERE e.id = " + launch_sql() + ")))";
  for (const auto& [condition, total] : {std::pair{unattributed, &out.unattributed_ns}, std::pair{unjoined, &out.unjoined_ns}}) {
    if (Status s = each_row(db, "SELECT SUM(k.duration_ns) FROM kernels k WHERE k.id >= ? AND k.id < ? AND " + condition,
                            first, end,
                            [&](const Statement& r) {
                              if (!r.column_is_null(0)) *total += static_cast<uint64_t>(r.column_int(0));
                            });
        !s.ok())
      return s;
  }
  return {};
}

}  // namespace castscope::collector
