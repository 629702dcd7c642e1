// The key of every event table's rows, its id column: (agent row <<
// kRowSeqBits) | seq. One agent's rows are one range of it. Since schema
// version 17 it is a column beside the rowid SQLite picks, found through
// event_segments (event_segments.h); older tables keep it as their INTEGER
// PRIMARY KEY. Everything that builds, splits or bounds such an id (C++ and
// SQL) uses these helpers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace castscope::collector {

inline constexpr int kRowSeqBits = 40;
// The largest seq a row id holds (validate_batch refuses larger ones).
inline constexpr uint64_t kMaxRowSeq = (uint64_t{1} << kRowSeqBits) - 1;

inline constexpr int64_t event_row_id(int64_t agent_row, uint64_t seq) {
  return static_cast<int64_t>((static_cast<uint64_t>(agent_row) << kRowSeqBits) | seq);
}
inline constexpr uint64_t seq_of_row(int64_t row_id) { return static_cast<uint64_t>(row_id) & kMaxRowSeq; }
inline constexpr int64_t agent_of_row(int64_t row_id) { return row_id >> kRowSeqBits; }
// One agent's rows: ids in [first_row_of(agent), end_row_of(agent)).
inline constexpr int64_t first_row_of(int64_t agent_row) { return event_row_id(agent_row, 0); }
inline constexpr int64_t end_row_of(int64_t agent_row) { return event_row_id(agent_row + 1, 0); }

// The same in SQL, over a column (or expression) holding a row id.
inline std::string agent_of_row_sql(std::string_view id) { return "(" + std::string(id) + " >> " + std::to_string(kRowSeqBits) + ")"; }
inline std::string seq_of_row_sql(std::string_view id) {
  return "(" + std::string(id) + " & " + std::to_string(kMaxRowSeq) + ")";
}
// The row id of `seq` in the agent of row `id` (a kernel's launching cast or op).
inline std::string same_agent_row_sql(std::string_view id, std::string_view seq) {
  return "((" + agent_of_row_sql(id) + " << " + std::to_string(kRowSeqBits) + ") | " + std::string(seq) + ")";
}

}  // namespace castscope::collector
