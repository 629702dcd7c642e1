// Follows one agent's spool folder as the agent appends to it: hands out new
// frames in write order, and deletes a segment once every frame in it has
// been acknowledged and the agent has moved on to a later one.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/spool/spool_reader.h"

namespace castscope {

class SpoolTail {
 public:
  struct Frame {
    uint32_t segment = 0;
    std::string payload;
  };

  explicit SpoolTail(std::string agent_dir) : dir_(std::move(agent_dir)) {}

  // Frames appended since the last call (corrupt frames skipped and reported).
  // Reads one segment per call: an empty result does not mean the folder is
  // read to its end (see caught_up()).
  std::vector<Frame> poll(std::vector<spool::ReadProblem>& problems);
  // True when the last poll() found nothing left to read: every segment but
  // the newest finished, the newest read to its end. Only then may a
  // forwarder whose agent is gone call its spool delivered.
  bool caught_up() const { return caught_up_; }
  // One frame of `segment` is acknowledged (frames are acknowledged in order).
  void acknowledge(uint32_t segment);
  // Deletes every file in the folder (segments, accounting, lock) and the
  // folder: the agent's final batch is stored.
  void remove_all();
  // Frames read but not yet acknowledged, in segments still on disk.
  uint64_t unacknowledged() const;
  const std::string& directory() const { return dir_; }

 private:
  struct Segment {
    std::string path;
    uint64_t offset = 0;  // next unread byte
    uint64_t read = 0;
    uint64_t acknowledged = 0;
    bool finished = false;  // a later segment exists and this one is read to its end
  };
  void delete_if_done(uint32_t index);

  std::string dir_;
  std::map<uint32_t, Segment> segments_;
  bool caught_up_ = false;
};

}  // namespace castscope
