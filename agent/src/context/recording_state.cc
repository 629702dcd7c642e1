#include "agent/src/context/recording_state.h"

namespace castscope {

RecordingState& process_recording_state() {
  static RecordingState* runtime = new RecordingState();
  return *runtime;
}

Record cache_sample_record(RecordingState& runtime, SampleTrigger trigger) {
  const auto sample = runtime.cast_cache.sample();
  Record r = runtime.events.new_record(RecordKind::kCacheSample);
  r.sample.trigger = trigger;
  r.sample.iteration = runtime.steps.load(std::memory_order_relaxed);
  r.sample.live_casts = sample.live_casts;
  r.sample.live_bytes = sample.live_bytes;
  r.sample.orphaned_casts = sample.orphaned_casts;
  r.sample.orphaned_bytes = sample.orphaned_bytes;
  r.sample.cache_hits = sample.cache_hits;
  r.sample.released_casts = sample.released_casts;
  return r;
}

}  // namespace castscope
