#include "agent/src/dispatch/callable_overlay_casts.h"

#include "agent/src/dispatch/dispatch.h"

namespace castscope {

void record_callable_overlay_cast(RecordingState& runtime, const CastDescription& cast) noexcept {
  if (!g_record_events.load(std::memory_order_relaxed)) return;
  EventLog& log = runtime.events;
  try {
    log.record(described_cast_record(log, log.thread_id(), cast, current_op_context(runtime.locations)));
  } catch (...) {
    log.count_internal_error();
  }
}

}  // namespace castscope
