// Single-producer single-consumer ring of fixed-size records.
//
// Design: the owning training thread is the only writer (`try_push`); the
// exporter, holding EventLog's drain lock, is the only reader (`drain`).
// The writer publishes a slot by storing `head_` with release after copying
// the record, so a reader that loads `head_` with acquire sees the whole
// record. The reader frees slots by storing `tail_` with release; the writer
// loads it with acquire before reusing a slot (only when its last look
// said full: it keeps that look in tail_seen_). Each index is written by one
// side only, so no read-modify-write is needed. A full ring drops the record
// (training must never wait on logging) and counts the drop.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

namespace castscope {

template <typename T>
class RingBuffer {
 public:
  explicit RingBuffer(size_t capacity_pow2)
      : mask_(capacity_pow2 - 1), slots_(std::make_unique<T[]>(capacity_pow2)) {}

  size_t capacity() const { return mask_ + 1; }

  // Writer only. Returns false (and counts) when full.
  bool try_push(const T& item) {
    const uint64_t head = head_.load(std::memory_order_relaxed);
    // The reader's tail_ is read only when the tail seen last says full: a
    // push does not touch the line the reader writes.
    if (head - tail_seen_ > mask_) {
      tail_seen_ = tail_.load(std::memory_order_acquire);
      if (head - tail_seen_ > mask_) {
        dropped_.fetch_add(1, std::memory_order_relaxed);
        return false;
      }
    }
    slots_[head & mask_] = item;
    head_.store(head + 1, std::memory_order_release);
    return true;
  }

  // Reader only. Calls fn(const T&) for every published item, oldest first.
  template <typename Fn>
  size_t drain(Fn&& fn) {
    const uint64_t tail = tail_.load(std::memory_order_relaxed);
    const uint64_t head = head_.load(std::memory_order_acquire);
    for (uint64_t i = tail; i != head; ++i) fn(slots_[i & mask_]);
    tail_.store(head, std::memory_order_release);
    return static_cast<size_t>(head - tail);
  }

  // Items waiting; any thread (a snapshot).
  size_t size() const {
    return static_cast<size_t>(head_.load(std::memory_order_acquire) - tail_.load(std::memory_order_acquire));
  }

  bool empty() const {
    return head_.load(std::memory_order_acquire) == tail_.load(std::memory_order_acquire);
  }

  // Drops since the last call; any thread.
  uint64_t take_dropped() { return dropped_.exchange(0, std::memory_order_relaxed); }

 private:
  const uint64_t mask_;
  std::unique_ptr<T[]> slots_;
  alignas(64) std::atomic<uint64_t> head_{0};
  uint64_t tail_seen_ = 0;  // writer only: tail_ when last read, never ahead of it
  alignas(64) std::atomic<uint64_t> tail_{0};
  alignas(64) std::atomic<uint64_t> dropped_{0};
};

}  // namespace castscope
