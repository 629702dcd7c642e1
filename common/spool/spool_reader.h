// Reads spool segments frame by frame (see spool_format.h). A corrupt frame
// (bad magic, length or CRC) is reported and skipped: the reader scans on to
// the next frame magic, so one bad record never costs the rest of the file.
// A frame cut off at the end of the file is reported as incomplete, not as
// corrupt: its writer may still be appending (or was killed mid-write).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace castscope::spool {

struct ReadProblem {
  std::string file;
  uint64_t offset = 0;
  std::string what;
  std::string str() const { return file + " at byte " + std::to_string(offset) + ": " + what; }
};

// Parses frames out of an in-memory buffer; the core of every reader and the
// fuzz target. `data` starts at a frame boundary (after the file magic).
class FrameParser {
 public:
  explicit FrameParser(std::string_view data, std::string file_name = "<buffer>", uint64_t base_offset = 0)
      : data_(data), file_(std::move(file_name)), base_(base_offset) {}

  // Returns the next valid frame's payload, skipping corrupt bytes (each run of
  // them recorded in problems()). False at the end of the data.
  bool next(std::string_view& payload);
  // Bytes consumed so far: frames returned, and corrupt bytes skipped.
  uint64_t consumed() const { return pos_; }
  // A frame that starts before the end but does not fit: bytes from consumed().
  bool incomplete_tail() const { return incomplete_tail_; }
  const std::vector<ReadProblem>& problems() const { return problems_; }

 private:
  std::string_view data_;
  std::string file_;
  uint64_t base_ = 0;
  uint64_t pos_ = 0;
  bool incomplete_tail_ = false;
  std::vector<ReadProblem> problems_;
};

struct SegmentContents {
  std::vector<std::string> payloads;
  std::vector<ReadProblem> problems;
  uint64_t complete_bytes = 0;   // file offset after the last whole frame (or skipped bytes)
  bool incomplete_tail = false;  // the file ends inside a frame
};

// Reads one whole segment file from `offset` (0: the start, checks the file magic).
SegmentContents read_segment(const std::string& path, uint64_t offset = 0);

// Segment files of one agent folder, in write order.
std::vector<std::string> list_segments(const std::string& agent_dir);

// Agent folders under a spool directory (each holds that agent's segments).
std::vector<std::string> list_agent_dirs(const std::string& spool_dir);

}  // namespace castscope::spool
