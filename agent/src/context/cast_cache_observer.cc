#include "agent/src/context/cast_cache_observer.h"

#include <ATen/CachedTensorUtils.h>
#include <ATen/autocast_mode.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>

namespace castscope {

bool CastCacheObserver::cacheable_leaf(const at::Tensor& source, c10::ScalarType target, c10::DeviceType device) {
  // The rest of cached_cast's condition, the cheapest tests first.
  return source.scalar_type() == at::kFloat && source.scalar_type() != target &&
         !source.is_view() && at::autocast::is_eligible(source, device) &&
         target == at::autocast::get_lower_precision_fp_from_device_type(device) &&
         at::autocast::is_autocast_cache_enabled() && !at::caching::is_cached_tensor(source) &&
         !c10::InferenceMode::is_enabled();  // torch keeps no cast made under inference mode (pytorch#158232)
}

void CastCacheObserver::set_sample_every_misses(uint64_t misses) {
  std::lock_guard<std::mutex> lock(mutex_);
  every_misses_ = misses;
  next_sample_after_ = misses;
  casts_since_sample_ = 0;
}

CastCacheObserver::Observation CastCacheObserver::observe(const at::Tensor& source, const at::Tensor& result,
                                                          int64_t source_version) {
  Observation out;
  out.source_version = source_version;
  const c10::TensorImpl* key = source.unsafeGetTensorImpl();
  std::lock_guard<std::mutex> lock(mutex_);
  ++casts_since_sample_;
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
      ++hits_;
      return out;
    }
    if (entry.cast.expired()) ++released_;  // a region exit let go of it before this source came back
  }
  // A new cast: the cache stored it (or replaced one the region exit cleared).
  out.outcome = CacheOutcome::kMiss;
  out.cached_version = out.source_version;
  entries_.insert_or_assign(key, Entry{WeakImpl(source.getIntrusivePtr()), WeakImpl(result.getIntrusivePtr()),
                                        out.source_version, static_cast<uint64_t>(result.numel()) * result.element_size()});
  out.sample_due = next_sample_after_ > 0 && casts_since_sample_ >= next_sample_after_;
  return out;
}

CastCacheObserver::Sample CastCacheObserver::sample() {
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
  out.cache_hits = hits_;
  out.released_casts = released_;
  // The next scan waits for as many casts as this one visited entries.
  casts_since_sample_ = 0;
  if (every_misses_ > 0) next_sample_after_ = std::max<uint64_t>(every_misses_, out.live_casts);
  return out;
}

void CastCacheObserver::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
  casts_since_sample_ = 0;
  hits_ = 0;
  released_ = 0;
}

}  // namespace castscope
