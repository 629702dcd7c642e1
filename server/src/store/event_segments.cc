#include "server/src/store/event_segments.h"

#include <algorithm>
#include <cstdint>

#include "server/src/store/row_id.h"

namespace castscope::collector::segments {

namespace {

constexpr auto kSegment =
    schema::columns(schema::kEventSegments, {"event_table", "max_id", "first_row", "min_id", "last_row"});

// The segments of `table` that hold ids in [?2, ?3), in segment order; ?4:
// segments_end(?3).
constexpr std::string_view kOverlapping =
    "SELECT min_id, max_id, first_row, last_row FROM event_segments WHERE event_table = ?1 AND max_id >= ?2 "
    "AND max_id < ?4 AND min_id < ?3 ORDER BY max_id, first_row";

struct Segment {
  int64_t min_id, max_id, first_row, last_row;
};

// Calls visit(segment) for each segment of `table` holding ids in [first,
// end), in segment order.
template <typename Visit>
Status each_segment(sqlite3* db, const schema::Table& table, int64_t first, int64_t end, Visit&& visit) {
  Statement segments;
  if (Status s = Statement::prepare(db, kOverlapping, segments); !s.ok()) return s;
  segments.bind_text(1, table.name);
  segments.bind(2, first);
  segments.bind(3, end);
  segments.bind(4, segments_end(end));
  Status error;
  while (segments.step(error))
    visit(Segment{segments.column_int(0), segments.column_int(1), segments.column_int(2), segments.column_int(3)});
  return error;
}

// Whether the segments holding ids in [first, end) follow one another in id
// order (none overlaps the next); `last_first_row`: the largest first_row
// among them (0: none).
Status segments_in_id_order(sqlite3* db, const schema::Table& table, int64_t first, int64_t end, bool& out,
                            int64_t& last_first_row) {
  out = true;
  last_first_row = 0;
  bool any = false;
  int64_t last_max = 0;
  return each_segment(db, table, first, end, [&](const Segment& segment) {
    if (any && segment.min_id <= last_max) out = false;
    last_max = segment.max_id;
    last_first_row = std::max(last_first_row, segment.first_row);
    any = true;
  });
}

// " ORDER BY id" in `rest`, followed by nothing or a LIMIT: its position, or npos.
size_t id_order_at(std::string_view rest) {
  constexpr std::string_view kIdOrder = " ORDER BY id";
  const size_t at = rest.rfind(kIdOrder);
  if (at == std::string_view::npos) return at;
  const std::string_view after = rest.substr(at + kIdOrder.size());
  return after.empty() || after.starts_with(" LIMIT") ? at : std::string_view::npos;
}

// "FROM ... WHERE ..." over `table` as `alias` (its id the rowid or not):
// its rows whose id is in [?1, ?2) (`end` is ?2's value).
std::string range_sql(const schema::Table& table, std::string_view alias, bool id_is_rowid, int64_t end) {
  const std::string a(alias), name(table.name);
  if (id_is_rowid) return "FROM " + name + " " + a + " WHERE " + a + ".id >= ?1 AND " + a + ".id < ?2";
  return "FROM event_segments s JOIN " + name + " " + a + " ON " + a + ".rowid BETWEEN s.first_row AND s.last_row " +
         "WHERE s.event_table = '" + name + "' AND s.max_id >= ?1 AND s.max_id < " + std::to_string(segments_end(end)) +
         " AND s.min_id < ?2 AND " + a + ".id >= ?1 AND " + a + ".id < ?2";
}

}  // namespace

int64_t segments_end(int64_t end) {
  const int64_t agent = agent_of_row(std::max<int64_t>(end, 1) - 1);
  return agent >= agent_of_row(INT64_MAX) ? INT64_MAX : end_row_of(agent);
}

Status id_is_rowid(sqlite3* db, const schema::Table& table, bool& out) {
  out = true;
  if (!table.segmented) return {};
  int primary_key = 0;
  const std::string name(table.name);
  if (sqlite3_table_column_metadata(db, "main", name.c_str(), "id", nullptr, nullptr, nullptr, &primary_key, nullptr) !=
      SQLITE_OK)
    return Status::internal(std::string(sqlite3_errmsg(db)) + " (the layout of table " + name + ")");
  out = primary_key != 0;
  return {};
}

Status select_sql(sqlite3* db, const schema::Table& table, std::string_view columns, int64_t first, int64_t end,
                  std::string_view rest, std::string& out) {
  bool rowid = true;
  if (Status s = id_is_rowid(db, table, rowid); !s.ok()) return s;
  out = "SELECT " + std::string(columns) + " " + range_sql(table, "e", rowid, end);
  const size_t order = id_order_at(rest);
  bool in_order = false;
  int64_t last_first_row = 0;
  if (order != std::string_view::npos && !rowid)
    if (Status s = segments_in_id_order(db, table, first, end, in_order, last_first_row); !s.ok()) return s;
  if (!in_order) {
    out += rest;
    return {};
  }
  // Segments in order, each a rowid range of ids in order: SQLite reads them
  // so, with no sort. Only the segments checked: one a batch commits after
  // the check (its rowids above theirs) might overlap them.
  out += " AND s.first_row <= " + std::to_string(last_first_row);
  out += rest.substr(0, order);
  out += " ORDER BY s.max_id, s.first_row, e.rowid";
  out += rest.substr(order + std::string_view(" ORDER BY id").size());
  return {};
}

Status last_id(sqlite3* db, const schema::Table& table, int64_t first, int64_t end, std::optional<int64_t>& out) {
  out.reset();
  std::vector<Segment> past_end;  // segments that run past `end`: their rows are read
  if (Status s = each_segment(db, table, first, end,
                              [&](const Segment& segment) {
                                if (segment.max_id < end)
                                  out = std::max(out.value_or(segment.max_id), segment.max_id);
                                else
                                  past_end.push_back(segment);
                              });
      !s.ok() || past_end.empty())
    return s;
  Statement rows;
  const std::string sql =
      "SELECT MAX(id) FROM " + std::string(table.name) + " WHERE rowid BETWEEN ?3 AND ?4 AND id >= ?1 AND id < ?2";
  if (Status s = Statement::prepare(db, sql, rows); !s.ok()) return s;
  for (const Segment& segment : past_end) {
    rows.bind(1, first);
    rows.bind(2, end);
    rows.bind(3, segment.first_row);
    rows.bind(4, segment.last_row);
    Status error;
    if (rows.step(error) && !rows.column_is_null(0))
      out = std::max(out.value_or(rows.column_int(0)), rows.column_int(0));
    sqlite3_reset(rows.get());
    if (!error.ok()) return error;
  }
  return {};
}

Status SegmentWriter::prepare(sqlite3* db) {
  db_ = db;
  if (Status s = Statement::prepare(db, kOverlapping, overlapping_); !s.ok()) return s;
  return Statement::prepare(db, kSegment.insert_sql(), insert_);
}

Status SegmentWriter::stored_ids(const schema::Table& table, int64_t min_id, int64_t max_id,
                                 std::vector<int64_t>& out) {
  out.clear();
  std::vector<std::pair<int64_t, int64_t>> rows;  // rowid ranges of the overlapping segments
  overlapping_.bind_text(1, table.name);
  overlapping_.bind(2, min_id);
  overlapping_.bind(3, max_id + 1);
  overlapping_.bind(4, segments_end(max_id + 1));
  Status error;
  while (overlapping_.step(error)) rows.emplace_back(overlapping_.column_int(2), overlapping_.column_int(3));
  overlapping_.reset();
  if (!error.ok() || rows.empty()) return error;
  // Rare (a seq sent twice, or a batch sent late): a statement made for it.
  Statement ids;
  if (Status s = Statement::prepare(db_,
                                    "SELECT id FROM " + std::string(table.name) +
                                        " WHERE rowid BETWEEN ?1 AND ?2 AND id BETWEEN ?3 AND ?4",
                                    ids);
      !s.ok())
    return s;
  for (const auto& [first_row, last_row] : rows) {
    ids.bind(1, first_row);
    ids.bind(2, last_row);
    ids.bind(3, min_id);
    ids.bind(4, max_id);
    while (ids.step(error)) out.push_back(ids.column_int(0));
    sqlite3_reset(ids.get());
    if (!error.ok()) return error;
  }
  std::sort(out.begin(), out.end());
  return {};
}

Status SegmentWriter::add(const schema::Table& table, int64_t min_id, int64_t max_id, int64_t first_row,
                          int64_t last_row) {
  insert_.bind_text(kSegment.param("event_table"), table.name);
  insert_.bind(kSegment.param("max_id"), max_id);
  insert_.bind(kSegment.param("first_row"), first_row);
  insert_.bind(kSegment.param("min_id"), min_id);
  insert_.bind(kSegment.param("last_row"), last_row);
  Status s = insert_.run();
  insert_.reset();
  return s;
}

}  // namespace castscope::collector::segments
