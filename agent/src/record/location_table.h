// Interned source locations. The hot path carries a 32-bit id; strings are
// made once per distinct site (by whoever resolves the site: the Python
// frame reader, the TorchScript callstack) and read by the exporter.
//
// Concurrency: intern() and get() take one mutex; they run once per new site
// and once per exported event, never per cast on a known site (callers cache
// ids per site themselves).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
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
  // Python: the innermost maker library (user_code.h) between the code that
  // asked and the user's line; the agent's own (not exported: the casts say
  // it as their maker). Part of the key.
  v1::enums::CastMaker library = v1::enums::CastMaker::kUnspecified;
};

class LocationTable {
 public:
  LocationTable();
  // Id 0 is "no location" (kind NONE).
  uint32_t intern(const Location& location);
  Location get(uint32_t id) const;
  // A location's library without the lock (per conversion): kUnspecified
  // for none, and for ids past the first kLibraryIds.
  v1::enums::CastMaker library_of(uint32_t id) const {
    return id < kLibraryIds ? static_cast<v1::enums::CastMaker>(libraries_[id].load(std::memory_order_relaxed))
                            : v1::enums::CastMaker::kUnspecified;
  }

 private:
  static constexpr size_t kLibraryIds = size_t{1} << 18;
  std::unique_ptr<std::atomic<uint8_t>[]> libraries_;
  mutable std::mutex mutex_;
  std::deque<Location> locations_;
  std::unordered_map<std::string, uint32_t> ids_;
};

}  // namespace castscope
