// Events as the viewer's JSON (docs/viewer.md): enumerations as lower-case
// names, times relative to the run's origin. Shared by the range queries and
// the live stream, so that a cast looks the same however it reached the page.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <unordered_map>

#include "castscope/v1/events.pb.h"
#include "server/src/analysis/analyzers.h"
#include "server/src/viewer/json_writer.h"

namespace castscope::collector::viewer {

nlohmann::json location_json(const castscope::v1::SourceLocation& location, bool with_source);

// A timeline lane's table of locations: its events give the index of theirs
// instead of the file and function again (with the agent id, named once by
// the lane, most of a 5 000-event lane's bytes).
class LaneLocations {
 public:
  uint32_t index(const castscope::v1::SourceLocation& location);
  // The table, entry i being index i's location: [{"file", "line", "function"}, ...].
  void write(JsonWriter& out) const;

 private:
  std::unordered_map<std::string, uint32_t> ids_;
  JsonWriter table_;
  uint32_t size_ = 0;
};

// How write_ lays an event out: in full (the live stream, /api/event), or
// for a timeline lane (`lane` set): no agent id, its location an index.
struct EventLayout {
  const std::string* agent_id = nullptr;
  LaneLocations* lane = nullptr;
};

// `origin_ns` is subtracted from timestamps. The write_ forms append the same
// object to a JsonWriter (what ranges and the live stream use: no tree built).
void write_cast(JsonWriter& out, const std::string& agent_id, const castscope::v1::CastEvent& cast, int64_t origin_ns);
void write_op(JsonWriter& out, const std::string& agent_id, const castscope::v1::OpEvent& op, int64_t origin_ns);
void write_kernel(JsonWriter& out, const std::string& agent_id, const castscope::v1::KernelEvent& kernel,
                  int64_t origin_ns);
void write_cast(JsonWriter& out, const EventLayout& layout, const castscope::v1::CastEvent& cast, int64_t origin_ns);
void write_op(JsonWriter& out, const EventLayout& layout, const castscope::v1::OpEvent& op, int64_t origin_ns);
void write_kernel(JsonWriter& out, const EventLayout& layout, const castscope::v1::KernelEvent& kernel,
                  int64_t origin_ns);
nlohmann::json cast_json(const std::string& agent_id, const castscope::v1::CastEvent& cast, int64_t origin_ns);
nlohmann::json op_json(const std::string& agent_id, const castscope::v1::OpEvent& op, int64_t origin_ns);
nlohmann::json kernel_json(const std::string& agent_id, const castscope::v1::KernelEvent& kernel, int64_t origin_ns);

}  // namespace castscope::collector::viewer
