#include "server/src/store/store_schema.h"

#include <climits>

#include "server/src/store/event_columns.h"
#include "server/src/store/row_id.h"

namespace castscope::collector::schema {

namespace {

// A view of an event table with its packed columns unpacked for SQL users:
// the row id as agent and seq (row_id.h), each packed column as its fields
// (event_columns.h's declarations), every other column as it is. store_test
// checks the views against what was sent.
std::string unpacked_view_sql(std::string_view view, const Table& table) {
  std::string sql = "CREATE VIEW " + std::string(view) + " AS SELECT\n  ";
  auto add = [&, first = true](const std::string& expression, std::string_view as = {}) mutable {
    if (!first) sql += ", ";
    first = false;
    sql += expression;
    if (!as.empty()) sql += " AS " + std::string(as);
  };
  for (const Column& column : table.columns) {
    if (column.name == "id") {
      add(agent_of_row_sql("id"), "agent");
      add(seq_of_row_sql("id"), "seq");
      continue;
    }
    const PackedColumn* packed = nullptr;
    for (const PackedColumn& p : kPackedColumns)
      if (p.table == table.name && p.column == column.name) packed = &p;
    if (packed == nullptr) {
      add(std::string(column.name));
      continue;
    }
    for (const PackedField& field : packed->fields) add(packed_field_sql(column.name, field), field.name);
  }
  return sql + "\n  FROM " + std::string(table.name) + ";\n";
}

std::string names(const Table& table, std::span<const int> indices) {
  std::string out;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (i > 0) out += ", ";
    out += table.columns[static_cast<size_t>(indices[i])].name;
  }
  return out;
}

}  // namespace

std::string Table::create_sql() const { return create_sql(INT_MAX); }

std::string Table::create_sql(int version) const {
  std::string sql = "CREATE TABLE " + std::string(name) + "(";
  bool first = true;
  for (const Column& column : columns) {
    bool later = false;
    for (const LaterColumn& added : kLaterColumns)
      later = later || (added.table == name && added.column == column.name && added.since > version);
    if (later) continue;
    sql += first ? "\n  " : ",\n  ";
    first = false;
    sql += column.name;
    sql += ' ';
    sql += column.definition;
  }
  if (!constraints.empty()) sql += ",\n  " + std::string(constraints);
  sql += without_rowid ? ") WITHOUT ROWID;\n" : ");\n";
  return sql;
}

std::string create_schema_sql() {
  std::string sql;
  for (const Table* table : kTables) sql += table->create_sql();
  return sql + cast_rows_view_sql() + op_rows_view_sql();
}

std::string cast_rows_view_sql() { return unpacked_view_sql("cast_rows", kCasts); }
std::string op_rows_view_sql() { return unpacked_view_sql("op_rows", kOps); }

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
                   std::string_view separator, std::string_view prefix) {
  std::string out;
  for (size_t i = 0; i < indices.size(); ++i) {
    if (i > 0) out += separator;
    out += prefix;
    out += table.columns[static_cast<size_t>(indices[i])].name;
    out += after_each;
  }
  return out;
}

}  // namespace detail

}  // namespace castscope::collector::schema
