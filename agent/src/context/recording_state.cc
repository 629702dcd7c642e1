#include "agent/src/context/recording_state.h"

namespace castscope {

RecordingState& process_recording_state() {
  static RecordingState* runtime = new RecordingState();
  return *runtime;
}

Record cache_sample_record(RecordingState& runtime, SampleTrigger trigger) {
  const CastCacheWatch::Sample seen = runtime.cast_cache.sample();
  Record r = runtime.events.new_record(RecordKind::kCacheSample);
  r.sample = {.iteration = runtime.steps.load(std::memory_order_relaxed), .live_casts = seen.live_casts,
              .live_bytes = seen.live_bytes, .orphaned_casts = seen.orphaned_casts,
              .orphaned_bytes = seen.orphaned_bytes, .cache_hits = seen.cache_hits,
              .released_casts = seen.released_casts, .trigger = trigger};
  return r;
}

}  // namespace castscope
