// The collector's SQLite file: connection, schema version (migrations and
// refusals) and prepared statements. The tables are in store_schema.h.
// StoreWriter (one thread) and StoreReader (any number of connections, other
// processes included: WAL lets them read while the writer commits) build on it.
//
// Event tables have no secondary index: inserts append to one b-tree
// (measured at 1.0-1.4M rows/s here, against 64k-650k/s with an index). Since
// version 17 SQLite picks their rowids (an append without a b-tree descent)
// and event_segments says which rowid ranges hold an agent's ids
// (event_segments.h); older stores keep id, event_row_id(agent, seq), as the
// rowid, and a query for one agent is a range scan of it.
#pragma once

#include <sqlite3.h>

#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <thread>

#include "server/src/status.h"
#include "server/src/store/row_id.h"

namespace castscope::collector {

// PRAGMA user_version. A change to the schema (store_schema.h) bumps it and
// adds a migration step (sqlite_store.cc) or raises the oldest version upgraded.
inline constexpr int kSchemaVersion = 21;
inline constexpr int kApplicationId = 0x43535354;  // PRAGMA application_id: "CSST"

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
  // Valid until the next step or reset.
  std::span<const std::byte> column_blob(int index) const {
    const auto* data = static_cast<const std::byte*>(sqlite3_column_blob(stmt_, index));
    return {data, data == nullptr ? 0 : static_cast<size_t>(sqlite3_column_bytes(stmt_, index))};
  }
  bool column_is_null(int index) const { return sqlite3_column_type(stmt_, index) == SQLITE_NULL; }
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
  // an existing castscope store. A writer upgrades a file of an older schema
  // version in place (a reader reads the versions it can as they are) and
  // refuses one it cannot upgrade. Errors name the file, what is wrong and
  // what to do.
  Status open(const std::string& path, Mode mode);

  sqlite3* handle() const { return db_; }
  const std::string& path() const { return path_; }
  // The file's schema version once open: kSchemaVersion for a writer (it
  // upgrades), possibly older for a reader (timeline_tiles.h reads by it).
  int schema_version() const { return schema_version_; }
  Status exec(const char* sql);
  Status error(std::string_view what) const;  // "FILE: what: sqlite's message"

 private:
  Status check_or_create_schema(Mode mode);
  Status check_version(Mode mode, int version);
  Status migrate(int version);

  sqlite3* db_ = nullptr;
  std::string path_;
  int writer_lock_fd_ = -1;
  int schema_version_ = 0;
};

// Checkpoints the WAL from its own connection and thread, so that the
// writer never copies pages into the database file or waits for fsync on
// the commit path (SQLite's automatic checkpoint runs inside COMMIT).
//
// Concurrency design. The writer thread calls `after_commit` and
// `before_begin`; one checkpoint thread runs PASSIVE checkpoints, which never
// block the writer (they copy frames up to the WAL's end as of their start
// while the writer goes on appending). A checkpoint syncs the WAL and the
// database file exactly as the automatic one did (synchronous=NORMAL). SQLite
// rewinds the WAL only when a write transaction starts with every frame
// copied; under a saturating load that moment never comes by itself, so past
// `max_bytes` the writer waits in `before_begin` for a checkpoint that covers
// all its commits (then its next transaction rewinds the WAL). The WAL is
// thus bounded by about `max_bytes`, as it was by wal_autocheckpoint (a
// reader holding an old snapshot can still delay the rewind, as before).
// The limits are in bytes, turned into frames with the file's page size:
// stores made before 64 KiB pages keep 16 KiB ones and get the same WAL.
// All shared state is under `mutex_`.
class WalCheckpointer {
 public:
  struct Options {
    int64_t start_bytes = int64_t{16} << 20;  // ask for a checkpoint at this much WAL
    int64_t max_bytes = int64_t{64} << 20;    // the writer waits for one past this
    int max_wait_ms = 2000;                   // then goes on anyway (a reader pins the WAL); logged
  };

  WalCheckpointer() = default;
  ~WalCheckpointer() { stop(); }
  WalCheckpointer(const WalCheckpointer&) = delete;
  WalCheckpointer& operator=(const WalCheckpointer&) = delete;

  // Opens a second connection to `path` and starts the thread; turns off the
  // automatic checkpoint of `writer` (the connection it relieves).
  Status start(sqlite3* writer, const std::string& path, const Options& options);
  // Stops the thread and closes its connection. Idempotent.
  void stop();

  // Writer thread: after each COMMIT, and before each BEGIN.
  void after_commit();
  void before_begin();

  uint64_t checkpoints() const;
  // Checkpoints tried again because a reader stopped one short while the writer waited.
  uint64_t retries() const;
  // A checkpoint was asked for and has not completed: a reader that can
  // wait (the live analyzer) should hold no snapshot now. Any thread.
  bool behind() const;

 private:
  static constexpr std::chrono::milliseconds kRetryInterval{5};
  static int on_wal_commit(void* self, sqlite3* db, const char* name, int frames);
  void loop();

  Options options_;
  int start_frames_ = 0, max_frames_ = 0;  // the options in pages of this file
  std::string path_;
  sqlite3* writer_ = nullptr;
  sqlite3* db_ = nullptr;  // the checkpoint thread's connection
  int wal_frames_ = 0;     // writer thread only: WAL size after its last commit
  int wait_frames_ = 0;    // writer thread only: before_begin waits from this size

  mutable std::mutex mutex_;
  std::condition_variable wake_checkpointer_, wake_writer_;
  uint64_t requested_ = 0;  // generations: a checkpoint asked for after the writer's n-th request
  uint64_t completed_ = 0;  // the latest generation whose commits are all in the database file
  uint64_t checkpoints_ = 0;
  uint64_t retries_ = 0;          // attempts repeated for a waiting writer
  bool writer_waiting_ = false;   // the writer is in before_begin, waiting for a checkpoint
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace castscope::collector
