#include "server/src/store/sqlite_store.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>

#include "common/log/logger.h"
#include "server/src/store/event_columns.h"

namespace castscope::collector {

namespace {

// Version 2 (version 1 had thread, arg_index and list_index as columns of
// casts; now packed into casts.slot). Identity columns of agents are kept from their first batch;
// counters are maintained by the writer (so summaries never scan events).
// Event tables pack small fields (event_columns.h: codes, input_dtypes,
// autocast_enabled); the views cast_rows and op_rows unpack them for SQL.
// casts.shape is the dims as native-endian int64s. String and location
// columns hold ids into strings and locations, 0 meaning none.
constexpr const char* kSchemaSql = R"sql(
CREATE TABLE runs(
  id INTEGER PRIMARY KEY,
  run_id TEXT NOT NULL UNIQUE,
  first_seen_unix_ns INTEGER NOT NULL,
  last_seen_unix_ns INTEGER NOT NULL);
CREATE TABLE agents(
  id INTEGER PRIMARY KEY,
  run INTEGER NOT NULL REFERENCES runs(id),
  agent_id TEXT NOT NULL,
  pid INTEGER NOT NULL,
  rank INTEGER NOT NULL,
  local_rank INTEGER NOT NULL,
  world_size INTEGER NOT NULL,
  hostname TEXT NOT NULL,
  torch_version TEXT NOT NULL,
  command TEXT NOT NULL,
  policy_hash TEXT NOT NULL,
  policy_files TEXT NOT NULL,  -- JSON array of paths
  batches INTEGER NOT NULL DEFAULT 0,
  casts INTEGER NOT NULL DEFAULT 0,
  ops INTEGER NOT NULL DEFAULT 0,
  cache_samples INTEGER NOT NULL DEFAULT 0,
  first_sequence INTEGER NOT NULL DEFAULT 0,
  last_sequence INTEGER NOT NULL DEFAULT 0,
  events_recorded_total INTEGER NOT NULL DEFAULT 0,
  events_dropped_total INTEGER NOT NULL DEFAULT 0,
  internal_errors INTEGER NOT NULL DEFAULT 0,
  finished INTEGER NOT NULL DEFAULT 0,
  UNIQUE(run, agent_id));
CREATE TABLE batches(
  agent INTEGER NOT NULL,
  sequence INTEGER NOT NULL,
  received_unix_ns INTEGER NOT NULL,
  n_events INTEGER NOT NULL,
  PRIMARY KEY(agent, sequence)) WITHOUT ROWID;
CREATE TABLE strings(
  id INTEGER PRIMARY KEY,
  text TEXT NOT NULL UNIQUE);
CREATE TABLE locations(
  id INTEGER PRIMARY KEY,
  kind INTEGER NOT NULL,
  file TEXT NOT NULL,
  line INTEGER NOT NULL,
  function TEXT NOT NULL,
  stack TEXT NOT NULL,
  flags INTEGER NOT NULL DEFAULT 0,  -- bit 0: inside a scripted autocast(enabled=False) block
  UNIQUE(kind, file, line, function, stack, flags));
CREATE TABLE casts(
  id INTEGER PRIMARY KEY,
  ts_ns INTEGER, op INTEGER, arg_name INTEGER, slot INTEGER, codes INTEGER, shape BLOB, bytes INTEGER,
  op_seq INTEGER, source_version INTEGER, cached_version INTEGER, location INTEGER);
CREATE TABLE ops(
  id INTEGER PRIMARY KEY,
  ts_ns INTEGER, thread INTEGER, op INTEGER, codes INTEGER, input_dtypes INTEGER, cpu_duration_ns INTEGER,
  location INTEGER, autocast_enabled INTEGER, autocast_nesting INTEGER);
CREATE TABLE cache_samples(
  id INTEGER PRIMARY KEY,
  ts_ns INTEGER, trigger INTEGER, iteration INTEGER, live_casts INTEGER, live_bytes INTEGER);
CREATE TABLE kernels(
  id INTEGER PRIMARY KEY,
  start_ns INTEGER, end_ns INTEGER, name INTEGER, device INTEGER, stream INTEGER, op_seq INTEGER);
CREATE TABLE findings(
  id INTEGER PRIMARY KEY,
  run INTEGER NOT NULL REFERENCES runs(id),
  kind TEXT NOT NULL,
  severity TEXT NOT NULL,
  summary TEXT NOT NULL,
  details_json TEXT NOT NULL);
CREATE VIEW cast_rows AS SELECT
  id >> 40 AS agent, id & 0xFFFFFFFFFF AS seq, ts_ns, )sql" CASTSCOPE_SLOT_THREAD_SQL R"sql( AS thread, op,
  )sql" CASTSCOPE_SLOT_ARG_INDEX_SQL R"sql( AS arg_index, arg_name, )sql" CASTSCOPE_SLOT_LIST_INDEX_SQL R"sql( AS list_index,
  codes & 63 AS policy, (codes >> 6) & 63 AS src_dtype, (codes >> 12) & 63 AS dst_dtype, (codes >> 18) & 63 AS outcome,
  (codes >> 24) & 63 AS device_type, (codes >> 30) & 63 AS role, (codes >> 36) & 63 AS cache,
  (codes >> 42) & 63 AS mode, (codes >> 48) & 63 AS phase, (codes >> 54) & 1 AS shape_truncated,
  (codes >> 55) & 1 AS round_trip,
  shape, bytes, op_seq, source_version, cached_version, location
  FROM casts;
CREATE VIEW op_rows AS SELECT
  id >> 40 AS agent, id & 0xFFFFFFFFFF AS seq, ts_ns, thread, op,
  codes & 63 AS policy, (codes >> 6) & 63 AS device_type, (codes >> 12) & 63 AS output_dtype,
  (codes >> 18) & 63 AS outcome, (codes >> 24) & 63 AS autocast_dtype, (codes >> 30) & 63 AS mode,
  (codes >> 36) & 63 AS phase, (codes >> 42) & 63 AS probe_reason, input_dtypes, cpu_duration_ns, location, autocast_enabled, autocast_nesting
  FROM ops;
)sql";

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
    writer_lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
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
    if (Status s = exec("PRAGMA page_size=16384; PRAGMA journal_mode=WAL"); !s.ok()) return s;
    const std::string create = std::string("BEGIN;") + kSchemaSql + "PRAGMA application_id=" +
                               std::to_string(kApplicationId) + ";PRAGMA user_version=" +
                               std::to_string(kSchemaVersion) + ";COMMIT;";
    if (Status s = exec(create.c_str()); !s.ok()) return s;
    application_id = kApplicationId;
    user_version = kSchemaVersion;
  }
  if (application_id != kApplicationId)
    return Status::failed_precondition(path_ + ": an SQLite database but not a castscope store (application_id " +
                                       std::to_string(application_id) + ")");
  if (user_version != kSchemaVersion)
    return Status::failed_precondition(path_ + ": castscope store schema version " + std::to_string(user_version) +
                                       ", this collector reads version " + std::to_string(kSchemaVersion));
  if (mode == Mode::kReadWrite) {
    if (Status s = exec("PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-65536;"
                        "PRAGMA temp_store=MEMORY");
        !s.ok())
      return s;
  }
  return {};
}

Status WalCheckpointer::start(sqlite3* writer, const std::string& path, const Options& options) {
  options_ = options;
  path_ = path;
  wait_frames_ = options.max_frames;
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
  if (writer_ != nullptr) sqlite3_wal_autocheckpoint(writer_, options_.start_frames);
  writer_ = nullptr;
  sqlite3_close_v2(db_);
  db_ = nullptr;
}

int WalCheckpointer::on_wal_commit(void* self, sqlite3*, const char*, int frames) {
  static_cast<WalCheckpointer*>(self)->wal_frames_ = frames;
  return SQLITE_OK;
}

void WalCheckpointer::after_commit() {
  if (wal_frames_ < options_.start_frames) return;
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
  wake_checkpointer_.notify_one();
  if (wake_writer_.wait_for(lock, std::chrono::milliseconds(options_.max_wait_ms),
                            [&] { return completed_ >= generation || stopping_; })) {
    wait_frames_ = options_.max_frames;
  } else {
    // Most likely a reader holds an old snapshot; SQLite cannot rewind the
    // WAL until it lets go. Do not wait again before the WAL grows as much.
    wait_frames_ = wal_frames_ + options_.max_frames;
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

void WalCheckpointer::loop() {
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
    }
  }
}

}  // namespace castscope::collector
