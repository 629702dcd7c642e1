#include "agent/src/context/runtime.h"

namespace castscope {

Runtime& process_runtime() {
  static Runtime* runtime = new Runtime();
  return *runtime;
}

Record cache_sample_record(Runtime& runtime, SampleTrigger trigger) {
  const CastCacheObserver::Sample seen = runtime.cast_cache.sample();
  Record r = runtime.events.new_record(RecordKind::kCacheSample);
  r.sample = {.iteration = runtime.steps.load(std::memory_order_relaxed), .live_casts = seen.live_casts,
              .live_bytes = seen.live_bytes, .orphaned_casts = seen.orphaned_casts,
              .orphaned_bytes = seen.orphaned_bytes, .cache_hits = seen.cache_hits,
              .released_casts = seen.released_casts, .trigger = trigger};
  return r;
}

}  // namespace castscope
