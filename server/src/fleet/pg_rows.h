// PostgreSQL rows by declared column, the way row_codec.h reads the store's:
//
//   writing  a row struct and its PgRowLayout (which member holds which
//            column of a table declared in fleet_schema.h, checked at compile
//            time to cover the table, each member of the type the column's
//            declared SQL type takes) -> append_row (binary COPY, pg_copy.h)
//            with copy_sql, or append_params with insert_sql (an INSERT with
//            text parameters). Columns and their order come from the
//            declaration alone; the layout may name them in any order.
//   reading  a query's answer columns declared once, each with the SQL that
//            computes it (select_list: the SELECT list is generated from it),
//            or some columns of a declared table (schema::columns); a row of
//            the result is read by column name through PgRow, the name
//            checked at compile time: row.integer("casts").
//
// WHERE, GROUP BY and the like stay hand-written, as in the store.
#pragma once

#include <array>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#include "server/src/fleet/pg_connection.h"
#include "server/src/fleet/pg_copy.h"
#include "server/src/store/store_schema.h"

namespace castscope::collector::fleet {

// ---------------------------------------------------------------------------
// Values and types.

// A column's type: the first word of its declared definition.
enum class PgType { kSmallint, kInteger, kBigint, kBoolean, kText, kTimestamptz, kJsonb };

namespace detail {
// Not constexpr: reaching them in a constant evaluation is a compile error.
void not_a_fleet_column_type();
void duplicate_column();
}  // namespace detail

consteval PgType pg_type(std::string_view definition) {
  const std::string_view type = definition.substr(0, definition.find(' '));
  if (type == "smallint") return PgType::kSmallint;
  if (type == "integer") return PgType::kInteger;
  if (type == "bigint") return PgType::kBigint;
  if (type == "boolean") return PgType::kBoolean;
  if (type == "text") return PgType::kText;
  if (type == "timestamptz") return PgType::kTimestamptz;
  if (type == "jsonb") return PgType::kJsonb;
  detail::not_a_fleet_column_type();
  return PgType::kText;
}

// A timestamptz value: unix nanoseconds. COPY sends microseconds since 2000;
// an INSERT sends whole unix seconds, to_timestamp($n::bigint).
struct PgTimestamp {
  int64_t unix_ns = 0;
};
// An INSERT's timestamptz that is PostgreSQL's now() (its clock, not ours).
struct PgNow {};

// Member types by column type. Binary COPY needs each width exactly: smallint
// int16_t, integer int32_t, bigint int64_t, boolean bool, text and jsonb
// std::string_view (the JSON text), timestamptz PgTimestamp. An INSERT's
// text parameter takes any integer type for the integer columns (PostgreSQL
// checks the range), and PgNow for a timestamptz.
template <PgType kType, typename T>
inline constexpr bool kCopyTakes = (kType == PgType::kSmallint && std::is_same_v<T, int16_t>) ||
                                   (kType == PgType::kInteger && std::is_same_v<T, int32_t>) ||
                                   (kType == PgType::kBigint && std::is_same_v<T, int64_t>) ||
                                   (kType == PgType::kBoolean && std::is_same_v<T, bool>) ||
                                   ((kType == PgType::kText || kType == PgType::kJsonb) &&
                                    std::is_same_v<T, std::string_view>) ||
                                   (kType == PgType::kTimestamptz && std::is_same_v<T, PgTimestamp>);
template <PgType kType, typename T>
inline constexpr bool kInsertTakes =
    kCopyTakes<kType, T> ||
    ((kType == PgType::kSmallint || kType == PgType::kInteger || kType == PgType::kBigint) && std::integral<T> &&
     !std::is_same_v<T, bool>) ||
    (kType == PgType::kTimestamptz && std::is_same_v<T, PgNow>);

// ---------------------------------------------------------------------------
// Writing: which member holds which column.

template <typename Row, typename T>
struct PgField {
  std::string_view name;  // a column of the layout's table
  T Row::*member;
};
template <typename Row, typename T>
constexpr PgField<Row, T> field(std::string_view name, T Row::*member) {
  return {name, member};
}

// Specialized per row struct (fleet_rows.h): kTable, the declared table, and
// kFields, a std::tuple of field(column, &Row::member), one per column.
template <typename Row>
struct PgRowLayout;

namespace detail {

// The position in Row's kFields of `column`'s field; -1: none.
template <typename Row>
consteval int field_of(std::string_view column) {
  int found = -1, at = 0;
  std::apply([&](const auto&... f) { ((found = f.name == column ? at : found, ++at), ...); },
             PgRowLayout<Row>::kFields);
  return found;
}

// Every column of the table has one field, and there are no others.
template <typename Row>
consteval bool layout_covers_table() {
  using L = PgRowLayout<Row>;
  for (const schema::Column& column : L::kTable.columns)
    if (field_of<Row>(column.name) < 0) return false;
  return std::tuple_size_v<std::remove_cvref_t<decltype(L::kFields)>> == L::kTable.columns.size();
}

template <typename Row, size_t I>
struct ColumnField {
  using L = PgRowLayout<Row>;
  static constexpr schema::Column kColumn = L::kTable.columns[I];
  static constexpr PgType kType = pg_type(kColumn.definition);
  static constexpr auto kMember = std::get<field_of<Row>(kColumn.name)>(L::kFields).member;
  using Value = std::remove_cvref_t<decltype(std::declval<const Row&>().*kMember)>;
};

template <typename Row, size_t I>
void put_copy(PgCopyBuffer& out, const Row& row) {
  using F = ColumnField<Row, I>;
  static_assert(kCopyTakes<F::kType, typename F::Value>, "a member's type is not its column's (pg_rows.h)");
  const auto& value = row.*F::kMember;
  if constexpr (F::kType == PgType::kSmallint) out.int2(value);
  if constexpr (F::kType == PgType::kInteger) out.int4(value);
  if constexpr (F::kType == PgType::kBigint) out.int8(value);
  if constexpr (F::kType == PgType::kBoolean) out.boolean(value);
  if constexpr (F::kType == PgType::kText) out.text(value);
  if constexpr (F::kType == PgType::kJsonb) out.jsonb(value);
  if constexpr (F::kType == PgType::kTimestamptz) out.timestamp_unix_ns(value.unix_ns);
}

template <typename Row, size_t I>
void put_param(const Row& row, std::vector<std::string>& params) {
  using F = ColumnField<Row, I>;
  static_assert(kInsertTakes<F::kType, typename F::Value>, "a member's type is not its column's (pg_rows.h)");
  const auto& value = row.*F::kMember;
  using V = typename F::Value;
  if constexpr (std::is_same_v<V, PgNow>)
    return;
  else if constexpr (std::is_same_v<V, PgTimestamp>)
    params.push_back(std::to_string(value.unix_ns / 1000000000));
  else if constexpr (std::is_same_v<V, bool>)
    params.push_back(value ? "true" : "false");
  else if constexpr (std::is_same_v<V, std::string_view>)
    params.emplace_back(value);
  else
    params.push_back(std::to_string(value));
}

// One row's values in an INSERT: "$1::bigint, $2, to_timestamp($3::bigint), now()".
template <typename Row, size_t I>
void value_sql(std::string& sql, int& param) {
  using F = ColumnField<Row, I>;
  if constexpr (I > 0) sql += ", ";
  if constexpr (std::is_same_v<typename F::Value, PgNow>) {
    sql += "now()";
    return;
  }
  const std::string p = "$" + std::to_string(param++);
  if constexpr (F::kType == PgType::kTimestamptz)
    sql += "to_timestamp(" + p + "::bigint)";
  else if constexpr (F::kType == PgType::kText)
    sql += p;
  else
    sql += p + "::" + std::string(F::kColumn.definition.substr(0, F::kColumn.definition.find(' ')));
}

template <typename Row>
constexpr size_t kColumnCount = PgRowLayout<Row>::kTable.columns.size();

// "name(a, b, c)": the table and its columns in declared order.
inline std::string table_columns_sql(const schema::Table& table) {
  std::string sql = std::string(table.name) + "(";
  for (size_t i = 0; i < table.columns.size(); ++i) {
    if (i > 0) sql += ", ";
    sql += table.columns[i].name;
  }
  return sql + ")";
}

}  // namespace detail

// "COPY t(a, b, ...) FROM STDIN (FORMAT binary)": every column of Row's table.
template <typename Row>
std::string copy_sql() {
  static_assert(detail::layout_covers_table<Row>(), "a column of the table has no member in its PgRowLayout");
  return "COPY " + detail::table_columns_sql(PgRowLayout<Row>::kTable) + " FROM STDIN (FORMAT binary)";
}

// `row` as one row of a binary COPY, its columns in declared order.
template <typename Row>
void append_row(PgCopyBuffer& out, const Row& row) {
  static_assert(detail::layout_covers_table<Row>(), "a column of the table has no member in its PgRowLayout");
  out.begin_row(static_cast<int16_t>(detail::kColumnCount<Row>));
  [&]<size_t... I>(std::index_sequence<I...>) {
    (detail::put_copy<Row, I>(out, row), ...);
  }(std::make_index_sequence<detail::kColumnCount<Row>>{});
}

// Text parameters per row of insert_sql: one per column, but PgNow's.
template <typename Row>
consteval size_t params_per_row() {
  size_t n = 0;
  [&]<size_t... I>(std::index_sequence<I...>) {
    ((n += std::is_same_v<typename detail::ColumnField<Row, I>::Value, PgNow> ? 0 : 1), ...);
  }(std::make_index_sequence<detail::kColumnCount<Row>>{});
  return n;
}

// `row`'s parameters, appended to `params` in declared order.
template <typename Row>
void append_params(const Row& row, std::vector<std::string>& params) {
  static_assert(detail::layout_covers_table<Row>(), "a column of the table has no member in its PgRowLayout");
  [&]<size_t... I>(std::index_sequence<I...>) {
    (detail::put_param<Row, I>(row, params), ...);
  }(std::make_index_sequence<detail::kColumnCount<Row>>{});
}

// "INSERT INTO t(a, b, ...) VALUES (...), (...)": `rows` rows whose
// parameters append_params gave, numbered from $1.
template <typename Row>
std::string insert_sql(size_t rows) {
  static_assert(detail::layout_covers_table<Row>(), "a column of the table has no member in its PgRowLayout");
  std::string sql = "INSERT INTO " + detail::table_columns_sql(PgRowLayout<Row>::kTable) + " VALUES ";
  int param = 1;
  for (size_t r = 0; r < rows; ++r) {
    sql += r > 0 ? ", (" : "(";
    [&]<size_t... I>(std::index_sequence<I...>) {
      (detail::value_sql<Row, I>(sql, param), ...);
    }(std::make_index_sequence<detail::kColumnCount<Row>>{});
    sql += ")";
  }
  return sql;
}

// ---------------------------------------------------------------------------
// Reading: a query's answer columns, and rows read by column name.

// An answer column: its name, and the SQL expression that computes it.
struct Selected {
  std::string_view name;
  std::string_view sql;
};

template <size_t N>
struct SelectList {
  std::array<Selected, N> columns;

  static constexpr int size() { return static_cast<int>(N); }
  // 0-based position of `name` in the answer (a compile error when it is not one).
  consteval int operator[](std::string_view name) const {
    for (size_t i = 0; i < N; ++i)
      if (columns[i].name == name) return static_cast<int>(i);
    schema::detail::no_such_column();
    return -1;
  }
  // "sql AS name, ...": the SELECT list.
  std::string sql() const {
    std::string out;
    for (size_t i = 0; i < N; ++i) {
      if (i > 0) out += ", ";
      out += std::string(columns[i].sql) + " AS " + std::string(columns[i].name);
    }
    return out;
  }
  // The same names in the same order (the branches of a UNION).
  template <size_t M>
  consteval bool same_names(const SelectList<M>& other) const {
    if (M != N) return false;
    for (size_t i = 0; i < N; ++i)
      if (columns[i].name != other.columns[i].name) return false;
    return true;
  }
};

template <size_t N>
consteval SelectList<N> select_list(const Selected (&columns)[N]) {
  SelectList<N> out{};
  for (size_t i = 0; i < N; ++i) {
    for (size_t j = 0; j < i; ++j)
      if (columns[j].name == columns[i].name) detail::duplicate_column();
    out.columns[i] = columns[i];
  }
  return out;
}

// Row `row` of a result whose columns are kColumns (a SelectList, or a
// schema::Columns list of a declared table), read by column name.
template <const auto& kColumns>
class PgRow {
 public:
  // A column of kColumns, found when compiled: a string literal converts.
  struct Column {
    int index;
    consteval Column(const char* name) : index(kColumns[name]) {}
  };

  PgRow(const PgResult& result, int row) : result_(result), row_(row) {}
  std::string_view text(Column c) const { return result_.text(row_, c.index); }
  int64_t integer(Column c) const { return result_.integer(row_, c.index); }
  bool boolean(Column c) const { return text(c) == "t"; }

 private:
  const PgResult& result_;
  int row_;
};

}  // namespace castscope::collector::fleet
