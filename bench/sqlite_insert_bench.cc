// SQLite's own cost per row for rows shaped like the store's casts table,
// by statement shape: the floor under the collector's writer thread
// (docs/performance.md, "Writer, second pass").
//
//   castscope_sqlite_insert_bench [--shape ignore|plain|without-rowid|auto-rowid|id-column]
//                                 [--rows 4000000] [--page-size 65536] [--rows-per-statement 256]
//
// ignore: INSERT OR IGNORE with our keys (agent << 40) | seq, as the writer
// does; plain: INSERT; without-rowid: a WITHOUT ROWID table; auto-rowid:
// SQLite picks the rowid (its append path: no b-tree descent per row, which
// our own keys cannot have); id-column: SQLite picks the rowid and our key is
// a plain column beside it (the store since schema version 17). Transactions of 16 384 rows, no checkpoints
// (the collector runs them on another thread). Prints this thread's CPU
// seconds per million rows. The store is made in a private temporary folder.
#include <sqlite3.h>
#include <stdlib.h>
#include <time.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <string>

namespace {

double thread_cpu_seconds() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_nsec) * 1e-9;
}

bool exec(sqlite3* db, const std::string& sql) {
  char* message = nullptr;
  if (sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &message) == SQLITE_OK) return true;
  std::fprintf(stderr, "sqlite_insert_bench: %s: %s\n", sql.c_str(), message ? message : "?");
  sqlite3_free(message);
  return false;
}

int usage(const char* why) {
  std::fprintf(stderr,
               "sqlite_insert_bench: %s\nusage: castscope_sqlite_insert_bench [--shape "
               "ignore|plain|without-rowid|auto-rowid|id-column] [--rows N] [--page-size P] "
               "[--rows-per-statement K]\n",
               why);
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string shape = "ignore";
  long rows = 4'000'000, page_size = 65536, per_statement = 256;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return usage(("missing value after " + flag).c_str());
    const char* value = argv[++i];
    if (flag == "--shape") shape = value;
    else if (flag == "--rows") rows = std::atol(value);
    else if (flag == "--page-size") page_size = std::atol(value);
    else if (flag == "--rows-per-statement") per_statement = std::atol(value);
    else return usage(("unknown option " + flag).c_str());
  }
  if (shape != "ignore" && shape != "plain" && shape != "without-rowid" && shape != "auto-rowid" &&
      shape != "id-column")
    return usage(("unknown --shape " + shape).c_str());
  if (rows <= 0 || per_statement <= 0 || per_statement > 2048 || 16384 % per_statement != 0)
    return usage("--rows must be positive and --rows-per-statement divide 16384 (at most 2048)");

  char folder[] = "/tmp/castscope-sqlite-bench-XXXXXX";  // mkdtemp: mode 0700
  if (mkdtemp(folder) == nullptr) return usage("cannot make a temporary folder under /tmp");
  struct RemoveAtExit {
    const char* folder;
    ~RemoveAtExit() { std::filesystem::remove_all(folder); }
  } remove_at_exit{folder};
  const std::string path = std::string(folder) + "/bench.db";
  sqlite3* db = nullptr;
  if (sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                      nullptr) != SQLITE_OK)
    return usage(("cannot open " + path).c_str());
  const std::string table =
      "CREATE TABLE casts(id INTEGER" + std::string(shape == "id-column" ? "" : " PRIMARY KEY") +
      ", ts_ns INTEGER, op INTEGER, arg_name INTEGER, slot INTEGER, codes INTEGER, shape BLOB, bytes INTEGER, "
      "op_seq INTEGER, source_version INTEGER, cached_version INTEGER, location INTEGER)" + std::string(shape == "without-rowid" ? " WITHOUT ROWID" : "");
  if (!exec(db, "PRAGMA page_size=" + std::to_string(page_size) +
                    "; PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL; PRAGMA cache_size=-16384;"
                    "PRAGMA wal_autocheckpoint=0") ||
      !exec(db, table))
    return 1;
  std::string sql = shape == "plain" || shape == "id-column" ? "INSERT INTO casts VALUES "
                                                              : "INSERT OR IGNORE INTO casts VALUES ";
  for (long r = 0; r < per_statement; ++r) sql += r > 0 ? ",(?,?,?,?,?,?,?,?,?,?,?,?)" : "(?,?,?,?,?,?,?,?,?,?,?,?)";
  sqlite3_stmt* insert = nullptr;
  if (sqlite3_prepare_v3(db, sql.c_str(), -1, SQLITE_PREPARE_PERSISTENT, &insert, nullptr) != SQLITE_OK)
    return usage(sqlite3_errmsg(db));

  // Values like the ingest bench's casts: seqs with gaps (ops take some),
  // small ids, a 2-d shape, packed codes.
  const int64_t shape_dims[2] = {64, 1024};
  const double started = thread_cpu_seconds();
  int64_t seq = 1;
  const long transactions = (rows + 16383) / 16384;
  for (long t = 0; t < transactions; ++t) {
    if (!exec(db, "BEGIN")) return 1;
    for (long s = 0; s < 16384 / per_statement; ++s) {
      for (long r = 0; r < per_statement; ++r, ++seq) {
        const int p = static_cast<int>(r) * 12 + 1;
        if (shape != "auto-rowid") sqlite3_bind_int64(insert, p, (int64_t{1} << 40) | (seq * 3 / 2));
        sqlite3_bind_int64(insert, p + 1, 1'700'000'000'000'000'000 + seq * 100);
        sqlite3_bind_int64(insert, p + 2, 1 + seq % 10);
        sqlite3_bind_int64(insert, p + 3, 11 + seq % 5);
        sqlite3_bind_int64(insert, p + 4, (seq % 4) | ((seq % 3) << 16));
        sqlite3_bind_int64(insert, p + 5, 0x12345678912345 + seq % 3);
        sqlite3_bind_blob(insert, p + 6, shape_dims, sizeof shape_dims, SQLITE_STATIC);
        sqlite3_bind_int64(insert, p + 7, 262144);
        sqlite3_bind_int64(insert, p + 8, seq * 3 / 2 - seq % 3);
        sqlite3_bind_int64(insert, p + 9, seq % 3 == 1 ? 7 : 0);
        sqlite3_bind_int64(insert, p + 10, seq % 3 == 1 ? 7 : 0);
        sqlite3_bind_int64(insert, p + 11, 1 + seq % 20);
      }
      if (sqlite3_step(insert) != SQLITE_DONE) return usage(sqlite3_errmsg(db));
      sqlite3_reset(insert);
    }
    if (!exec(db, "COMMIT")) return 1;
  }
  const double seconds = thread_cpu_seconds() - started;
  const double inserted = static_cast<double>(transactions) * 16384;
  std::printf("%-13s page %6ld, %4ld rows per statement: %.3f CPU s per M rows (%.0f rows)\n", shape.c_str(),
              page_size, per_statement, seconds / inserted * 1e6, inserted);
  sqlite3_finalize(insert);
  sqlite3_close(db);
  return 0;
}
