// Interned source locations. The hot path carries a 32-bit id; strings are
// made once per distinct site (by whoever resolves the site: the Python
// frame reader, the TorchScript callstack) and read by the exporter.
//
// Concurrency: intern() and get() take one mutex; they run once per new site
// and once per exported event, never per cast on a known site (callers cache
// ids per site themselves).
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <unordered_map>

#include "castscope/v1/events.enums.h"

namespace castscope {

using LocationKind = v1::enums::SourceLocation_Kind;  // generated from events.proto

struct Location {
  LocationKind kind = LocationKind::kNone;
  std::string file;
  uint32_t line = 0;
  std::string function;
  std::string stack;  // "file:line function" lines, innermost first; may be empty
  // TorchScript only: the line sits inside a scripted `with autocast(...,
  // enabled=False)` block (which eager autocast around the call overrides).
  bool inside_disabled_autocast = false;
  // Filled by the exporter (source_lines.h), never on the hot path; not part of the key.
  std::string source_text = {};
  // TorchScript only: a JIT-inserted cast shared by several ops is at its
  // first consumer's line; the others' "file:line", newline-separated.
  std::string also_consumed_at = {};
};

class LocationTable {
 public:
  LocationTable();
  // Id 0 is "no location" (kind NONE).
  uint32_t intern(const Location& location);
  Location get(uint32_t id) const;

 private:
  mutable std::mutex mutex_;
  std::deque<Location> locations_;
  std::unordered_map<std::string, uint32_t> ids_;
};

}  // namespace castscope
