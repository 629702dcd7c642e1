// Batches the spool cannot take yet wait here, in memory up to a byte cap,
// and go to disk first, in order, once the forwarder has freed space.
//
// Why: on a spool disk of a few MiB the disk holds a tenth of a second of a
// busy job's batches, so a collector that keeps up on average still falls
// behind for a moment, and each such moment lost batches (a 2 MiB disk lost
// 40 % of a 300 k-event run). Only a full disk or a folder at its cap is
// waited out: the forwarder frees both. Other failures refuse at once.
//
// The waiting batches are always the newest (numbered above every batch on
// disk): a caller that drops them drops the top of its sequence, so the batch
// stream keeps no gap. Used under the agent's io lock, like the SpoolWriter.
#pragma once

#include <cstdint>
#include <deque>
#include <string>

#include "common/spool/spool_writer.h"

namespace castscope {

class SpoolBacklog {
 public:
  struct Batch {
    std::string payload;
    uint64_t events = 0;
  };
  enum class Outcome { kWritten, kWaiting, kRefused };

  explicit SpoolBacklog(uint64_t max_bytes = 0) : max_bytes_(max_bytes) {}

  // Writes the waiting batches, then `batch`. kWaiting: it waits in memory
  // (the disk or folder is full); kRefused: the cap is reached, the failure
  // is not one waiting cures (spool.failure() says which), or it may not
  // wait (`may_wait` false: a final batch), and the caller counts its events
  // lost. `written` counts the batches written.
  Outcome append(SpoolWriter& spool, Batch batch, uint64_t& written, bool may_wait = true);
  // Writes waiting batches, oldest first, until the spool refuses one.
  // Returns how many were written.
  uint64_t flush(SpoolWriter& spool);
  // Removes every waiting batch, for the caller to count as lost.
  std::deque<Batch> take_all();

  bool empty() const { return waiting_.empty(); }
  size_t batches() const { return waiting_.size(); }
  uint64_t bytes() const { return bytes_; }
  // The most bytes that waited at once since the spool opened.
  uint64_t peak_bytes() const { return peak_bytes_; }

 private:
  static bool waitable(SpoolWriter::Failure failure);

  uint64_t max_bytes_;
  std::deque<Batch> waiting_;
  uint64_t bytes_ = 0;
  uint64_t peak_bytes_ = 0;
};

}  // namespace castscope
