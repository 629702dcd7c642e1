#include "common/spool/spool_backlog.h"

#include <algorithm>

namespace castscope {

bool SpoolBacklog::waitable(SpoolWriter::Failure failure) {
  return failure == SpoolWriter::Failure::kNoSpace || failure == SpoolWriter::Failure::kFolderFull;
}

uint64_t SpoolBacklog::flush(SpoolWriter& spool) {
  uint64_t written = 0;
  while (!waiting_.empty() && spool.append(waiting_.front().payload)) {
    bytes_ -= waiting_.front().payload.size();
    waiting_.pop_front();
    ++written;
  }
  return written;
}

SpoolBacklog::Outcome SpoolBacklog::append(SpoolWriter& spool, Batch batch, uint64_t& written, bool may_wait) {
  written += flush(spool);
  if (waiting_.empty()) {
    if (spool.append(batch.payload)) {
      ++written;
      return Outcome::kWritten;
    }
    if (!waitable(spool.failure())) return Outcome::kRefused;
  }
  if (!may_wait) return Outcome::kRefused;
  // Behind a waiting batch, or refused for a full disk: wait, if there is room.
  if (bytes_ + batch.payload.size() > max_bytes_) return Outcome::kRefused;
  bytes_ += batch.payload.size();
  peak_bytes_ = std::max(peak_bytes_, bytes_);
  waiting_.push_back(std::move(batch));
  return Outcome::kWaiting;
}

std::deque<SpoolBacklog::Batch> SpoolBacklog::take_all() {
  std::deque<Batch> out;
  out.swap(waiting_);
  bytes_ = 0;
  return out;
}

}  // namespace castscope
