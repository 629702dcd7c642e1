#include "server/src/batch/arena_block_pool.h"

#include <algorithm>

namespace castscope::collector {

namespace {
// Sizes are rounded up to this, so that the blocks of similar batches fit
// each other, while wasting little of the queue budget.
constexpr size_t kBlockGranule = 64u << 10;
// Enough for the batches one commit releases at full ingest (a 4096-event
// batch takes about a megabyte); small beside the 64 MiB queue budget.
constexpr size_t kBatchPoolIdleBytes = 8u << 20;
}  // namespace

ArenaBlockPool::Block ArenaBlockPool::take(size_t bytes) {
  {
    std::lock_guard lock(mutex_);
    // The smallest idle block that fits and wastes at most half of itself.
    auto best = idle_.end();
    for (auto it = idle_.begin(); it != idle_.end(); ++it)
      if (it->size >= bytes && it->size / 2 <= bytes && (best == idle_.end() || it->size < best->size)) best = it;
    if (best != idle_.end()) {
      Memory memory = std::move(*best);
      idle_.erase(best);
      idle_bytes_ -= memory.size;
      return Block(this, std::move(memory));
    }
  }
  const size_t size = (std::max<size_t>(bytes, 1) + kBlockGranule - 1) / kBlockGranule * kBlockGranule;
  // Default-initialized: not zeroed, the arena writes before it reads.
  return Block(this, Memory{std::make_unique_for_overwrite<char[]>(size), size});
}

void ArenaBlockPool::give_back(Memory memory) {
  std::lock_guard lock(mutex_);
  if (idle_bytes_ + memory.size > max_idle_bytes_) return;  // freed here
  idle_bytes_ += memory.size;
  idle_.push_back(std::move(memory));
}

void ArenaBlockPool::release_idle() {
  std::vector<Memory> released;
  std::lock_guard lock(mutex_);
  released.swap(idle_);
  idle_bytes_ = 0;
}

size_t ArenaBlockPool::idle_bytes() const {
  std::lock_guard lock(mutex_);
  return idle_bytes_;
}

ArenaBlockPool& ArenaBlockPool::for_batches() {
  static ArenaBlockPool* const pool = new ArenaBlockPool(kBatchPoolIdleBytes);
  return *pool;
}

}  // namespace castscope::collector
