// Many rows per INSERT statement (256, then 16, then 1): SQLite's
// per-statement cost dominates single-row inserts, and still shows with 64
// rows. The event tables insert OR IGNORE (a seq stored before keeps its
// first row); the tiles add to existing rows with an ON CONFLICT clause.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "server/src/status.h"
#include "server/src/store/sqlite_store.h"
#include "server/src/store/store_schema.h"

namespace castscope::collector {

class MultiRowInsert {
 public:
  // INSERT OR IGNORE of `row`'s columns.
  template <size_t N>
  Status prepare(sqlite3* db, const schema::Columns<N>& row) {
    return prepare(db, row, /*or_ignore=*/true, "");
  }
  // INSERT of `row`'s columns followed by `upsert` ("ON CONFLICT ... DO UPDATE ...").
  template <size_t N>
  Status prepare_upsert(sqlite3* db, const schema::Columns<N>& row, std::string_view upsert) {
    return prepare(db, row, /*or_ignore=*/false, " " + std::string(upsert));
  }
  bool prepared() const { return db_ != nullptr; }

  // Inserts rows [0, count); bind_row(statement, first_parameter, row) binds
  // one row's columns (column `name` is parameter first_parameter + row[name]
  // of the list given to prepare). `changed` grows by the rows SQLite
  // reports changed (for OR IGNORE: those really written, not a row whose id
  // exists already).
  template <typename BindRow>
  Status insert(size_t count, BindRow&& bind_row, int64_t& changed) {
    size_t row = 0;
    for (size_t k = 0; k < kRowsPerStatement.size(); ++k) {
      const size_t rows = kRowsPerStatement[k];
      Statement& statement = statements_[k];
      for (; count - row >= rows; row += rows) {
        for (size_t r = 0; r < rows; ++r) bind_row(statement, static_cast<int>(r) * columns_ + 1, row + r);
        Status error;
        statement.step(error);
        sqlite3_reset(statement.get());
        if (!error.ok()) return error;
        changed += sqlite3_changes(db_);
      }
    }
    return {};
  }

 private:
  static constexpr std::array<size_t, 3> kRowsPerStatement = {256, 16, 1};
  template <size_t N>
  Status prepare(sqlite3* db, const schema::Columns<N>& row, bool or_ignore, const std::string& suffix) {
    db_ = db;
    columns_ = static_cast<int>(row.size());
    for (size_t k = 0; k < kRowsPerStatement.size(); ++k)
      if (Status s = Statement::prepare(db, row.insert_sql(kRowsPerStatement[k], or_ignore) + suffix, statements_[k]);
          !s.ok())
        return s;
    return {};
  }

  sqlite3* db_ = nullptr;
  int columns_ = 0;
  std::array<Statement, 3> statements_;
};

}  // namespace castscope::collector
