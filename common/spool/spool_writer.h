// Appends batches to an agent's spool folder as checksummed frames
// (spool_format.h). Each frame goes out in one write(2), so a reader sees
// whole frames, or a tail it knows is incomplete; a killed process loses at
// most the batch it was writing. Segments rotate by size; the folder's total
// is capped, and a batch that would pass the cap is refused (the caller counts
// its events as dropped). A write that fails part way (a full disk) is cut
// back off the segment, so the segment stays whole and in use: a full disk
// leaves no trail of empty segments behind. Owned by one thread.
//
// A disk smaller than a segment: the segment being written is deleted only
// once it is finished (rotated) and acknowledged, so a segment that cannot
// fit would fill the disk with nothing to free. Each new segment is therefore
// at most an eighth of the space its file system has free when it opens (not
// below kMinSegmentBytes): on a small disk segments rotate early, and the
// forwarder frees each as soon as the collector has stored it.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace castscope {

class SpoolWriter {
 public:
  // Why append() refused a batch; callers count losses per kind.
  enum class Failure { kNone, kFolderFull, kNoSpace, kTooLarge, kIo };
  static const char* failure_name(Failure failure);

  SpoolWriter() = default;
  ~SpoolWriter();
  SpoolWriter(const SpoolWriter&) = delete;
  SpoolWriter& operator=(const SpoolWriter&) = delete;

  // Creates `agent_dir` (mode 0700) and its first segment. Returns an error
  // message, empty on success.
  std::string open(const std::string& agent_dir, uint64_t segment_bytes, uint64_t max_total_bytes);
  bool is_open() const { return fd_ >= 0; }
  // False when the frame was not written: spool full, or a write error
  // (failure() and error() say which; the next call tries again).
  bool append(std::string_view payload);
  void close();

  Failure failure() const { return failure_; }
  const std::string& error() const { return error_; }
  const std::string& directory() const { return dir_; }

 private:
  static constexpr uint64_t kMinSegmentBytes = 32 * 1024;

  bool open_segment(uint32_t index);
  bool fail(Failure failure, std::string message);
  uint64_t bytes_on_disk() const;

  std::string dir_;
  int fd_ = -1;
  uint32_t segment_ = 0;
  uint64_t segment_size_ = 0;
  uint64_t segment_bytes_ = 0;
  uint64_t segment_limit_ = 0;  // this segment's: segment_bytes_, or less on a small disk
  uint64_t max_total_bytes_ = 0;
  uint64_t total_at_rotation_ = 0;  // bytes of the folder's other segments when this one opened
  std::string error_;
  Failure failure_ = Failure::kNone;
};

}  // namespace castscope
