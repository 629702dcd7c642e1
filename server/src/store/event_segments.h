// Where an event table's ids lie (store_schema.h: kEventSegments).
//
// Since schema version 17 SQLite picks an event table's rowids: appending a
// row then costs no b-tree descent, which a key of our own costs every row
// (docs/performance.md, "The store: rowids SQLite picks"). Each
// stored batch appends its rows of a table in id order, as one segment:
// rowids [first_row, last_row], ids min_id..max_id. A read of an id range
// (one agent's, or part of it) joins the segments that overlap it to their
// rows, a rowid range scan each. An agent's batches nearly always hold
// increasing seqs, so its segments do not overlap and segment order is id
// order; where they do overlap (a batch sent late), the read sorts by id.
//
// Exactly-once: a replayed batch is refused by the batches table's key; a
// seq sent again in another batch (a sender bug) is dropped by the writer,
// which looks up the ids stored in the segments its batch overlaps.
//
// Tables made before version 17 keep id as their rowid (INTEGER PRIMARY KEY)
// and no segments; they read and write as before.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "server/src/status.h"
#include "server/src/store/sqlite_store.h"
#include "server/src/store/store_schema.h"

namespace castscope::collector::segments {

// Whether `table` keeps id as its rowid (made before version 17, or not an
// event table).
Status id_is_rowid(sqlite3* db, const schema::Table& table, bool& out);

// Where the segments that may hold ids below `end` stop: the end of the id
// range of the agent of id end - 1 (a segment never spans two agents). It
// bounds their index scan, which would otherwise run over every later
// agent's segments.
int64_t segments_end(int64_t end);

// A SELECT of `columns` ("e.a, e.b") from `table` as e, for ids in
// [first, end) (bound as ?1 and ?2), then `rest`: conditions, ORDER BY, LIMIT.
// " ORDER BY id" in `rest` reads the segments in order when that is id order.
Status select_sql(sqlite3* db, const schema::Table& table, std::string_view columns, int64_t first, int64_t end,
                  std::string_view rest, std::string& out);

// The largest id of `table` in [first, end), for a table whose id is not its
// rowid; none when the range holds no row.
Status last_id(sqlite3* db, const schema::Table& table, int64_t first, int64_t end, std::optional<int64_t>& out);

// The writer's side (one connection, inside its transaction).
class SegmentWriter {
 public:
  Status prepare(sqlite3* db);
  // The ids in [min_id, max_id] stored before in `table`, sorted.
  Status stored_ids(const schema::Table& table, int64_t min_id, int64_t max_id, std::vector<int64_t>& out);
  // Rows just appended to `table`: rowids [first_row, last_row], ids min_id..max_id in order.
  Status add(const schema::Table& table, int64_t min_id, int64_t max_id, int64_t first_row, int64_t last_row);

 private:
  sqlite3* db_ = nullptr;
  Statement overlapping_, insert_;
};

}  // namespace castscope::collector::segments
