// Watches the native autocast cast cache without changing it.
//
// at::autocast::cached_cast keeps the process-global cache; castscope keeps,
// beside it, only weak references: source TensorImpl -> (the cast it saw
// returned, the source's version when that cast was made). Seeing the same
// cast returned again is a hit; a hit whose source version moved since is a
// stale hit (the forward pass uses an old copy of the weight). Weak
// references never keep a tensor's storage alive.
//
// Concurrency: one mutex around the map; taken once per cacheable cast and
// by sample(). Cacheable casts are the weight casts, a small share of all.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/UndefinedTensorImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "agent/src/record/cast_record.h"

namespace castscope {

class CastCacheObserver {
 public:
  struct Observation {
    CacheOutcome outcome = CacheOutcome::kNotCacheable;
    int64_t source_version = 0;
    int64_t cached_version = 0;
  };
  struct Sample {
    uint64_t live_casts = 0;
    uint64_t live_bytes = 0;
  };

  // The condition under which at::autocast::cached_cast consults its cache.
  static bool cacheable(const at::Tensor& source, c10::ScalarType target, c10::DeviceType device);

  // After cached_cast returned `result` for a cacheable `source`.
  Observation observe(const at::Tensor& source, const at::Tensor& result);

  // Live casts castscope has seen the cache hold; prunes dead entries.
  Sample sample();
  void clear();

 private:
  using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  struct Entry {
    WeakImpl source;
    WeakImpl cast;
    int64_t version_at_cast;
    uint64_t cast_bytes;
  };
  std::mutex mutex_;
  std::unordered_map<const c10::TensorImpl*, Entry> entries_;
};

}  // namespace castscope
