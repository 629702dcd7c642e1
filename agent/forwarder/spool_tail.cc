#include "agent/forwarder/spool_tail.h"

#include <algorithm>
#include <filesystem>

#include "common/spool/spool_format.h"

namespace castscope {

// Reads on in the oldest segment not read to its end (one segment per call
// keeps frames, and so acknowledgements, in write order).
std::vector<SpoolTail::Frame> SpoolTail::poll(std::vector<spool::ReadProblem>& problems) {
  for (const auto& path : spool::list_segments(dir_)) {
    const uint32_t index = spool::segment_index(path);
    if (!segments_.contains(index)) segments_[index].path = path;
  }
  std::vector<Frame> out;
  const auto it = std::find_if(segments_.begin(), segments_.end(), [](const auto& entry) { return !entry.second.finished; });
  caught_up_ = it == segments_.end();
  if (caught_up_) return out;
  auto& [index, segment] = *it;
  const auto contents = spool::read_segment(segment.path, segment.offset);
  problems.insert(problems.end(), contents.problems.begin(), contents.problems.end());
  if (!contents.problems.empty() && contents.complete_bytes == 0) segment.finished = true;  // unreadable
  segment.offset = std::max(segment.offset, contents.complete_bytes);
  for (const auto& payload : contents.payloads) out.push_back({index, payload});
  segment.read += contents.payloads.size();
  const bool newest = std::next(it) == segments_.end();
  caught_up_ = newest && contents.payloads.empty();
  if (contents.payloads.empty() && !newest) {
    // The agent writes whole frames and has moved on: an incomplete tail
    // here is a write that failed, never to be finished.
    // A zero-byte segment (a full disk leaves them: the writer opens a new
    // segment after a failed write) holds nothing, so there is nothing to report.
    std::error_code ec;
    const auto size = std::filesystem::file_size(segment.path, ec);
    if (contents.incomplete_tail && !ec && size > 0)
      problems.push_back({segment.path, segment.offset, "incomplete frame at the end of a finished segment, skipped"});
    segment.finished = true;
    delete_if_done(index);
  }
  return out;
}

void SpoolTail::acknowledge(uint32_t index) {
  auto it = segments_.find(index);
  if (it == segments_.end()) return;
  ++it->second.acknowledged;
  delete_if_done(index);
}

void SpoolTail::delete_if_done(uint32_t index) {
  auto it = segments_.find(index);
  if (it == segments_.end() || !it->second.finished || it->second.acknowledged < it->second.read) return;
  std::error_code ec;
  std::filesystem::remove(it->second.path, ec);
  segments_.erase(it);
}

void SpoolTail::remove_all() {
  std::error_code ec;
  segments_.clear();
  // Segments, the accounting file, the forwarder's lock: all delivered or spent.
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec))
    if (entry.is_regular_file(ec)) std::filesystem::remove(entry.path(), ec);
  std::filesystem::remove(dir_, ec);  // only if empty
}

uint64_t SpoolTail::unacknowledged() const {
  uint64_t n = 0;
  for (const auto& [index, segment] : segments_) n += segment.read - segment.acknowledged;
  return n;
}

}  // namespace castscope
