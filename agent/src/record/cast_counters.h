// Aggregate mode's counters: one thread's cast and op events folded by key
// (CounterKey: site, op, argument, dtypes, cache outcome, mode, phase)
// between two flushes, in place of one ring record per event.
//
// Concurrency design:
// - The owning thread is the only one that folds (`fold`); the exporter (every
//   second) and the owner itself (at an optimizer step) flush. Both sides take
//   a spinlock: the owner's fold holds it for one probe of the table, a flush
//   for one copy of the table (`take`), never for encoding. An exchange with
//   acquire and a store with release order the entries between them.
// - The table is one fixed array, allocated when the table is made (never on
//   the hot path), of a power of two slots at least 4/3 of the key limit, so
//   probes stay short. A key past the limit is refused: the caller counts the
//   event as dropped.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "agent/src/record/cast_record.h"

namespace castscope {

// Upper bound of aggregate_max_keys (agent_config.h).
inline constexpr size_t kMaxAggregateKeys = size_t{1} << 20;

// The key of a cast or op record (kind kCast or kOp), zero-padded.
CounterKey counter_key(const Record& record);

class CounterTable {
 public:
  explicit CounterTable(size_t max_keys);
  CounterTable(const CounterTable&) = delete;
  CounterTable& operator=(const CounterTable&) = delete;

  // Owner thread. Adds one event to its key's counter; false when the key is
  // new and the table already holds max_keys keys (the event is not counted).
  bool fold(const Record& record, uint64_t iteration);
  // An op's records, those of `before` (n) that fold then `op`, under one
  // lock; returns how many were not counted (keys past the limit).
  size_t fold_op(const Record* before, size_t n, const Record& op, uint64_t iteration);
  // Whether a record folds into counters (casts and ops) or goes on as it is.
  static bool folds(const Record& record) { return record.kind == RecordKind::kCast || record.kind == RecordKind::kOp; }

  // Moves every counter into `out` (appended) and leaves the table empty.
  void take(std::vector<CountFields>& out);
  // Empties the table, keeping nothing (a new session).
  void clear();

  size_t max_keys() const { return max_keys_; }
  size_t capacity() const { return mask_ + 1; }
  size_t memory_bytes() const { return capacity() * sizeof(CountFields); }

 private:
  void lock() {
    while (busy_.exchange(true, std::memory_order_acquire)) {
    }
  }
  void unlock() { busy_.store(false, std::memory_order_release); }
  // fold's work, the caller holding busy_ (defined in cast_counters.cc, its only callers there).
  [[gnu::always_inline]] inline bool fold_locked(const Record& record, uint64_t iteration);

  const size_t max_keys_;
  const size_t mask_;
  std::unique_ptr<CountFields[]> slots_;  // count 0: empty
  size_t used_ = 0;                       // guarded by busy_
  std::atomic<bool> busy_{false};
};

}  // namespace castscope
