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
// - The unboxed kernel's steady state hands an op's casts over as CastCounts,
//   no records made (`fold_op_casts`), and the op and its casts fold with one
//   look-up: a second, direct-mapped array remembers, per op group (the op's
//   key and each cast's part of its own), the slots its keys took. A repeat of
//   the group adds to those slots without making or hashing a key per event.
//   A slot keeps its key until the table is emptied, which starts a new
//   generation and so forgets every group (docs/performance.md, "tenth pass").
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

// A cast as aggregate mode counts it, with no record made: the fields of its
// key that are not its op's (the rest are: the same op, thread, policy,
// device, line, mode and phase, as every cast record of an op has them) and
// what its counter sums. The first eight bytes are its part of an op group's
// key (round_trip, which is not in the key, read as zero there).
struct CastCount {
  uint16_t arg_index;
  DType src;
  DType dst;
  CastOutcome outcome;
  Role role;
  CacheOutcome cache;
  bool round_trip;
  uint64_t bytes;           // the source's
  uint32_t source_version;  // cacheable casts, as CastFields has them
  uint32_t cached_version;
};
static_assert(offsetof(CastCount, bytes) == 8, "a cast's part of a group key is CastCount's first eight bytes");

// The key of `cast`, a cast of the op whose key is `op_key`, as
// counter_key gives it for the cast's record.
CounterKey counter_key(const CounterKey& op_key, const CastCount& cast);

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
  // The same for an op record and its casts (n) as CastCounts, counted as
  // their records would be (each cast at the op's ts_ns), with one look-up
  // when the op group is remembered.
  size_t fold_op_casts(const Record& op, const CastCount* casts, size_t n, uint64_t iteration);
  // Whether a record folds into counters (casts and ops) or goes on as it is.
  static bool folds(const Record& record) { return record.kind == RecordKind::kCast || record.kind == RecordKind::kOp; }

  // Moves every counter into `out` (appended) and leaves the table empty.
  void take(std::vector<CountFields>& out);
  // Empties the table, keeping nothing (a new session).
  void clear();

  size_t max_keys() const { return max_keys_; }
  size_t capacity() const { return mask_ + 1; }
  size_t memory_bytes() const { return capacity() * sizeof(CountFields) + kGroups * sizeof(Group); }

 private:
  void lock() {
    while (busy_.exchange(true, std::memory_order_acquire)) {
    }
  }
  void unlock() { busy_.store(false, std::memory_order_release); }
  // The slot of `key`, made (first event at `ts_ns`) when new; kRefused when
  // new and the table is full. The caller holds busy_ (defined in
  // cast_counters.cc, its only callers there).
  static constexpr uint32_t kRefused = UINT32_MAX;
  [[gnu::always_inline]] inline uint32_t slot_locked(const CounterKey& key, uint64_t ts_ns, uint64_t iteration);
  [[gnu::always_inline]] inline bool fold_locked(const Record& record, uint64_t iteration);

  // Casts an op group holds at most; an op with more folds key by key.
  static constexpr size_t kGroupCasts = 4;
  // Op groups remembered (a power of two): a training step's distinct ones
  // fit, and two that collide only fold the slower way.
  static constexpr size_t kGroups = 512;
  // An op group's key, in words compared one by one: the op's CounterKey and
  // the cast count (4 words), then each cast's part (CastCount's first eight
  // bytes, round_trip zeroed); the unused ones zero.
  static constexpr size_t kGroupKeyWords = 4 + kGroupCasts;
  static_assert(sizeof(CounterKey) + sizeof(uint32_t) == 32);
  struct Group {
    uint64_t key[kGroupKeyWords];
    uint64_t generation;             // generation_ when remembered; 0: never
    uint32_t slot[kGroupCasts + 1];  // the casts' slots, then the op's
  };

  [[gnu::always_inline]] static inline bool same_group(const Group& group, const uint64_t* words,
                                                      uint64_t generation);
  // fold_op_casts when its group is not remembered (a new one, or one another
  // pushed out): key by key, the caller holding busy_; the group (nullptr:
  // none, too many casts) is remembered with `words` when every key counted.
  [[gnu::cold, gnu::noinline]] size_t fold_op_casts_key_by_key(const Record& op, const CounterKey& op_key,
                                                               const CastCount* casts, size_t n, uint64_t iteration,
                                                               Group* group, const uint64_t* words);

  const size_t max_keys_;
  const size_t mask_;
  std::unique_ptr<CountFields[]> slots_;  // count 0: empty
  size_t used_ = 0;                       // guarded by busy_
  std::unique_ptr<Group[]> groups_;       // direct-mapped by the group key's hash; guarded by busy_
  uint64_t generation_ = 1;               // guarded by busy_; a take or clear starts the next
  std::atomic<bool> busy_{false};
};

}  // namespace castscope
