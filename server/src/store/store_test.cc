#include <gtest/gtest.h>
#include <google/protobuf/util/message_differencer.h>
#include <sys/stat.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "server/src/batch/batch_validation.h"
#include "server/src/batch/stored_events.h"
#include "server/src/store/event_columns.h"
#include "server/src/store/sqlite_store.h"
#include "server/src/store/store_queries.h"
#include "server/src/store/store_reader.h"
#include "server/src/store/store_schema.h"
#include "server/src/store/store_writer.h"
#include "server/src/store/timeline_tiles.h"
#include "server/testing/older_stores.h"
#include "server/testing/test_batches.h"

namespace castscope::collector {
namespace {

using testing::make_batch;
using testing::temp_dir;

Status store(StoreWriter& writer, const v1::Batch& batch, bool& duplicate) {
  if (Status s = writer.begin(); !s.ok()) return s;
  if (Status s = writer.store_batch(batch, 1000, duplicate); !s.ok()) return s;
  return writer.commit();
}

v1::QueryEventsResponse query(const std::string& db, const v1::EventFilter& filter) {
  std::unique_ptr<StoreReader> reader;
  EXPECT_TRUE(StoreReader::open(db, reader).ok());
  v1::QueryEventsResponse response;
  const Status status = reader->query_events(filter, response);
  EXPECT_TRUE(status.ok()) << status.message();
  return response;
}

// `batch` with its first event's op described as a GEMM (A, B, output
// dtypes), called 255 times (calls' top), mixed.
v1::Batch with_gemm(v1::Batch batch, v1::GemmCompute compute, v1::DType a, v1::DType b, v1::DType d) {
  v1::GemmDescription& gemm = *batch.mutable_events(0)->mutable_op()->mutable_gemm();
  gemm.set_compute(compute);
  gemm.set_a_type(a);
  gemm.set_b_type(b);
  gemm.set_d_type(d);
  gemm.set_calls(255);
  gemm.set_mixed(true);
  return batch;
}

TEST(SqliteStore, RoundTripResolvesStringsAndLocations) {
  const std::string db = (temp_dir("roundtrip") / "store.db").string();
  // The gemm's fields at their top; a cast's float8 scaling at its ends (casts.float8's 16 bits each).
  v1::Batch batch = with_gemm(make_batch("run-1", "agent-1", 1), v1::GEMM_COMPUTE_OTHER, v1::DTYPE_OTHER,
                              v1::DTYPE_BFLOAT16, v1::DTYPE_FLOAT32);
  v1::Float8Scaling& float8 = *batch.mutable_events(1)->mutable_cast()->mutable_float8();
  float8.set_scale_log2_min(-32768);
  float8.set_scale_log2_max(32767);
  float8.set_amax_log2_min(0);
  float8.set_amax_log2_max(-5);
  float8.set_zero_amax(65535);
  ASSERT_TRUE(validate_batch(batch, BatchLimits()).ok());
  {
    std::unique_ptr<StoreWriter> writer;
    ASSERT_TRUE(StoreWriter::open(db, writer).ok());
    bool duplicate = true;
    const Status status = store(*writer, batch, duplicate);
    ASSERT_TRUE(status.ok()) << status.message();
    EXPECT_FALSE(duplicate);
  }
  v1::EventFilter filter;
  filter.set_run_id("run-1");
  const v1::QueryEventsResponse response = query(db, filter);

  // What the store gives back is what a subscriber is given: the batch's events, resolved.
  std::vector<v1::StoredEvent> expected;
  resolve_batch_events(batch, expected);
  ASSERT_EQ(response.events_size(), static_cast<int>(expected.size()));
  EXPECT_FALSE(response.truncated());
  for (size_t i = 0; i < expected.size(); ++i)
    EXPECT_TRUE(google::protobuf::util::MessageDifferencer::Equals(response.events(static_cast<int>(i)), expected[i]))
        << "event " << i << "\nstored:   " << response.events(static_cast<int>(i)).ShortDebugString()
        << "\nexpected: " << expected[i].ShortDebugString();
  const v1::CastEvent& cast = response.events(1).event().cast();
  EXPECT_EQ(cast.op(), "aten::linear");
  EXPECT_EQ(cast.arg_name(), "weight");
  EXPECT_EQ(cast.location().file(), "/src/model.py");
  ASSERT_EQ(cast.location().stack_size(), 2);
  EXPECT_EQ(cast.location().stack(1), "/src/train.py:7 <module>");
  ASSERT_EQ(cast.location().also_consumed_at_size(), 1);
  EXPECT_EQ(cast.location().also_consumed_at(0), "/src/model.py:44");
  EXPECT_EQ(cast.shape(2), 16);
}

// The events name users' files and shapes: a new store is 0600, and so are
// the -wal and -shm files SQLite makes with the database file's mode.
TEST(SqliteStore, NewStoreIsPrivateWhateverTheUmask) {
  const std::filesystem::path dir = temp_dir("private");
  const std::string db = (dir / "store.db").string();
  const mode_t previous = ::umask(022);
  std::unique_ptr<StoreWriter> writer;
  const Status opened = StoreWriter::open(db, writer);
  ::umask(previous);
  ASSERT_TRUE(opened.ok()) << opened.message();
  bool duplicate = false;
  ASSERT_TRUE(store(*writer, make_batch("run", "agent", 1), duplicate).ok());
  for (const char* name : {"store.db", "store.db-wal", "store.db-shm"}) {
    const auto permissions = std::filesystem::status(dir / name).permissions();
    EXPECT_EQ(permissions & std::filesystem::perms::all, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write)
        << name;
  }
}

TEST(SqliteStore, FiltersByKindOpSiteAndPages) {
  const std::string db = (temp_dir("filters") / "store.db").string();
  {
    std::unique_ptr<StoreWriter> writer;
    ASSERT_TRUE(StoreWriter::open(db, writer).ok());
    bool duplicate = false;
    ASSERT_TRUE(store(*writer, make_batch("run", "a", 1, 1), duplicate).ok());
    ASSERT_TRUE(store(*writer, make_batch("run", "b", 1, 1), duplicate).ok());
  }
  v1::EventFilter filter;
  filter.set_run_id("run");
  filter.set_kind(v1::EventFilter::KIND_CAST);
  EXPECT_EQ(query(db, filter).events_size(), 6);
  filter.set_agent_id("b");
  EXPECT_EQ(query(db, filter).events_size(), 3);
  filter.set_file("/src/model.py");
  filter.set_line(42);
  EXPECT_EQ(query(db, filter).events_size(), 2);  // the third cast has no location
  filter.set_line(43);
  EXPECT_EQ(query(db, filter).events_size(), 0);
  filter.clear_file();
  filter.clear_line();
  filter.set_op("aten::nothing");
  EXPECT_EQ(query(db, filter).events_size(), 0);

  v1::EventFilter page;
  page.set_run_id("run");
  page.set_agent_id("a");
  page.set_limit(2);
  v1::QueryEventsResponse first = query(db, page);
  ASSERT_EQ(first.events_size(), 2);
  EXPECT_TRUE(first.truncated());
  page.set_after_seq(first.events(1).event().cast().seq());
  v1::QueryEventsResponse second = query(db, page);
  ASSERT_EQ(second.events_size(), 2);
  EXPECT_EQ(second.events(0).event().cast().seq(), 3u);
}

TEST(SqliteStore, SameBatchTwiceIsStoredOnce) {
  const std::string db = (temp_dir("dedup") / "store.db").string();
  std::unique_ptr<StoreWriter> writer;
  ASSERT_TRUE(StoreWriter::open(db, writer).ok());
  bool duplicate = false;
  ASSERT_TRUE(store(*writer, make_batch("run", "agent", 1), duplicate).ok());
  EXPECT_FALSE(duplicate);
  ASSERT_TRUE(store(*writer, make_batch("run", "agent", 1), duplicate).ok());
  EXPECT_TRUE(duplicate);
  ASSERT_TRUE(store(*writer, make_batch("run", "agent", 3, 100), duplicate).ok());
  EXPECT_FALSE(duplicate);

  std::unique_ptr<StoreReader> reader;
  ASSERT_TRUE(StoreReader::open(db, reader).ok());
  v1::ListRunsResponse runs;
  ASSERT_TRUE(reader->list_runs(runs).ok());
  ASSERT_EQ(runs.runs_size(), 1);
  ASSERT_EQ(runs.runs(0).agents_size(), 1);
  const v1::AgentSummary& agent = runs.runs(0).agents(0);
  EXPECT_EQ(agent.batches(), 2u);
  EXPECT_EQ(agent.casts(), 6u);
  EXPECT_EQ(agent.ops(), 2u);
  EXPECT_EQ(agent.cache_samples(), 2u);
  EXPECT_EQ(agent.first_sequence(), 1u);
  EXPECT_EQ(agent.last_sequence(), 3u);
  EXPECT_EQ(agent.missing_sequences(), 1u);
  EXPECT_EQ(agent.events_recorded_total(), 30u);
  EXPECT_EQ(agent.events_dropped_total(), 3u);
  EXPECT_EQ(agent.identity().hostname(), "host");
  EXPECT_EQ(agent.identity().rank(), -1);

  v1::ListSequencesRequest request;
  request.set_run_id("run");
  request.set_agent_id("agent");
  v1::ListSequencesResponse sequences;
  ASSERT_TRUE(reader->list_sequences(request, sequences).ok());
  EXPECT_EQ(std::vector<uint64_t>(sequences.batch_sequences().begin(), sequences.batch_sequences().end()),
            (std::vector<uint64_t>{1, 3}));
}

TEST(SqliteStore, DataAndDedupSurviveReopening) {
  const std::string db = (temp_dir("reopen") / "store.db").string();
  bool duplicate = false;
  {
    std::unique_ptr<StoreWriter> writer;
    ASSERT_TRUE(StoreWriter::open(db, writer).ok());
    ASSERT_TRUE(store(*writer, make_batch("run", "agent", 1), duplicate).ok());
  }
  {
    std::unique_ptr<StoreWriter> writer;
    const Status status = StoreWriter::open(db, writer);
    ASSERT_TRUE(status.ok()) << status.message();
    ASSERT_TRUE(store(*writer, make_batch("run", "agent", 1), duplicate).ok());
    EXPECT_TRUE(duplicate);
    v1::Batch final_batch = make_batch("run", "agent", 2, 50);
    final_batch.set_final(true);
    ASSERT_TRUE(store(*writer, final_batch, duplicate).ok());
    EXPECT_FALSE(duplicate);
  }
  v1::ListRunsResponse runs;
  ASSERT_TRUE(testing::list_runs(db, runs).ok());
  ASSERT_EQ(runs.runs_size(), 1);
  EXPECT_EQ(runs.runs(0).agents(0).batches(), 2u);
  EXPECT_EQ(runs.runs(0).agents(0).casts(), 6u);
  EXPECT_TRUE(runs.runs(0).agents(0).finished());
}

TEST(SqliteStore, OneWriterPerFile) {
  const std::string db = (temp_dir("onewriter") / "store.db").string();
  std::unique_ptr<StoreWriter> first, second;
  ASSERT_TRUE(StoreWriter::open(db, first).ok());
  const Status status = StoreWriter::open(db, second);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), db + ": another castscope-collector is writing this store");
}

TEST(SqliteStore, RefusesFilesThatAreNotItsStore) {
  const auto dir = temp_dir("badfiles");
  const std::string text = (dir / "notes.txt").string();
  std::ofstream(text) << "this is not a database, just some text that is long enough to have a header........";
  std::unique_ptr<StoreWriter> writer;
  Status status = StoreWriter::open(text, writer);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), text + ": not an SQLite database (is it the right file?)");

  std::unique_ptr<StoreReader> reader;
  status = StoreReader::open((dir / "missing.db").string(), reader);
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_EQ(status.message(), (dir / "missing.db").string() + ": no such file (no castscope store here)");

  // Another program's SQLite file, and a castscope store of another schema version.
  const std::string other = (dir / "other.db").string();
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(other.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE t(x)", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  status = StoreWriter::open(other, writer);
  EXPECT_EQ(status.message(), other + ": an SQLite database but not a castscope store (application_id 0)");

  const std::string newer = (dir / "newer.db").string();
  { ASSERT_TRUE(StoreWriter::open(newer, writer).ok()); }
  writer.reset();
  ASSERT_EQ(sqlite3_open(newer.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, ("PRAGMA user_version=" + std::to_string(kSchemaVersion + 1)).c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);
  status = StoreReader::open(newer, reader);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), newer + ": castscope store schema version " + std::to_string(kSchemaVersion + 1) + " is newer than this collector's (" +
                                  std::to_string(kSchemaVersion) +
                                  "): use a castscope-collector at least as new as the one that wrote it");
  status = StoreWriter::open(newer, writer);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
}

int64_t pragma(const std::string& db, const std::string& sql) {
  sqlite3* handle = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* statement = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(handle, sql.c_str(), -1, &statement, nullptr), SQLITE_OK);
  const int64_t value = sqlite3_step(statement) == SQLITE_ROW ? sqlite3_column_int64(statement, 0) : -1;
  sqlite3_finalize(statement);
  sqlite3_close(handle);
  return value;
}

// The first row of `sql`'s answer, its columns as integers (empty: no row).
std::vector<int64_t> first_row(const std::string& db, const std::string& sql) {
  sqlite3* handle = nullptr;
  EXPECT_EQ(sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* statement = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(handle, sql.c_str(), -1, &statement, nullptr), SQLITE_OK) << sqlite3_errmsg(handle);
  std::vector<int64_t> row;
  if (sqlite3_step(statement) == SQLITE_ROW)
    for (int i = 0; i < sqlite3_column_count(statement); ++i) row.push_back(sqlite3_column_int64(statement, i));
  sqlite3_finalize(statement);
  sqlite3_close(handle);
  return row;
}

void exec_sql(const std::string& db, const char* sql) {
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(handle, sql, nullptr, nullptr, nullptr), SQLITE_OK) << sqlite3_errmsg(handle);
  sqlite3_close(handle);
}

// A store of schema `version` (4 to 16) holding make_batch("run", "agent", 1):
// today's store taken back step by step (server/testing/older_stores.h).
void make_version_store(const std::string& db, int version) {
  ASSERT_TRUE(testing::store_batches(db, {make_batch("run", "agent", 1)}).ok());
  const Status downgraded = testing::downgrade_store(db, version);
  ASSERT_TRUE(downgraded.ok()) << downgraded.message();
}

// Every column of `table` with its type, as SQLite reports them.
std::string table_columns(const std::string& db, const std::string& table) {
  sqlite3* handle = nullptr;
  EXPECT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  const std::string sql = "SELECT name, type, \"notnull\", dflt_value FROM pragma_table_info('" + table + "')";
  EXPECT_EQ(sqlite3_prepare_v2(handle, sql.c_str(), -1, &stmt, nullptr), SQLITE_OK);
  std::string out;
  while (sqlite3_step(stmt) == SQLITE_ROW)
    for (int c = 0; c < 4; ++c) {
      const unsigned char* text = sqlite3_column_text(stmt, c);
      out += (text != nullptr ? reinterpret_cast<const char*>(text) : "NULL") + std::string(c == 3 ? "\n" : " ");
    }
  sqlite3_finalize(stmt);
  sqlite3_close(handle);
  return out;
}

// Every row of the tiles table, in key order, as text.
std::string tile_rows(const std::string& db) {
  sqlite3* handle = nullptr;
  EXPECT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(handle, "SELECT * FROM timeline_tiles ORDER BY agent, track, level, bucket", -1, &stmt, nullptr),
            SQLITE_OK);
  std::string out;
  while (sqlite3_step(stmt) == SQLITE_ROW) {
    for (int c = 0; c < sqlite3_column_count(stmt); ++c) out += std::to_string(sqlite3_column_int64(stmt, c)) + " ";
    out += "\n";
  }
  sqlite3_finalize(stmt);
  sqlite3_close(handle);
  return out;
}

// What the viewer reads of every tile of agent row 1: its tracks, then each
// track's tiles at every level, as text.
std::string read_all_tiles(const Database& store) {
  std::vector<tiles::TrackSummary> tracks;
  EXPECT_TRUE(tiles::read_track_summaries(store, 1, tracks).ok());
  std::string out;
  for (const tiles::TrackSummary& track : tracks) {
    out += "track " + std::to_string(track.track) + " events " + std::to_string(track.events) + " buckets " +
           std::to_string(track.first_bucket) + ".." + std::to_string(track.last_bucket) + "\n";
    for (int level = 0; level < tiles::kTileLevels; ++level) {
      std::vector<tiles::TileRow> rows;
      EXPECT_TRUE(tiles::read_tiles(store, 1, track.track, level, 0, INT64_MAX, rows).ok());
      for (const tiles::TileRow& row : rows)
        out += std::to_string(level) + "/" + std::to_string(row.bucket) + ": " + std::to_string(row.counts.events()) +
               " events, seqs " + std::to_string(row.counts.min_seq) + ".." + std::to_string(row.counts.max_seq) + "\n";
    }
  }
  return out;
}

// The statement SQLite keeps for `table` (its columns and constraints).
std::string table_sql(const std::string& db, const std::string& table) {
  sqlite3* handle = nullptr;
  EXPECT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  EXPECT_EQ(sqlite3_prepare_v2(handle, "SELECT sql FROM sqlite_master WHERE name = ?", -1, &stmt, nullptr), SQLITE_OK);
  sqlite3_bind_text(stmt, 1, table.c_str(), -1, SQLITE_TRANSIENT);
  std::string out;
  if (sqlite3_step(stmt) == SQLITE_ROW) out = reinterpret_cast<const char*>(sqlite3_column_text(stmt, 0));
  sqlite3_finalize(stmt);
  sqlite3_close(handle);
  return out;
}

TEST(SqliteStore, UpgradesVersion4To20StoresToTheDeclaredSchema) {
  static_assert(kSchemaVersion == 21, "a new schema version: add its old-file test beside this one");
  const std::string fresh = (temp_dir("fresh") / "store.db").string();
  {
    std::unique_ptr<StoreWriter> writer;
    ASSERT_TRUE(StoreWriter::open(fresh, writer).ok());
  }
  {
    std::unique_ptr<StoreWriter> writer;
    ASSERT_TRUE(StoreWriter::open(fresh, writer).ok());
    bool duplicate = false;
    ASSERT_TRUE(store(*writer, make_batch("run", "agent", 1), duplicate).ok());
    ASSERT_TRUE(store(*writer, make_batch("run", "agent", 2, 10), duplicate).ok());
  }
  // The first batch alone: what an older store holds before its upgrade.
  const std::string first_batch = (temp_dir("first-batch") / "store.db").string();
  ASSERT_TRUE(testing::store_batches(first_batch, {make_batch("run", "agent", 1)}).ok());
  for (int version : {4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20}) {
    const std::string db = (temp_dir("version" + std::to_string(version)) / "store.db").string();
    make_version_store(db, version);

    std::unique_ptr<StoreReader> reader;
    const Status opened = StoreReader::open(db, reader);
    if (version < 12) {
      // A reader cannot migrate, and these versions lack columns it reads.
      EXPECT_EQ(opened.code(), StatusCode::kFailedPrecondition);
      EXPECT_NE(opened.message().find("once to upgrade it in place"), std::string::npos) << opened.message();
    } else {
      // Version 12 reads as it is (run_report_test reads a run from one),
      // its tiles where that version keeps each level.
      ASSERT_TRUE(opened.ok()) << opened.message();
      std::unique_ptr<StoreReader> today;
      ASSERT_TRUE(StoreReader::open(first_batch, today).ok());
      EXPECT_EQ(read_all_tiles(reader->database()), read_all_tiles(today->database()));
      EXPECT_NE(read_all_tiles(reader->database()), "");
      reader.reset();
    }
    EXPECT_EQ(pragma(db, "PRAGMA user_version"), version);

    // The writer upgrades it in place and goes on storing.
    {
      std::unique_ptr<StoreWriter> writer;
      const Status status = StoreWriter::open(db, writer);
      ASSERT_TRUE(status.ok()) << status.message();
      bool duplicate = false;
      ASSERT_TRUE(store(*writer, make_batch("run", "agent", 1), duplicate).ok());
      EXPECT_TRUE(duplicate);
      ASSERT_TRUE(store(*writer, make_batch("run", "agent", 2, 10), duplicate).ok());
      EXPECT_FALSE(duplicate);
    }
    EXPECT_EQ(pragma(db, "PRAGMA user_version"), kSchemaVersion);
    for (const char* table :
         {"kernels", "agents", "batches", "locations", "timeline_tiles", "ops", "op_rows", "cast_rows", "cache_samples",
          "cast_counts", "op_counts", "ship_rollups", "ship_state", "numerics", "event_segments"})
      EXPECT_EQ(table_columns(db, table), table_columns(fresh, table)) << table;
    // Its casts keep id as their rowid before 17 (event_segments.h); a new store's are SQLite's.
    EXPECT_EQ(pragma(db, "SELECT pk FROM pragma_table_info('casts') WHERE name = 'id'"), version < 17 ? 1 : 0);
    EXPECT_EQ(pragma(fresh, "SELECT pk FROM pragma_table_info('casts') WHERE name = 'id'"), 0);
    EXPECT_EQ(table_sql(db, "locations"), table_sql(fresh, "locations"));  // the new UNIQUE constraint too
    EXPECT_EQ(pragma(db, "SELECT count(*) FROM ops WHERE gemm <> 0"), 0);  // older ops had no description
    EXPECT_EQ(pragma(db, "SELECT count(*) FROM casts WHERE float8 <> 0 OR float8_zero_amax <> 0"), 0);  // nor scaling
    EXPECT_EQ(pragma(db, "SELECT count(*) FROM agents WHERE castscope_version <> ''"), 0);  // nor agents a release
    // The batch stored before the upgrade has no times (unknown); the one after has.
    EXPECT_EQ(pragma(db, "SELECT count(*) FROM batches WHERE last_ts_ns = 0"), 1);
    EXPECT_EQ(pragma(db, "SELECT events_dropped_total FROM batches WHERE sequence = 2"), 2);
    // The one stored before: its drops unknown, so its agent's losses are not placed (not all at its end).
    EXPECT_EQ(pragma(db, "SELECT events_dropped_total FROM batches WHERE sequence = 1"), -1);
    {
      std::unique_ptr<StoreReader> reader;
      ASSERT_TRUE(StoreReader::open(db, reader).ok());
      std::vector<StoreReader::BatchLoss> losses;
      int64_t last_dropped = 0;
      bool known = true;
      ASSERT_TRUE(reader->batch_losses(1, losses, last_dropped, known).ok());
      EXPECT_FALSE(known);
      EXPECT_TRUE(losses.empty());
    }
    EXPECT_EQ(pragma(db, "SELECT count(*) FROM agents WHERE aggregate <> 0"), 0);  // nor aggregate mode
    EXPECT_EQ(pragma(db, "SELECT count(*) FROM cache_samples WHERE orphaned_casts + orphaned_bytes + cache_hits + "
                         "released_casts <> 0"),
              0);  // nor samples orphans or totals
    // The tiles of the events stored before the upgrade are built from them:
    // the same rows as a store that wrote them all itself.
    EXPECT_EQ(tile_rows(db), tile_rows(fresh));
    EXPECT_NE(tile_rows(db), "");
    v1::EventFilter filter;
    filter.set_run_id("run");
    EXPECT_EQ(query(db, filter).events_size(), 10);
  }
}

// Casts of agent "a" with these seqs, in a batch of its own.
v1::Batch casts_batch(uint64_t sequence, std::initializer_list<uint64_t> seqs) {
  v1::Batch batch = testing::batch_head({.run_id = "run", .agent_id = "a", .pid = 1234, .rank = -1, .hostname = "host"},
                                        sequence);
  testing::add_strings(batch, 1, {"aten::linear"});
  for (uint64_t seq : seqs)
    testing::add<v1::specs::CastEvent>(batch, {.seq = seq, .ts_ns = 1000 + seq,
                                               .policy = v1::CAST_POLICY_LOWER_PRECISION_FP,
                                               .src_dtype = v1::DTYPE_FLOAT32, .dst_dtype = v1::DTYPE_BFLOAT16,
                                               .outcome = v1::CAST_OUTCOME_CAST, .device_type = v1::DEVICE_TYPE_CPU,
                                               .op_id = 1});
  return batch;
}

std::vector<uint64_t> cast_seqs(const std::string& db, const std::string& agent, uint32_t limit = 0,
                                uint64_t after_seq = 0) {
  v1::EventFilter filter;
  filter.set_run_id("run");
  filter.set_agent_id(agent);
  filter.set_kind(v1::EventFilter::KIND_CAST);
  filter.set_limit(limit);
  filter.set_after_seq(after_seq);
  std::vector<uint64_t> seqs;
  const v1::QueryEventsResponse response = query(db, filter);
  for (const v1::StoredEvent& event : response.events()) seqs.push_back(event.event().cast().seq());
  return seqs;
}

// SQLite picks the rowids (event_segments.h): rows read in seq order whatever
// order their batches came in, one agent's apart from another's, and a seq
// sent again in another batch is stored once.
TEST(SqliteStore, RowsReadInSeqOrderWhateverOrderTheirBatchesCameInAndARepeatedSeqIsStoredOnce) {
  const std::string db = (temp_dir("segments") / "store.db").string();
  {
    std::unique_ptr<StoreWriter> writer;
    ASSERT_TRUE(StoreWriter::open(db, writer).ok());
    bool duplicate = false;
    ASSERT_TRUE(store(*writer, make_batch("run", "a", 3, 11), duplicate).ok());  // casts 12-14, first
    ASSERT_TRUE(store(*writer, make_batch("run", "b", 1, 1), duplicate).ok());   // another agent's 2-4
    ASSERT_TRUE(store(*writer, make_batch("run", "a", 1, 1), duplicate).ok());   // 2-4
    ASSERT_TRUE(store(*writer, make_batch("run", "a", 2, 6), duplicate).ok());   // 7-9
    // Batch 4 holds batch 2's events again (a sender bug, not a replay): none is stored.
    ASSERT_TRUE(store(*writer, make_batch("run", "a", 4, 6), duplicate).ok());
    EXPECT_FALSE(duplicate);
    // Two batches whose seqs interleave (one sent late), one repeat among them.
    ASSERT_TRUE(store(*writer, casts_batch(5, {100, 104, 104}), duplicate).ok());
    ASSERT_TRUE(store(*writer, casts_batch(6, {102, 106, 100}), duplicate).ok());
  }
  const std::vector<uint64_t> all = {2, 3, 4, 7, 8, 9, 12, 13, 14, 100, 102, 104, 106};
  EXPECT_EQ(cast_seqs(db, "a"), all);
  EXPECT_EQ(cast_seqs(db, "b"), (std::vector<uint64_t>{2, 3, 4}));
  // Pages follow seq order too.
  EXPECT_EQ(cast_seqs(db, "a", 4), (std::vector<uint64_t>(all.begin(), all.begin() + 4)));
  EXPECT_EQ(cast_seqs(db, "a", 4, 8), (std::vector<uint64_t>{9, 12, 13, 14}));
  EXPECT_EQ(cast_seqs(db, "a", 3, 14), (std::vector<uint64_t>{100, 102, 104}));
  EXPECT_EQ(pragma(db, "SELECT casts FROM agents WHERE agent_id = 'a'"), static_cast<int64_t>(all.size()));
  EXPECT_EQ(pragma(db, "SELECT count(*) FROM casts"), static_cast<int64_t>(all.size() + 3));
  EXPECT_EQ(pragma(db, "SELECT count(*) FROM ops"), 4);  // a's 1, 6 and 11, b's 1
  // One segment per batch and table that stored rows; none for batch 4.
  EXPECT_EQ(pragma(db, "SELECT count(*) FROM event_segments WHERE event_table = 'casts'"), 6);
  // The largest id of a range: the agent's, and one ending inside a segment (a's casts 2-4).
  Database store;
  ASSERT_TRUE(store.open(db, Database::Mode::kReadOnly).ok());
  const int64_t a = pragma(db, "SELECT id FROM agents WHERE agent_id = 'a'");
  std::optional<int64_t> last;
  ASSERT_TRUE(last_row_in(store.handle(), schema::kCasts, first_row_of(a), end_row_of(a), last).ok());
  EXPECT_EQ(last, event_row_id(a, 106));
  ASSERT_TRUE(last_row_in(store.handle(), schema::kCasts, first_row_of(a), event_row_id(a, 4), last).ok());
  EXPECT_EQ(last, event_row_id(a, 3));
  ASSERT_TRUE(last_row_in(store.handle(), schema::kCasts, first_row_of(a), event_row_id(a, 2), last).ok());
  EXPECT_FALSE(last.has_value());
}

// GPU time by launcher, joined in C++ a chunk of kernel ids at a time
// (store_queries.cc): kernels far apart in seq, launchers stored and not.
TEST(SqliteStore, KernelTimeJoinsEachKernelToItsLaunchingCastOrOp) {
  const std::string db = (temp_dir("kernel-join") / "store.db").string();
  {
    v1::Batch batch = testing::batch_head(
        {.run_id = "run", .agent_id = "a", .pid = 1234, .rank = -1, .hostname = "host"}, 1);
    testing::add_strings(batch, 1, {"aten::mm", "gemm_kernel", "memset"});
    testing::add_location(batch, 1, {.kind = v1::SourceLocation::KIND_PYTHON, .file = "/m.py", .line = 3});
    testing::add<v1::specs::OpEvent>(batch, {.seq = 5, .ts_ns = 10, .policy = v1::CAST_POLICY_LOWER_PRECISION_FP,
                                             .device_type = v1::DEVICE_TYPE_CUDA, .op_id = 1, .location_id = 1});
    testing::add<v1::specs::CastEvent>(batch, {.seq = 6, .ts_ns = 11, .policy = v1::CAST_POLICY_LOWER_PRECISION_FP,
                                               .src_dtype = v1::DTYPE_FLOAT32, .dst_dtype = v1::DTYPE_BFLOAT16,
                                               .outcome = v1::CAST_OUTCOME_CAST, .device_type = v1::DEVICE_TYPE_CUDA,
                                               .op_id = 1, .location_id = 1});
    auto kernel = [&](uint64_t seq, uint64_t ns, v1::LaunchedBy by, uint64_t launch_seq, uint32_t name) {
      testing::add<v1::specs::KernelEvent>(batch, {.seq = seq, .ts_ns = 20, .duration_ns = ns,
                                                   .activity = v1::GPU_ACTIVITY_KERNEL, .launched_by = by,
                                                   .launch_seq = launch_seq, .name_id = name});
    };
    kernel(7, 100, v1::LAUNCHED_BY_OP, 5, 2);
    kernel(uint64_t{3} << 20, 200, v1::LAUNCHED_BY_OP, 5, 2);  // three chunks of ids later
    kernel(8, 30, v1::LAUNCHED_BY_CAST, 6, 2);
    kernel(9, 4, v1::LAUNCHED_BY_OP, 99, 2);                    // op 99 is not stored
    kernel(10, 5, v1::LAUNCHED_BY_NONE, 0, 3);
    ASSERT_TRUE(validate_batch(batch, BatchLimits()).ok());
    std::unique_ptr<StoreWriter> writer;
    ASSERT_TRUE(StoreWriter::open(db, writer).ok());
    bool duplicate = false;
    ASSERT_TRUE(store(*writer, batch, duplicate).ok());
  }
  Database store;
  ASSERT_TRUE(store.open(db, Database::Mode::kReadOnly).ok());
  const int64_t agent = pragma(db, "SELECT id FROM agents");
  uint64_t unjoined = 0, unattributed = 0;
  std::vector<LaunchedKernelTime> by_op, by_cast, unlaunched;
  ASSERT_TRUE(kernel_time_by_launcher(store.handle(), first_row_of(agent), end_row_of(agent), v1::LAUNCHED_BY_OP,
                                      by_op, unjoined).ok());
  ASSERT_TRUE(kernel_time_by_launcher(store.handle(), first_row_of(agent), end_row_of(agent), v1::LAUNCHED_BY_CAST,
                                      by_cast, unjoined).ok());
  ASSERT_TRUE(unlaunched_kernel_time_by_name(store.handle(), first_row_of(agent), end_row_of(agent), unlaunched).ok());
  ASSERT_TRUE(unattributed_kernel_ns(store.handle(), first_row_of(agent), end_row_of(agent), unattributed).ok());
  ASSERT_EQ(by_op.size(), 1u);
  EXPECT_EQ(by_op[0].ns, 300u);  // both of op 5's kernels, whatever chunk they are in
  EXPECT_EQ(by_op[0].kernels, 2u);
  EXPECT_EQ(by_op[0].activity, v1::GPU_ACTIVITY_KERNEL);
  ASSERT_EQ(by_cast.size(), 1u);
  EXPECT_EQ(by_cast[0].ns, 30u);
  EXPECT_EQ(by_cast[0].location, by_op[0].location);
  EXPECT_NE(by_cast[0].location, 0);
  EXPECT_EQ(unjoined, 4u);
  EXPECT_EQ(unattributed, 5u);
  ASSERT_EQ(unlaunched.size(), 1u);
  EXPECT_EQ(unlaunched[0].ns, 5u);
}

// New stores get 64 KiB pages (fewer b-tree levels per row for the
// writer); a store made with 16 KiB pages, as all were before, keeps them.
TEST(SqliteStore, NewStoresGet64KiBPagesAndOlderOnesKeepTheirs) {
  const std::string fresh = (temp_dir("pages-new") / "store.db").string();
  const std::string older = (temp_dir("pages-16k") / "store.db").string();
  ASSERT_TRUE(testing::store_batches(fresh, {make_batch("run", "agent", 1)}).ok());
  EXPECT_EQ(pragma(fresh, "PRAGMA page_size"), 65536);
  // An older store (id its tables' rowid: a VACUUM keeps it; event_segments.h).
  make_version_store(older, 16);
  exec_sql(older, "PRAGMA journal_mode=DELETE; PRAGMA page_size=16384; VACUUM; PRAGMA journal_mode=WAL");
  ASSERT_EQ(pragma(older, "PRAGMA page_size"), 16384);
  {
    std::unique_ptr<StoreWriter> writer;
    const Status status = StoreWriter::open(older, writer);
    ASSERT_TRUE(status.ok()) << status.message();
    bool duplicate = false;
    ASSERT_TRUE(store(*writer, make_batch("run", "agent", 2, 10), duplicate).ok());
    EXPECT_FALSE(duplicate);
  }
  EXPECT_EQ(pragma(older, "PRAGMA page_size"), 16384);
  v1::EventFilter filter;
  filter.set_run_id("run");
  EXPECT_EQ(query(older, filter).events_size(), 10);  // both batches: an op, three casts, a sample each
}

TEST(SqliteStore, RefusesAStoreTooOldToUpgrade) {
  const std::string db = (temp_dir("version3") / "store.db").string();
  make_version_store(db, 4);
  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open(db.c_str(), &handle), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(handle, "PRAGMA user_version=3", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(handle);

  const std::string expected =
      db + ": castscope store schema version 3 is older than this collector can upgrade (4 to " +
      std::to_string(kSchemaVersion) +
      "): read it with the castscope release that wrote it, or move it aside and let the collector start a new store";
  std::unique_ptr<StoreReader> reader;
  Status status = StoreReader::open(db, reader);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), expected);
  std::unique_ptr<StoreWriter> writer;
  status = StoreWriter::open(db, writer);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), expected);
  EXPECT_EQ(pragma(db, "PRAGMA user_version"), 3);  // left as it was
}

// Statement text and ordinals come from the one declaration of each table.
TEST(StoreSchema, StatementsAndOrdinalsFollowTheDeclaration) {
  constexpr auto row = schema::columns(schema::kLocations, {"kind", "file", "line"});
  static_assert(row["kind"] == 0 && row["line"] == 2 && row.param("file") == 2);
  static_assert(schema::kCasts.column("id") == 0 && schema::kCasts.column("location") == 11);
  static_assert(schema::all_columns<schema::kOps>()["autocast_nesting"] == 9);
  static_assert(schema::all_columns<schema::kOps>()["gemm"] == 10);
  EXPECT_EQ(row.select_sql(), "SELECT kind, file, line FROM locations");
  EXPECT_EQ(row.insert_sql(2, /*or_ignore=*/true), "INSERT OR IGNORE INTO locations(kind, file, line) VALUES (?,?,?),(?,?,?)");
  EXPECT_EQ(row.match_sql(), "kind = ? AND file = ? AND line = ?");
  EXPECT_EQ(row.assign_sql(), "kind = ?, file = ?, line = ?");
  EXPECT_EQ(schema::kBatches.create_sql(),
            "CREATE TABLE batches(\n  agent INTEGER NOT NULL,\n  sequence INTEGER NOT NULL,\n"
            "  received_unix_ns INTEGER NOT NULL,\n  n_events INTEGER NOT NULL,\n"
            "  events_dropped_total INTEGER NOT NULL DEFAULT 0,\n  first_ts_ns INTEGER NOT NULL DEFAULT 0,\n"
            "  last_ts_ns INTEGER NOT NULL DEFAULT 0,\n  PRIMARY KEY(agent, sequence)) WITHOUT ROWID;\n");
}

// Filter values are bound, never spliced into SQL: quotes and SQL in them
// match nothing and break nothing.
TEST(SqliteStore, FilterValuesAreNotSql) {
  const std::string db = (temp_dir("injection") / "store.db").string();
  ASSERT_TRUE(testing::store_batches(db, {make_batch("run", "agent", 1)}).ok());
  v1::EventFilter filter;
  filter.set_run_id("run' OR '1'='1");
  EXPECT_EQ(query(db, filter).events_size(), 0);
  filter.set_run_id("run");
  filter.set_file("x' OR 1=1) OR (1=1");
  EXPECT_EQ(query(db, filter).events_size(), 0);
  filter.set_file("/src/model.py");
  EXPECT_EQ(query(db, filter).events_size(), 3);  // the op and two of the casts
  filter.set_op("aten::linear' --");
  EXPECT_EQ(query(db, filter).events_size(), 0);
  filter.set_op("aten::linear");
  filter.set_kind(v1::EventFilter::KIND_OP);
  EXPECT_EQ(query(db, filter).events_size(), 1);

  std::unique_ptr<StoreReader> reader;
  ASSERT_TRUE(StoreReader::open(db, reader).ok());
  v1::ListFindingsRequest request;
  request.set_run_id("' OR 1=1 --");
  v1::ListFindingsResponse findings;
  ASSERT_TRUE(reader->list_findings(request, findings).ok());
  EXPECT_EQ(findings.findings_size(), 0);
}

TEST(SqliteStore, ViewsUnpackTheCodes) {
  const std::string db = (temp_dir("views") / "store.db").string();
  ASSERT_TRUE(testing::store_batches(db, {with_gemm(make_batch("run", "agent", 1), v1::GEMM_COMPUTE_32F_FAST_TF32,
                                                    v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT16, v1::DTYPE_BFLOAT16)})
                  .ok());
  using Row = std::vector<int64_t>;
  EXPECT_EQ(first_row(db, "SELECT seq, policy, src_dtype, dst_dtype, outcome, device_type, role, cache, mode, phase, "
                          "shape_truncated, round_trip FROM cast_rows WHERE seq = 3"),
            (Row{3, v1::CAST_POLICY_LOWER_PRECISION_FP, v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT16, v1::CAST_OUTCOME_CAST,
                 v1::DEVICE_TYPE_CUDA, v1::ROLE_WEIGHT, v1::CACHE_OUTCOME_STALE_HIT, v1::EXECUTION_MODE_EAGER,
                 v1::PHASE_BACKWARD, 1, 1}));
  EXPECT_EQ(first_row(db, "SELECT device_type, output_dtype, phase, probe_reason FROM op_rows"),
            (Row{v1::DEVICE_TYPE_CUDA, v1::DTYPE_FLOAT16, v1::PHASE_FORWARD,
                 v1::PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST}));
  EXPECT_EQ(first_row(db, "SELECT gemm_compute, gemm_a_type, gemm_b_type, gemm_d_type, gemm_calls, gemm_mixed "
                          "FROM op_rows"),
            (Row{v1::GEMM_COMPUTE_32F_FAST_TF32, v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT16, v1::DTYPE_BFLOAT16, 255, 1}));
}

// thread, arg_index and list_index share casts.slot: the reader and the view
// give back what was sent, at both ends of each range.
TEST(SqliteStore, PackedSlotRoundTripsAtItsLimits) {
  const std::string db = (temp_dir("slot") / "store.db").string();
  v1::Batch batch = make_batch("run", "agent", 1);
  v1::CastEvent& high = *batch.mutable_events(1)->mutable_cast();
  high.set_thread(kSlotThreadLimit - 1);
  high.set_arg_index(kSlotArgIndexLimit - 1);
  high.set_list_index(kSlotListIndexLimit - 1);
  v1::CastEvent& low = *batch.mutable_events(2)->mutable_cast();
  low.set_thread(0);
  low.set_arg_index(0);
  low.set_list_index(-1);
  ASSERT_TRUE(validate_batch(batch, BatchLimits()).ok());
  ASSERT_TRUE(testing::store_batches(db, {batch}).ok());
  v1::EventFilter filter;
  filter.set_run_id("run");
  filter.set_kind(v1::EventFilter::KIND_CAST);
  const v1::QueryEventsResponse response = query(db, filter);
  ASSERT_GE(response.events_size(), 2);
  const v1::CastEvent& got_high = response.events(0).event().cast();
  const v1::CastEvent& got_low = response.events(1).event().cast();
  EXPECT_EQ(got_high.thread(), kSlotThreadLimit - 1);
  EXPECT_EQ(got_high.arg_index(), kSlotArgIndexLimit - 1);
  EXPECT_EQ(got_high.list_index(), kSlotListIndexLimit - 1);
  EXPECT_EQ(got_low.thread(), 0u);
  EXPECT_EQ(got_low.arg_index(), 0u);
  EXPECT_EQ(got_low.list_index(), -1);

  sqlite3* handle = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  sqlite3_stmt* statement = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(handle, "SELECT thread, arg_index, list_index FROM cast_rows ORDER BY seq", -1,
                               &statement, nullptr),
            SQLITE_OK);
  ASSERT_EQ(sqlite3_step(statement), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(statement, 0), kSlotThreadLimit - 1);
  EXPECT_EQ(sqlite3_column_int64(statement, 1), kSlotArgIndexLimit - 1);
  EXPECT_EQ(sqlite3_column_int64(statement, 2), kSlotListIndexLimit - 1);
  ASSERT_EQ(sqlite3_step(statement), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(statement, 0), 0);
  EXPECT_EQ(sqlite3_column_int64(statement, 1), 0);
  EXPECT_EQ(sqlite3_column_int64(statement, 2), -1);
  sqlite3_finalize(statement);
  sqlite3_close(handle);
}

// A WAL database of 4 KiB pages with one table t(id, payload), for the checkpointer's tests.
void open_wal_table(const std::string& db, sqlite3*& handle) {
  ASSERT_EQ(sqlite3_open_v2(db.c_str(), &handle, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(handle,
                         "PRAGMA page_size=4096; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;"
                         "CREATE TABLE t(id INTEGER PRIMARY KEY, payload BLOB)",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
}

// Checkpoints run off the writer's thread, and a writer that never pauses
// still keeps the WAL bounded (it waits past max_bytes for a rewind).
TEST(WalCheckpointer, KeepsTheWalBoundedUnderContinuousWrites) {
  const std::string db = (temp_dir("checkpointer") / "store.db").string();
  sqlite3* handle = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_wal_table(db, handle));
  WalCheckpointer::Options options;
  options.start_bytes = 20 * 4096;  // 20 pages
  options.max_bytes = 100 * 4096;
  WalCheckpointer checkpointer;
  ASSERT_TRUE(checkpointer.start(handle, db, options).ok());
  sqlite3_stmt* insert = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(handle, "INSERT INTO t(payload) VALUES (zeroblob(3000))", -1, &insert, nullptr),
            SQLITE_OK);
  uintmax_t largest_wal = 0;
  for (int transaction = 0; transaction < 200; ++transaction) {
    checkpointer.before_begin();
    ASSERT_EQ(sqlite3_exec(handle, "BEGIN", nullptr, nullptr, nullptr), SQLITE_OK);
    for (int row = 0; row < 10; ++row) {  // ~10 pages per transaction
      ASSERT_EQ(sqlite3_step(insert), SQLITE_DONE);
      sqlite3_reset(insert);
    }
    ASSERT_EQ(sqlite3_exec(handle, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
    checkpointer.after_commit();
    largest_wal = std::max(largest_wal, std::filesystem::file_size(db + "-wal"));
  }
  sqlite3_finalize(insert);
  checkpointer.stop();
  EXPECT_GT(checkpointer.checkpoints(), 0u);
  // max_bytes plus one transaction, with the WAL's frame headers.
  EXPECT_LE(largest_wal, uintmax_t{32} + (100 + 2 * 12) * (4096 + 24));
  sqlite3_stmt* count = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(handle, "SELECT count(*) FROM t", -1, &count, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(count), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(count, 0), 2000);
  sqlite3_finalize(count);
  sqlite3_close(handle);
}

// A reader's snapshot stops a checkpoint short of the WAL's end. A writer
// waiting past max_bytes must go on once that read ends (the checkpoint is
// tried again), not sit out max_wait_ms because one attempt overlapped it.
TEST(WalCheckpointer, AWaitingWriterGoesOnWhenTheReadThatHeldTheCheckpointEnds) {
  const std::string db = (temp_dir("checkpointer_reader") / "store.db").string();
  sqlite3* handle = nullptr;
  ASSERT_NO_FATAL_FAILURE(open_wal_table(db, handle));
  WalCheckpointer::Options options;
  options.start_bytes = 1000 * 4096;  // no checkpoint before the writer waits
  options.max_bytes = 1000 * 4096;
  options.max_wait_ms = 60'000;  // far longer than the read below: without a retry the writer would sit it out
  WalCheckpointer checkpointer;
  ASSERT_TRUE(checkpointer.start(handle, db, options).ok());
  const auto write = [&](int transactions) {
    for (int i = 0; i < transactions; ++i)
      ASSERT_EQ(sqlite3_exec(handle,
                             "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < 10) "
                             "INSERT INTO t(payload) SELECT zeroblob(3000) FROM n",
                             nullptr, nullptr, nullptr),
                SQLITE_OK);
  };
  write(10);
  // A reader holds a snapshot from here on; the WAL grows past max_bytes after it.
  sqlite3* reader = nullptr;
  ASSERT_EQ(sqlite3_open_v2(db.c_str(), &reader, SQLITE_OPEN_READONLY, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(reader, "BEGIN; SELECT count(*) FROM t", nullptr, nullptr, nullptr), SQLITE_OK);
  for (int i = 0; i < 110; ++i) {
    write(1);
    checkpointer.after_commit();
  }
  std::thread release([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    ASSERT_EQ(sqlite3_exec(reader, "COMMIT", nullptr, nullptr, nullptr), SQLITE_OK);
  });
  const auto started = std::chrono::steady_clock::now();
  checkpointer.before_begin();  // waits for a checkpoint that covers every commit
  const auto waited = std::chrono::steady_clock::now() - started;
  release.join();
  EXPECT_GT(checkpointer.retries(), 0u) << "the read should have stopped the first attempt";
  // Done once the read ended (~200 ms), far inside max_wait_ms (a liveness
  // bound, not a timing target: the old behaviour waited all 60 s).
  EXPECT_LT(waited, std::chrono::seconds(30));
  checkpointer.stop();
  sqlite3_close(reader);
  sqlite3_close(handle);
}

TEST(ShipRollups, CommitsRollUpTheirCastsSealInBoundedShipmentsAndCountWhatAPauseLeavesOut) {
  const std::string db = (temp_dir("ship_rollups") / "store.db").string();
  std::unique_ptr<StoreWriter> writer;
  ASSERT_TRUE(StoreWriter::open(db, writer).ok());
  writer->enable_rollups();
  bool duplicate = false;
  ASSERT_TRUE(store(*writer, make_batch("run", "agent", 1, 1, 3), duplicate).ok());
  ASSERT_TRUE(store(*writer, make_batch("run", "agent", 2, 10, 3), duplicate).ok());
  ASSERT_TRUE(store(*writer, make_batch("run", "agent", 2, 10, 3), duplicate).ok());  // a replay: not again
  EXPECT_TRUE(duplicate);
  EXPECT_EQ(pragma(db, "SELECT sum(count) FROM ship_rollups WHERE shipment = 0"), 6);
  const int64_t keys = pragma(db, "SELECT count(*) FROM ship_rollups");
  ASSERT_GE(keys, 2);  // appended: each commit its own rows (the shipper sums them per key and minute)

  // Sealing takes at most max_rows, the first stored first.
  int64_t sealed = 0;
  ASSERT_TRUE(writer->begin().ok());
  ASSERT_TRUE(writer->seal_shipment(1, INT64_MAX / 2, 1, sealed).ok());
  ASSERT_TRUE(writer->commit().ok());
  EXPECT_EQ(sealed, 1);
  EXPECT_EQ(pragma(db, "SELECT count(*) FROM ship_rollups WHERE shipment = 1"), 1);
  // Casts of a sealed key-minute open a new row; forgetting a shipment leaves the rest.
  ASSERT_TRUE(store(*writer, make_batch("run", "agent", 3, 20, 3), duplicate).ok());
  EXPECT_EQ(pragma(db, "SELECT sum(count) FROM ship_rollups"), 9);
  const int64_t in_first = pragma(db, "SELECT sum(count) FROM ship_rollups WHERE shipment = 1");
  ASSERT_TRUE(writer->begin().ok());
  ASSERT_TRUE(writer->forget_shipment(1).ok());
  ASSERT_TRUE(writer->commit().ok());
  EXPECT_EQ(pragma(db, "SELECT sum(count) FROM ship_rollups"), 9 - in_first);

  // Paused (the backlog past its bound): counted, not rolled up.
  writer->pause_rollups(true);
  ASSERT_TRUE(store(*writer, make_batch("run", "agent", 4, 30, 3), duplicate).ok());
  ASSERT_TRUE(store(*writer, make_batch("run", "agent", 5, 40, 2), duplicate).ok());
  EXPECT_EQ(pragma(db, "SELECT sum(count) FROM ship_rollups"), 9 - in_first);
  EXPECT_EQ(pragma(db, "SELECT CAST(value AS INTEGER) FROM ship_state WHERE key = 'events_not_shipped'"), 5);
  writer->pause_rollups(false);
  ASSERT_TRUE(store(*writer, make_batch("run", "agent", 6, 50, 3), duplicate).ok());
  EXPECT_EQ(pragma(db, "SELECT sum(count) FROM ship_rollups"), 12 - in_first);
}

}  // namespace
}  // namespace castscope::collector
