// A thread's memo of the casts it saw the cast cache return
// (cast_cache_watch.h, whose observe_known reads it on every cacheable
// cast): here, in a header, so that read is inlined into the kernels' casts
// (as a call into cast_cache_watch.cc it cost ~25 instructions a cast).
// Only the owning thread reads or writes its memo.
#pragma once

#include <c10/core/TensorImpl.h>
#include <c10/core/UndefinedTensorImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <optional>

#include "agent/src/record/thread_block.h"

namespace castscope {

// One cast a thread saw cached_cast return for a source, as the observer of
// `generation` recorded it. `hold` keeps the cast's memory (a weak
// reference), so no other tensor can take its address while the memo names it.
struct SeenCast {
  const c10::TensorImpl* source = nullptr;
  const c10::TensorImpl* cast = nullptr;
  int64_t version_at_cast = 0;
  uint64_t generation = 0;
  std::optional<c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>> hold;
};
// Two-way set associative by source, 32 sets: a model's weights (two casts
// per layer, usually) share 64 slots. Direct-mapped, the two sources of one
// linear or conv (weight and bias) fell on one slot in some processes,
// depending on where the heap put them, and then each evicted the other on
// every op, which sent both casts through the lock (~460 more instructions
// per linear; docs/performance.md, "fifteenth pass"). A set names the way
// seen last, so a third source in a set evicts the one seen least recently;
// the ways stay where they are (swapping them, as the memo did first, moved
// two entries and their weak references on every look-up of a weight and
// bias sharing a set: ~100 instructions a cast in such a process).
inline constexpr size_t kSeenCastSets = 32;
struct SeenCastSet {
  std::array<SeenCast, 2> ways;
  uint8_t last = 0;  // the way seen last
};

// The thread's memo, reached through its ThreadBlock (one TLS look-up per op
// for all of castscope's thread state): a thread_local array with a
// destructor cost three __tls_get_addr calls per look-up, its guard's
// included (docs/performance.md, "fourteenth pass").
struct CastMemo {
  std::array<SeenCastSet, kSeenCastSets> sets;
};

inline SeenCastSet& seen_cast_set(CastMemo& memo, const c10::TensorImpl* source) {
  const auto address = reinterpret_cast<uintptr_t>(source);
  return memo.sets[((address >> 4) ^ (address >> 10)) & (kSeenCastSets - 1)];
}

// The thread's memo of `result` as the cast of `source` the observer of
// `generation` saw, or nullptr: one look-up of the thread's memo. A source
// the set holds becomes the way seen last.
inline const SeenCast* seen_cast(const ThreadBlock& thread, const c10::TensorImpl* source,
                                 const c10::TensorImpl* result, uint64_t generation) {
  if (thread.cast_memo == nullptr) return nullptr;
  SeenCastSet& set = seen_cast_set(*thread.cast_memo, source);
  uint8_t way = 0;
  if (set.ways[1].source == source) {
    way = 1;
  } else if (set.ways[0].source != source) {
    return nullptr;
  }
  set.last = way;
  const SeenCast& seen = set.ways[way];
  return seen.cast == result && seen.generation == generation ? &seen : nullptr;
}

}  // namespace castscope
