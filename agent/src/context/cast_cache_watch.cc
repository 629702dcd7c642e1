#include "agent/src/context/cast_cache_watch.h"

#include <ATen/CachedTensorUtils.h>
#include <ATen/autocast_mode.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <array>
#include <cstdint>
#include <optional>
#include <utility>

namespace castscope {
namespace {

std::atomic<uint64_t> g_next_generation{1};

// Frees the thread's memo at thread exit (its weak references with it).
// Touched only when the memo is made, so the look-ups need no guard; `arm`
// only touches it, which constructs it and registers its destructor.
struct CastMemoOwner {
  bool armed = false;
  void arm() { armed = true; }
  ~CastMemoOwner() {
    ThreadBlock& thread = this_thread_block();
    // Unnamed before it is freed: a weak reference's release that came back
    // into castscope would find no memo, not one being destroyed.
    CastMemo* memo = std::exchange(thread.cast_memo, nullptr);
    thread.cast_memo_gone = true;  // a cast seen by a later destructor goes through the lock
    delete memo;
  }
};
thread_local CastMemoOwner t_cast_memo_owner;

// Makes the thread's memo if it has none (and is not exiting): before the
// observer's lock is taken, so that neither the allocation nor registering
// the owner's destructor (which takes glibc's loader lock) runs under it.
void ensure_memo(ThreadBlock& thread) {
  if (thread.cast_memo != nullptr || thread.cast_memo_gone) return;
  t_cast_memo_owner.arm();
  thread.cast_memo = new CastMemo();
}

// The slot `source`'s cast is remembered in: its own way, else the way seen
// least recently (that source given up); seen last from now.
SeenCast& slot_for(CastMemo& memo, const c10::TensorImpl* source) {
  SeenCastSet& set = seen_cast_set(memo, source);
  uint8_t way = 1 - set.last;  // the way seen least recently, unless `source` has one
  if (set.ways[0].source == source) way = 0;
  if (set.ways[1].source == source) way = 1;
  set.last = way;
  return set.ways[way];
}

}  // namespace

CastCacheWatch::CastCacheWatch() : generation_(g_next_generation.fetch_add(1)) {}

bool CastCacheWatch::cacheable_leaf(const at::Tensor& source, c10::ScalarType target, c10::DeviceType device) {
  // The rest of cached_cast's condition, the cheapest tests first.
  return source.scalar_type() == at::kFloat && source.scalar_type() != target &&
         !source.is_view() && at::autocast::is_eligible(source, device) &&
         target == at::autocast::get_lower_precision_fp_from_device_type(device) &&
         at::autocast::is_autocast_cache_enabled() && !at::caching::is_cached_tensor(source) &&
         !c10::InferenceMode::is_enabled();  // torch keeps no cast made under inference mode (pytorch#158232)
}

void CastCacheWatch::set_sample_every_misses(uint64_t misses) {
  std::lock_guard<std::mutex> lock(mutex_);
  every_misses_ = misses;
  next_sample_after_ = misses;
  casts_since_sample_.store(0, std::memory_order_relaxed);
}

bool CastCacheWatch::knows_cast(const at::Tensor& source, const at::Tensor& result) const {
  return seen_cast(this_thread_block(), source.unsafeGetTensorImpl(), result.unsafeGetTensorImpl(),
                   generation_.load(std::memory_order_relaxed)) != nullptr;
}

void CastCacheWatch::remember(ThreadBlock& thread, const at::Tensor& source, const at::Tensor& result,
                                 int64_t version_at_cast) const {
  if (thread.cast_memo == nullptr) return;  // none (ensure_memo): thread exit, the lock answers from here on
  SeenCast& seen = slot_for(*thread.cast_memo, source.unsafeGetTensorImpl());
  seen.source = source.unsafeGetTensorImpl();
  seen.cast = result.unsafeGetTensorImpl();
  seen.version_at_cast = version_at_cast;
  seen.generation = generation_.load(std::memory_order_relaxed);
  seen.hold.emplace(result.getIntrusivePtr());
}

CastCacheWatch::Observation CastCacheWatch::observe(ThreadBlock& thread, const at::Tensor& source,
                                                          const at::Tensor& result, int64_t source_version) {
  Observation out;
  if (observe_known(thread, source, result, source_version, out)) return out;
  out.source_version = source_version;
  ensure_memo(thread);
  std::lock_guard<std::mutex> lock(mutex_);
  const uint64_t casts_since_sample = casts_since_sample_.fetch_add(1, std::memory_order_relaxed) + 1;
  const c10::TensorImpl* key = source.unsafeGetTensorImpl();
  auto found = entries_.find(key);
  if (found != entries_.end()) {
    Entry& entry = found->second;
    // Addresses compared, no weak lock(): an entry's weak references keep
    // both TensorImpls' memory, so no other tensor can have either address.
    // The entry is this source's, and an equal cast address is the same
    // cast, alive because the caller holds `result`.
    if (entry.cast._unsafe_get_target() == result.unsafeGetTensorImpl()) {
      out.cached_version = entry.version_at_cast;
      out.outcome = entry.version_at_cast == out.source_version ? CacheOutcome::kHit : CacheOutcome::kStaleHit;
      hits_.fetch_add(1, std::memory_order_relaxed);
      remember(thread, source, result, entry.version_at_cast);
      return out;
    }
    if (entry.cast.expired()) ++released_;  // a region exit let go of it before this source came back
  }
  // A new cast: the cache stored it (or replaced one the region exit cleared).
  out.outcome = CacheOutcome::kMiss;
  out.cached_version = out.source_version;
  entries_.insert_or_assign(key, Entry{WeakImpl(source.getIntrusivePtr()), WeakImpl(result.getIntrusivePtr()),
                                        out.source_version, static_cast<uint64_t>(result.numel()) * result.element_size()});
  remember(thread, source, result, out.source_version);
  out.sample_due = next_sample_after_ > 0 && casts_since_sample >= next_sample_after_;
  return out;
}

CastCacheWatch::Sample CastCacheWatch::sample() {
  Sample out;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.cast.expired()) {
      it = entries_.erase(it);  // the cache let go of the cast
      ++released_;
      continue;
    }
    ++out.live_casts;
    out.live_bytes += it->second.cast_bytes;
    if (it->second.source.expired()) {
      ++out.orphaned_casts;
      out.orphaned_bytes += it->second.cast_bytes;
    }
    ++it;
  }
  out.cache_hits = hits_.load(std::memory_order_relaxed);
  out.released_casts = released_;
  // The next scan waits for as many casts as this one visited entries.
  casts_since_sample_.store(0, std::memory_order_relaxed);
  if (every_misses_ > 0) next_sample_after_ = std::max<uint64_t>(every_misses_, out.live_casts);
  return out;
}

void CastCacheWatch::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
  generation_.store(g_next_generation.fetch_add(1), std::memory_order_relaxed);  // every thread's memo forgotten
  casts_since_sample_.store(0, std::memory_order_relaxed);
  hits_.store(0, std::memory_order_relaxed);
  released_ = 0;
}

}  // namespace castscope
