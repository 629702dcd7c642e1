// First blocks for the arenas that decoded batches live in, reused.
//
// Every batch is parsed into an arena of its own whose first block is about
// four times the batch's wire size (a megabyte or so). Allocated fresh, that
// block is a new mapping (the collector maps blocks over 256 KiB so that they
// go back to the system whole), and the kernel faults in and zeroes each of
// its pages: about a tenth of the gRPC threads' time at full ingest. The pool
// keeps a few blocks that committed batches gave back and hands them to the
// next batches instead.
//
// Bounded: at most `max_idle_bytes` of blocks wait in the pool (a block that
// does not fit goes back to the system); release_idle() empties it (the
// collector calls it when its last ingest stream ends). Blocks handed out
// belong to their batch and count in its bytes() like any arena block.
// Thread-safe: gRPC threads take blocks, the writer thread gives them back.
#pragma once

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

namespace castscope::collector {

class ArenaBlockPool {
 public:
  class Block;

  explicit ArenaBlockPool(size_t max_idle_bytes) : max_idle_bytes_(max_idle_bytes) {}
  ArenaBlockPool(const ArenaBlockPool&) = delete;
  ArenaBlockPool& operator=(const ArenaBlockPool&) = delete;

  // A block of at least `bytes`: an idle one no larger than twice that, else
  // a new one (rounded up to 64 KiB). Its contents are whatever its last
  // user left.
  Block take(size_t bytes);
  void release_idle();
  size_t idle_bytes() const;

  // The process's pool for batch arenas (never destroyed: batches may still
  // be freed while the process exits).
  static ArenaBlockPool& for_batches();

 private:
  struct Memory {
    std::unique_ptr<char[]> data;
    size_t size = 0;
  };
  void give_back(Memory memory);

  const size_t max_idle_bytes_;
  mutable std::mutex mutex_;
  std::vector<Memory> idle_;
  size_t idle_bytes_ = 0;
};

// A block on loan from a pool; goes back to it when destroyed.
class ArenaBlockPool::Block {
 public:
  Block() = default;
  Block(Block&&) = default;
  Block& operator=(Block&& other) noexcept {
    if (this != &other) {
      reset();
      pool_ = other.pool_;
      memory_ = std::move(other.memory_);
    }
    return *this;
  }
  ~Block() { reset(); }

  char* data() const { return memory_.data.get(); }
  size_t size() const { return memory_.size; }

 private:
  friend class ArenaBlockPool;
  Block(ArenaBlockPool* pool, Memory memory) : pool_(pool), memory_(std::move(memory)) {}
  void reset() {
    if (pool_ && memory_.data) pool_->give_back(std::move(memory_));
    memory_ = {};
  }

  ArenaBlockPool* pool_ = nullptr;
  Memory memory_;
};

}  // namespace castscope::collector
