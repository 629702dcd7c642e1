// The collector's SQLite file: connection, schema and prepared statements.
// StoreWriter (one thread) and StoreReader (any number of connections, other
// processes included: WAL lets them read while the writer commits) build on it.
//
// Event tables use a composite INTEGER PRIMARY KEY, (agent row << 40) | seq,
// and no secondary index: inserts then append to one b-tree (measured at
// 1.0-1.4M rows/s here, against 64k-650k/s with an index), and a query for one
// agent is a range scan of that key.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <string>
#include <string_view>

#include "status.h"

namespace castscope::collector {

inline constexpr int kSchemaVersion = 1;      // PRAGMA user_version
inline constexpr int kApplicationId = 0x43535354;  // PRAGMA application_id: "CSST"

inline int64_t event_row_id(int64_t agent_row, uint64_t seq) {
  return static_cast<int64_t>((static_cast<uint64_t>(agent_row) << 40) | seq);
}

// One prepared statement; reset and cleared for reuse by `reset()`.
class Statement {
 public:
  Statement() = default;
  ~Statement();
  Statement(Statement&& other) noexcept : stmt_(other.stmt_) { other.stmt_ = nullptr; }
  Statement& operator=(Statement&& other) noexcept;
  Statement(const Statement&) = delete;
  Statement& operator=(const Statement&) = delete;

  static Status prepare(sqlite3* db, std::string_view sql, Statement& out);

  sqlite3_stmt* get() const { return stmt_; }
  void bind(int index, int64_t value) { sqlite3_bind_int64(stmt_, index, value); }
  // The text must outlive the step.
  void bind_text(int index, std::string_view text) {
    sqlite3_bind_text(stmt_, index, text.data(), static_cast<int>(text.size()), SQLITE_STATIC);
  }
  // SQLITE_ROW: true; SQLITE_DONE: false; an error: false and `error` set.
  bool step(Status& error);
  // Steps a statement that returns no rows.
  Status run();
  void reset() {
    sqlite3_reset(stmt_);
    sqlite3_clear_bindings(stmt_);
  }
  int64_t column_int(int index) const { return sqlite3_column_int64(stmt_, index); }
  std::string column_text(int index) const;

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

class Database {
 public:
  enum class Mode { kReadWrite, kReadOnly };

  Database() = default;
  ~Database();
  Database(const Database&) = delete;
  Database& operator=(const Database&) = delete;

  // Opens `path`. kReadWrite creates the file and schema when absent and
  // takes the writer lock (one writing collector per file); kReadOnly needs
  // an existing castscope store. Errors name the file and what is wrong.
  Status open(const std::string& path, Mode mode);

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }
  Status exec(const char* sql);
  Status error(std::string_view what) const;  // "FILE: what: sqlite's message"

 private:
  Status check_or_create_schema(Mode mode);

  sqlite3* db_ = nullptr;
  std::string path_;
  int writer_lock_fd_ = -1;
};

}  // namespace castscope::collector
