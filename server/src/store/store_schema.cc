#include "server/src/store/store_schema.h"

#include "server/src/store/event_columns.h"

namespace castscope::collector::schema {

namespace {

// The views unpack the packed event columns for SQL users (event_columns.h
// has the layout; store_test checks the views against what was sent).
constexpr const char* kCastRowsViewSql = R"sql(
CREATE VIEW cast_rows AS SELECT
  id >> 40 AS agent, id & 0xFFFFFFFFFF AS seq, ts_ns, )sql" CASTSCOPE_SLOT_THREAD_SQL R"sql( AS thread, op,
  )sql" CASTSCOPE_SLOT_ARG_INDEX_SQL R"sql( AS arg_index, arg_name, )sql" CASTSCOPE_SLOT_LIST_INDEX_SQL R"sql( AS list_index,
  codes & 63 AS policy, (codes >> 6) & 63 AS src_dtype, (codes >> 12) & 63 AS dst_dtype, (codes >> 18) & 63 AS outcome,
  (codes >> 24) & 63 AS device_type, (codes >> 30) & 63 AS role, (codes >> 36) & 63 AS cache,
  (codes >> 42) & 63 AS mode, (codes >> 48) & 63 AS phase, (codes >> 54) & 1 AS shape_truncated,
  (codes >> 55) & 1 AS round_trip,
  shape, bytes, op_seq, source_version, cached_version, location
  FROM casts;
)sql";
constexpr const char* kOpRowsViewSql = R"sql(
CREATE VIEW op_rows AS SELECT
  id >> 40 AS agent, id & 0xFFFFFFFFFF AS seq, ts_ns, thread, op,
  codes & 63 AS policy, (codes >> 6) & 63 AS device_type, (codes >> 12) & 63 AS output_dtype,
  (codes >> 18) & 63 AS outcome, (codes >> 24) & 63 AS autocast_dtype, (codes >> 30) & 63 AS mode,
  (codes >> 36) & 63 AS phase, (codes >> 42) & 63 AS probe_reason, input_dtypes, cpu_duration_ns, location, autocast_enabled, autocast_nesting,
  )sql" CASTSCOPE_GEMM_FIELD_SQL(0) R"sql( AS gemm_compute, )sql" CASTSCOPE_GEMM_FIELD_SQL(8) R"sql( AS gemm_a_type,
  )sql" CASTSCOPE_GEMM_FIELD_SQL(16) R"sql( AS gemm_b_type, )sql" CASTSCOPE_GEMM_FIELD_SQL(24) R"sql( AS gemm_d_type,
  )sql" CASTSCOPE_GEMM_FIELD_SQL(32) R"sql( AS gemm_calls, )sql" CASTSCOPE_GEMM_FIELD_SQL(40) R"sql( AS gemm_mixed
  FROM ops;
)sql";

std::string names(const Table& table, std::span<const int> indices) {
  std::string out;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (i > 0) out += ", ";
    out += table.columns[static_cast<size_t>(indices[i])].name;
  }
  return out;
}

}  // namespace

std::string Table::create_sql() const {
  std::string sql = "CREATE TABLE " + std::string(name) + "(";
  for (size_t i = 0; i < columns.size(); ++i) {
    sql += i > 0 ? ",\n  " : "\n  ";
    sql += columns[i].name;
    sql += ' ';
    sql += columns[i].definition;
  }
  if (!constraints.empty()) sql += ",\n  " + std::string(constraints);
  sql += without_rowid ? ") WITHOUT ROWID;\n" : ");\n";
  return sql;
}

std::string create_schema_sql() {
  std::string sql;
  for (const Table* table : kTables) sql += table->create_sql();
  return sql + kCastRowsViewSql + kOpRowsViewSql;
}

std::string op_rows_view_sql() { return kOpRowsViewSql; }

namespace detail {

std::string select_sql(const Table& table, std::span<const int> indices) {
  return "SELECT " + names(table, indices) + " FROM " + std::string(table.name);
}

std::string insert_sql(const Table& table, std::span<const int> indices, size_t rows, bool or_ignore) {
  std::string one_row = "(";
  for (size_t i = 0; i < indices.size(); ++i) one_row += i > 0 ? ",?" : "?";
  one_row += ")";
  std::string sql = std::string(or_ignore ? "INSERT OR IGNORE INTO " : "INSERT INTO ") + std::string(table.name) + "(" +
                    names(table, indices) + ") VALUES ";
  sql.reserve(sql.size() + rows * (one_row.size() + 1));
  for (size_t r = 0; r < rows; ++r) {
    if (r > 0) sql += ',';
    sql += one_row;
  }
  return sql;
}

std::string joined(const Table& table, std::span<const int> indices, std::string_view after_each,
                   std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (i > 0) out += separator;
    out += table.columns[static_cast<size_t>(indices[i])].name;
    out += after_each;
  }
  return out;
}

}  // namespace detail

}  // namespace castscope::collector::schema
