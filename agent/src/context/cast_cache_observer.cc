#include "agent/src/context/cast_cache_observer.h"

#include <ATen/CachedTensorUtils.h>
#include <ATen/autocast_mode.h>

namespace castscope {

bool CastCacheObserver::cacheable(const at::Tensor& source, c10::ScalarType target, c10::DeviceType device) {
  return at::autocast::is_eligible(source, device) && source.scalar_type() != target &&
         target == at::autocast::get_lower_precision_fp_from_device_type(device) &&
         source.scalar_type() == at::kFloat && source.requires_grad() && source.is_leaf() && !source.is_view() &&
         at::autocast::is_autocast_cache_enabled() && !at::caching::is_cached_tensor(source);
}

CastCacheObserver::Observation CastCacheObserver::observe(const at::Tensor& source, const at::Tensor& result) {
  Observation out;
  out.source_version = source._version();
  const c10::TensorImpl* key = source.unsafeGetTensorImpl();
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = entries_.find(key);
  if (found != entries_.end()) {
    Entry& entry = found->second;
    auto same_source = entry.source.lock();
    auto same_cast = entry.cast.lock();
    if (same_source.get() == key && same_cast.get() == result.unsafeGetTensorImpl()) {
      out.cached_version = entry.version_at_cast;
      out.outcome = entry.version_at_cast == out.source_version ? CacheOutcome::kHit : CacheOutcome::kStaleHit;
      return out;
    }
  }
  // A new cast: the cache stored it (or replaced one the region exit cleared).
  out.outcome = CacheOutcome::kMiss;
  out.cached_version = out.source_version;
  entries_.insert_or_assign(key, Entry{WeakImpl(source.getIntrusivePtr()), WeakImpl(result.getIntrusivePtr()),
                                        out.source_version, static_cast<uint64_t>(result.numel()) * result.element_size()});
  return out;
}

CastCacheObserver::Sample CastCacheObserver::sample() {
  Sample out;
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = entries_.begin(); it != entries_.end();) {
    if (it->second.source.expired() || it->second.cast.expired()) {
      it = entries_.erase(it);  // source freed, or the cache let go of the cast
      continue;
    }
    ++out.live_casts;
    out.live_bytes += it->second.cast_bytes;
    ++it;
  }
  return out;
}

void CastCacheObserver::clear() {
  std::lock_guard<std::mutex> lock(mutex_);
  entries_.clear();
}

}  // namespace castscope
