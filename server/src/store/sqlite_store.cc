#include "server/src/store/sqlite_store.h"

#include <fcntl.h>
#include <pthread.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iterator>

#include "common/log/logger.h"
#include "server/src/store/store_schema.h"
#include "server/src/store/timeline_tiles.h"

namespace castscope::collector {

namespace {

// Schema history: version 1 had thread, arg_index and list_index as columns
// of casts (now packed into casts.slot); version 5 dropped the kernels table,
// which nothing wrote or read; version 6 brought one back for GPU activity
// (docs/gpu.md), with the agents' kernel counts and GPU timing state;
// version 7 added the viewer's timeline tiles (built from the events when
// upgrading) and the source text of locations; version 8 added ops.gemm (the
// op's matmuls as cuBLASLt's logger described them; docs/gpu.md), unpacked
// in the op_rows view; version 9 added agents.overlay_errors (module and
// function overlay entries an agent skipped; docs/overlays.md); version 10
// added agents.castscope_version (the agent's release, from its identity);
// version 11 added cache_samples' orphaned counts and running hit and
// release totals (step-free cache-growth; docs/diagnostics.md); version 12
// added locations.also_consumed_at (the other consumers of a JIT-inserted
// cast CSE shared; part of the location's identity, so the table is made
// again with the new UNIQUE constraint); version 13 added the aggregate
// mode's counter tables; version 14 the fleet shipper's tables; version 15
// the numerics table (docs/numerics.md); version 16 dropped the tiles' two
// finest levels (timeline_tiles.h says why), renumbering the rest; version 17
// added event_segments, and event tables made from then on take rowids SQLite
// picks, id a plain column (event_segments.h; tables made before keep theirs);
// version 18 packed the cast's maker into casts.codes; version 19 added
// casts.float8 and casts.float8_zero_amax (a float8 conversion's scaling)
// and numerics.saturated; version 20 added casts.module and casts.parameter
// (the precision map's keys).
//
// A writer upgrades a file of an older version in place, one step at a time;
// kMigrations[i] takes version kMigrations[i].from to from + 1. Files older
// than the first step are refused.
struct Migration {
  int from;
  const char* sql;
  Status (*after)(sqlite3*) = nullptr;  // more work in C++, in the same transaction
};
// A migration's further SQL; `what` names it when SQLite gives no message.
Status run_sql(sqlite3* db, const std::string& sql, const char* what) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message) == SQLITE_OK) return Status();
  Status s = Status::internal(message ? message : what);
  sqlite3_free(message);
  return s;
}
// Version 7's tiles table is the one declared in store_schema.h (the same text
// as a new store's). It is filled from the events at version 16, whose
// levels it then has.
const std::string kTilesTableSql = schema::kTimelineTiles.create_sql();
// Version 16: the tiles of levels 2 and up, as levels 0 and up (the same
// buckets; timeline_tiles.h), into a new table: renumbering in place could
// meet rows not yet renumbered. A table still empty (a store upgraded from
// version 6, whose tiles were never built) is built from the events.
Status renumber_tile_levels(sqlite3* db) {
  std::string columns, selected;
  for (const schema::Column& c : schema::kTimelineTiles.columns) {
    columns += (columns.empty() ? "" : ", ") + std::string(c.name);
    selected += (selected.empty() ? "" : ", ") + (c.name == "level" ? std::string("level - 2") : std::string(c.name));
  }
  if (Status s = run_sql(db,
                         "ALTER TABLE timeline_tiles RENAME TO timeline_tiles_v15;" + kTilesTableSql +
                             "INSERT INTO timeline_tiles(" + columns + ") SELECT " + selected +
                             " FROM timeline_tiles_v15 WHERE level >= 2 ORDER BY agent, track, level, bucket;"
                             "DROP TABLE timeline_tiles_v15",
                         "cannot renumber the tile levels");
      !s.ok())
    return s;
  bool empty = false;
  {
    Statement any;
    if (Status s = Statement::prepare(db, "SELECT 1 FROM timeline_tiles LIMIT 1", any); !s.ok()) return s;
    Status error;
    empty = !any.step(error);
    if (!error.ok()) return error;
  }
  return empty ? tiles::rebuild(db) : Status();
}
// Version 12's locations table (a new UNIQUE constraint): made as a new
// store's, the rows copied from the old one.
const std::string kLocationsTableSql = schema::kLocations.create_sql();
// Version 8's op_rows view reads ops.gemm: the view is made again after the column.
const std::string kOpRowsViewSql = schema::op_rows_view_sql();
// Version 18's cast_rows view unpacks casts.codes' maker, version 19's casts.float8, and version 20
// lists casts.module and casts.parameter: made again.
const std::string kCastRowsViewSql = schema::cast_rows_view_sql();
// Version 13's counter tables (aggregate mode), as a new store's.
const std::string kCountTablesSql = schema::kCastCounts.create_sql() + schema::kOpCounts.create_sql();
// Version 14's shipping tables (docs/fleet.md), as a new store's.
const std::string kShipTablesSql = schema::kShipRollups.create_sql() + schema::kShipState.create_sql();
// Version 15's numerics table, as a new store's.
const std::string kNumericsTableSql = schema::kNumerics.create_sql(15);
// Version 17's segments of event tables, as a new store's.
const std::string kEventSegmentsTableSql = schema::kEventSegments.create_sql();
const Migration kMigrations[] = {
    {4, "DROP TABLE IF EXISTS kernels"},
    {5, "CREATE TABLE kernels(id INTEGER PRIMARY KEY, ts_ns INTEGER, duration_ns INTEGER, name INTEGER, "
        "codes INTEGER, device INTEGER, stream INTEGER, launch_seq INTEGER, bytes INTEGER, correlation_id INTEGER);"
        "ALTER TABLE agents ADD COLUMN kernels INTEGER NOT NULL DEFAULT 0;"
        "ALTER TABLE agents ADD COLUMN gpu_timing TEXT NOT NULL DEFAULT '';"
        "ALTER TABLE agents ADD COLUMN gpu_records_dropped INTEGER NOT NULL DEFAULT 0"},
    {6, "ALTER TABLE locations ADD COLUMN source TEXT NOT NULL DEFAULT ''", [](sqlite3* db) -> Status {
       return run_sql(db, kTilesTableSql, "cannot create timeline_tiles");
     }},
    // Older ops rows have no description: 0, as a new row without one.
    {7, "DROP VIEW op_rows; ALTER TABLE ops ADD COLUMN gemm INTEGER NOT NULL DEFAULT 0", [](sqlite3* db) -> Status {
       return run_sql(db, kOpRowsViewSql, "cannot create the op_rows view");
     }},
    {8, "ALTER TABLE agents ADD COLUMN overlay_errors TEXT NOT NULL DEFAULT '[]'"},
    // Agents stored before version 10 did not say their release: ''.
    {9, "ALTER TABLE agents ADD COLUMN castscope_version TEXT NOT NULL DEFAULT ''"},
    // Older samples counted no orphans nor totals: 0, as an older agent's do.
    {10, "ALTER TABLE cache_samples ADD COLUMN orphaned_casts INTEGER NOT NULL DEFAULT 0;"
         "ALTER TABLE cache_samples ADD COLUMN orphaned_bytes INTEGER NOT NULL DEFAULT 0;"
         "ALTER TABLE cache_samples ADD COLUMN cache_hits INTEGER NOT NULL DEFAULT 0;"
         "ALTER TABLE cache_samples ADD COLUMN released_casts INTEGER NOT NULL DEFAULT 0"},
    {11, "ALTER TABLE locations RENAME TO locations_v11", [](sqlite3* db) -> Status {
       return run_sql(db,
                      kLocationsTableSql +
                          "INSERT INTO locations(id, kind, file, line, function, stack, flags, source) "
                          "SELECT id, kind, file, line, function, stack, flags, source FROM locations_v11;"
                          "DROP TABLE locations_v11",
                      "cannot make the locations table again");
     }},
    // Agents stored before version 13 recorded every event: aggregate 0.
    {12, "ALTER TABLE agents ADD COLUMN aggregate INTEGER NOT NULL DEFAULT 0", [](sqlite3* db) -> Status {
       return run_sql(db, kCountTablesSql, "cannot create the counter tables");
     }},
    {13, "SELECT 1", [](sqlite3* db) -> Status {
       return run_sql(db, kShipTablesSql, "cannot create the shipping tables");
     }},
    {14, "ALTER TABLE agents ADD COLUMN numerics INTEGER NOT NULL DEFAULT 0", [](sqlite3* db) -> Status {
       return run_sql(db, kNumericsTableSql, "cannot create the numerics table");
     }},
    {15, "SELECT 1", renumber_tile_levels},
    // Tables made before keep id as their rowid, and no segments (event_segments.h).
    {16, "SELECT 1", [](sqlite3* db) -> Status {
       return run_sql(db, kEventSegmentsTableSql, "cannot create the event_segments table");
     }},
    // Older casts were all autocast's: their maker bits are 0 (CAST_MAKER_UNSPECIFIED), nothing to rewrite.
    {17, "DROP VIEW cast_rows", [](sqlite3* db) -> Status {
       return run_sql(db, kCastRowsViewSql, "cannot create the cast_rows view");
     }},
    // Older casts carry no float8 scaling: 0, as a new row without one.
    {18, "DROP VIEW cast_rows; ALTER TABLE casts ADD COLUMN float8 INTEGER NOT NULL DEFAULT 0;"
         "ALTER TABLE casts ADD COLUMN float8_zero_amax INTEGER NOT NULL DEFAULT 0;"
         "ALTER TABLE numerics ADD COLUMN saturated INTEGER NOT NULL DEFAULT 0", [](sqlite3* db) -> Status {
       return run_sql(db, kCastRowsViewSql, "cannot create the cast_rows view");
     }},
    // Older casts name no module: 0, as a new row outside any module call.
    {19, "DROP VIEW cast_rows; ALTER TABLE casts ADD COLUMN module INTEGER NOT NULL DEFAULT 0;"
         "ALTER TABLE casts ADD COLUMN parameter INTEGER NOT NULL DEFAULT 0", [](sqlite3* db) -> Status {
       return run_sql(db, kCastRowsViewSql, "cannot create the cast_rows view");
     }},
    // Older batches carry no drops or times: -1 drops, which the timeline reads
    // as unknown (their agent's losses are not placed, rather than all at its end).
    {20, "ALTER TABLE batches ADD COLUMN events_dropped_total INTEGER NOT NULL DEFAULT 0;"
         "ALTER TABLE batches ADD COLUMN first_ts_ns INTEGER NOT NULL DEFAULT 0;"
         "ALTER TABLE batches ADD COLUMN last_ts_ns INTEGER NOT NULL DEFAULT 0;"
         "UPDATE batches SET events_dropped_total = -1"},
};
constexpr int kOldestMigratedVersion = 4;
constexpr int kNewestMigrationFrom = 20;
static_assert(kNewestMigrationFrom == kSchemaVersion - 1,
              "a schema change needs its migration step (or a new kOldestMigratedVersion)");
// A read-only connection cannot migrate; it reads only the current version
// (version 11 lacks locations.also_consumed_at, which the readers select);
// version 12, without the counter tables, reads as a store of no aggregate run.
constexpr int kOldestReadableVersion = 12;

}  // namespace

Statement::~Statement() { sqlite3_finalize(stmt_); }

Statement& Statement::operator=(Statement&& other) noexcept {
  if (this != &other) {
    sqlite3_finalize(stmt_);
    stmt_ = other.stmt_;
    other.stmt_ = nullptr;
  }
  return *this;
}

Status Statement::prepare(sqlite3* db, std::string_view sql, Statement& out) {
  sqlite3_stmt* stmt = nullptr;
  if (sqlite3_prepare_v3(db, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &stmt, nullptr) !=
      SQLITE_OK)
    return Status::internal("cannot prepare \"" + std::string(sql.substr(0, 60)) + "\": " + sqlite3_errmsg(db));
  out = Statement();
  out.stmt_ = stmt;
  return {};
}

bool Statement::step(Status& error) {
  const int rc = sqlite3_step(stmt_);
  if (rc == SQLITE_ROW) return true;
  if (rc != SQLITE_DONE) {
    sqlite3* db = sqlite3_db_handle(stmt_);
    error = Status::internal(std::string(sqlite3_errmsg(db)) + " in \"" +
                             std::string(sqlite3_sql(stmt_)).substr(0, 60) + "\"");
  }
  return false;
}

Status Statement::run() {
  Status error;
  step(error);
  sqlite3_reset(stmt_);
  return error;
}

std::string Statement::column_text(int index) const {
  const auto* text = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, index));
  return text == nullptr ? std::string() : std::string(text, static_cast<size_t>(sqlite3_column_bytes(stmt_, index)));
}

Database::~Database() {
  sqlite3_close_v2(db_);
  if (writer_lock_fd_ >= 0) ::close(writer_lock_fd_);
}

Status Database::error(std::string_view what) const {
  return Status::internal(path_ + ": " + std::string(what) + ": " + (db_ ? sqlite3_errmsg(db_) : "no connection"));
}

Status Database::exec(const char* sql) {
  char* message = nullptr;
  if (sqlite3_exec(db_, sql, nullptr, nullptr, &message) == SQLITE_OK) return {};
  Status status = Status::internal(path_ + ": " + (message ? message : "error") + " in \"" +
                                   std::string(sql).substr(0, 60) + "\"");
  sqlite3_free(message);
  return status;
}

Status Database::open(const std::string& path, Mode mode) {
  path_ = path;
  std::error_code ec;
  const bool exists = std::filesystem::exists(path, ec);
  if (mode == Mode::kReadOnly && !exists) return Status::not_found(path + ": no such file (no castscope store here)");
  if (exists && !std::filesystem::is_regular_file(path, ec))
    return Status::failed_precondition(path + ": not a regular file");

  if (mode == Mode::kReadWrite) {
    // SQLite's own locks are per transaction; two writing collectors would
    // each trust their cached counters and ids. One writer per file.
    // A new store is created here, 0600 whatever the umask, before SQLite
    // opens it: SQLite gives -wal and -shm the database file's mode, and
    // the events name the users' files and shapes. An existing store keeps
    // its mode (it may be shared on purpose).
    writer_lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (writer_lock_fd_ < 0) return Status::failed_precondition(path + ": cannot open for writing");
    if (::flock(writer_lock_fd_, LOCK_EX | LOCK_NB) != 0)
      return Status::failed_precondition(path + ": another castscope-collector is writing this store");
  }

  const int flags = mode == Mode::kReadOnly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
  if (sqlite3_open_v2(path.c_str(), &db_, flags | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK)
    return error("cannot open");
  sqlite3_busy_timeout(db_, 5000);
  sqlite3_extended_result_codes(db_, 0);
  return check_or_create_schema(mode);
}

Status Database::check_or_create_schema(Mode mode) {
  auto read_int = [&](const char* sql, int64_t& value) -> Status {
    Statement stmt;
    if (Status s = Statement::prepare(db_, sql, stmt); !s.ok()) {
      if (sqlite3_errcode(db_) == SQLITE_NOTADB)
        return Status::failed_precondition(path_ + ": not an SQLite database (is it the right file?)");
      return Status::failed_precondition(path_ + ": " + s.message());
    }
    Status error;
    value = stmt.step(error) ? stmt.column_int(0) : 0;
    if (!error.ok()) {
      if (sqlite3_errcode(db_) == SQLITE_NOTADB)
        return Status::failed_precondition(path_ + ": not an SQLite database (is it the right file?)");
      return Status::failed_precondition(path_ + ": " + error.message());
    }
    return {};
  };
  int64_t application_id = 0;
  int64_t user_version = 0;
  int64_t tables = 0;
  if (Status s = read_int("PRAGMA application_id", application_id); !s.ok()) return s;
  if (Status s = read_int("PRAGMA user_version", user_version); !s.ok()) return s;
  if (Status s = read_int("SELECT count(*) FROM sqlite_master", tables); !s.ok()) return s;

  if (application_id == 0 && user_version == 0 && tables == 0) {
    if (mode == Mode::kReadOnly) return Status::failed_precondition(path_ + ": empty database, not a castscope store");
    // 64 KiB pages: a row's b-tree descent crosses fewer levels, and a
    // commit writes fewer page headers (docs/performance.md, "Writer, second pass").
    if (Status s = exec("PRAGMA page_size=65536; PRAGMA journal_mode=WAL"); !s.ok()) return s;
    const std::string create = "BEGIN;" + schema::create_schema_sql() + "PRAGMA application_id=" +
                               std::to_string(kApplicationId) + ";PRAGMA user_version=" +
                               std::to_string(kSchemaVersion) + ";COMMIT;";
    if (Status s = exec(create.c_str()); !s.ok()) return s;
    application_id = kApplicationId;
    user_version = kSchemaVersion;
  }
  if (application_id != kApplicationId)
    return Status::failed_precondition(path_ + ": an SQLite database but not a castscope store (application_id " +
                                       std::to_string(application_id) + ")");
  if (Status s = check_version(mode, static_cast<int>(user_version)); !s.ok()) return s;
  schema_version_ = mode == Mode::kReadWrite ? kSchemaVersion : static_cast<int>(user_version);
  if (mode == Mode::kReadWrite) {
    if (Status s = exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-16384;"
                        "PRAGMA temp_store=MEMORY");
        !s.ok())
      return s;
  }
  return {};
}

Status Database::check_version(Mode mode, int version) {
  const std::string found = path_ + ": castscope store schema version " + std::to_string(version);
  if (version > kSchemaVersion)
    return Status::failed_precondition(found + " is newer than this collector's (" + std::to_string(kSchemaVersion) +
                                       "): use a castscope-collector at least as new as the one that wrote it");
  if (version < kOldestMigratedVersion)
    return Status::failed_precondition(
        found + " is older than this collector can upgrade (" + std::to_string(kOldestMigratedVersion) + " to " +
        std::to_string(kSchemaVersion) +
        "): read it with the castscope release that wrote it, or move it aside and let the collector start a new "
        "store");
  if (version == kSchemaVersion) return {};
  if (mode == Mode::kReadOnly) {
    if (version >= kOldestReadableVersion) return {};
    return Status::failed_precondition(found + ", older than this collector's (" + std::to_string(kSchemaVersion) +
                                       "): run `castscope-collector serve --db " + path_ +
                                       "` once to upgrade it in place");
  }
  return migrate(version);
}

Status Database::migrate(int version) {
  const int from = version;
  if (Status s = exec("BEGIN IMMEDIATE"); !s.ok()) return s;
  for (const Migration& step : kMigrations) {
    if (step.from != version) continue;
    const std::string sql = std::string(step.sql) + ";PRAGMA user_version=" + std::to_string(step.from + 1);
    Status s = exec(sql.c_str());
    if (s.ok() && step.after != nullptr) s = step.after(db_);
    if (!s.ok()) {
      (void)exec("ROLLBACK");
      return Status::failed_precondition(s.message() + " (upgrading the store from schema version " +
                                         std::to_string(step.from) + ")");
    }
    ++version;
  }
  if (Status s = exec("COMMIT"); !s.ok()) return s;
  log::logger("collector").info("{}: upgraded the store from schema version {} to {}", path_, from, version);
  return {};
}

Status WalCheckpointer::start(sqlite3* writer, const std::string& path, const Options& options) {
  options_ = options;
  path_ = path;
  if (sqlite3_open_v2(path.c_str(), &db_, SQLITE_OPEN_READWRITE | SQLITE_OPEN_NOMUTEX, nullptr) != SQLITE_OK) {
    Status status = Status::internal(path + ": cannot open the checkpoint connection: " +
                                     (db_ ? sqlite3_errmsg(db_) : "out of memory"));
    sqlite3_close_v2(db_);
    db_ = nullptr;
    return status;
  }
  sqlite3_busy_timeout(db_, 5000);
  if (sqlite3_exec(db_, "PRAGMA synchronous=NORMAL", nullptr, nullptr, nullptr) != SQLITE_OK) {
    Status status = Status::internal(path + ": checkpoint connection: " + sqlite3_errmsg(db_));
    sqlite3_close_v2(db_);
    db_ = nullptr;
    return status;
  }
  sqlite3_stmt* page_size = nullptr;
  int64_t page_bytes = 0;
  if (sqlite3_prepare_v2(writer, "PRAGMA page_size", -1, &page_size, nullptr) == SQLITE_OK &&
      sqlite3_step(page_size) == SQLITE_ROW)
    page_bytes = sqlite3_column_int64(page_size, 0);
  sqlite3_finalize(page_size);
  if (page_bytes <= 0) {
    Status status = Status::internal(path + ": cannot read the page size: " + sqlite3_errmsg(writer));
    sqlite3_close_v2(db_);
    db_ = nullptr;
    return status;
  }
  start_frames_ = static_cast<int>(std::max<int64_t>(1, options.start_bytes / page_bytes));
  max_frames_ = static_cast<int>(std::max<int64_t>(start_frames_, options.max_bytes / page_bytes));
  wait_frames_ = max_frames_;
  writer_ = writer;
  sqlite3_wal_hook(writer_, &WalCheckpointer::on_wal_commit, this);  // replaces the automatic checkpoint
  thread_ = std::thread([this] { loop(); });
  return {};
}

void WalCheckpointer::stop() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_checkpointer_.notify_one();
  if (thread_.joinable()) thread_.join();
  if (writer_ != nullptr) sqlite3_wal_autocheckpoint(writer_, start_frames_);
  writer_ = nullptr;
  sqlite3_close_v2(db_);
  db_ = nullptr;
}

int WalCheckpointer::on_wal_commit(void* self, sqlite3*, const char*, int frames) {
  static_cast<WalCheckpointer*>(self)->wal_frames_ = frames;
  return SQLITE_OK;
}

void WalCheckpointer::after_commit() {
  if (wal_frames_ < start_frames_) return;
  {
    std::lock_guard lock(mutex_);
    ++requested_;
  }
  wake_checkpointer_.notify_one();
}

void WalCheckpointer::before_begin() {
  if (wal_frames_ < wait_frames_ || !thread_.joinable()) return;
  std::unique_lock lock(mutex_);
  const uint64_t generation = ++requested_;  // a checkpoint that starts now covers every commit
  writer_waiting_ = true;
  wake_checkpointer_.notify_one();
  const bool completed = wake_writer_.wait_for(lock, std::chrono::milliseconds(options_.max_wait_ms),
                                               [&] { return completed_ >= generation || stopping_; });
  writer_waiting_ = false;
  if (completed) {
    wait_frames_ = max_frames_;
  } else {
    // Most likely a reader holds an old snapshot; SQLite cannot rewind the
    // WAL until it lets go. Do not wait again before the WAL grows as much.
    wait_frames_ = wal_frames_ + max_frames_;
    log::logger("collector").warn("{}: the WAL has {} pages and a checkpoint could not complete in {} ms (a long read?)",
                         path_, wal_frames_, options_.max_wait_ms);
  }
  wal_frames_ = 0;  // the next commit tells
}

bool WalCheckpointer::behind() const {
  std::lock_guard lock(mutex_);
  return requested_ > completed_;
}

uint64_t WalCheckpointer::checkpoints() const {
  std::lock_guard lock(mutex_);
  return checkpoints_;
}

uint64_t WalCheckpointer::retries() const {
  std::lock_guard lock(mutex_);
  return retries_;
}

void WalCheckpointer::loop() {
  pthread_setname_np(pthread_self(), "cs-checkpoint");  // for perf and top -H
  std::unique_lock lock(mutex_);
  uint64_t attempted = 0;
  for (;;) {
    wake_checkpointer_.wait(lock, [&] { return stopping_ || requested_ > attempted; });
    if (stopping_) return;
    const uint64_t generation = requested_;
    attempted = generation;
    lock.unlock();
    int log_frames = 0;
    int copied_frames = 0;
    const int rc = sqlite3_wal_checkpoint_v2(db_, nullptr, SQLITE_CHECKPOINT_PASSIVE, &log_frames, &copied_frames);
    if (rc != SQLITE_OK && rc != SQLITE_BUSY)
      log::logger("collector").error("{}: checkpoint failed: {}", path_, sqlite3_errmsg(db_));
    lock.lock();
    ++checkpoints_;
    if (rc == SQLITE_OK && copied_frames == log_frames) {
      completed_ = std::max(completed_, generation);
      wake_writer_.notify_all();
    } else if ((rc == SQLITE_OK || rc == SQLITE_BUSY) && writer_waiting_ && !stopping_) {
      // A reader's snapshot (a page's query, a few ms) stopped the copy short
      // of the WAL's end. The writer waits and adds nothing meanwhile, so the
      // next attempt after that read completes: try again soon rather than
      // leave the writer to its full max_wait_ms (seconds of ingest lost each
      // time a query overlapped the one attempt).
      ++retries_;
      wake_checkpointer_.wait_for(lock, kRetryInterval, [&] { return stopping_; });
      attempted = generation - 1;  // this generation again, unless a newer one was asked for meanwhile
    }
  }
}

}  // namespace castscope::collector
