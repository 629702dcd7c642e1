#include "agent/src/dispatch/callable_overlay_casts.h"

#include <algorithm>

#include "agent/src/dispatch/dispatch.h"

namespace castscope {

void record_callable_overlay_cast(Runtime& runtime, const CallableOverlayCast& cast) noexcept {
  if (!g_record_events.load(std::memory_order_relaxed)) return;
  EventLog& log = runtime.events;
  try {
    // Not cacheable: Tensor.to() keeps no cast cache.
    Record r = new_cast_record(log, cast.op_id, log.thread_id(), cast.policy, cast.device,
                               current_op_context(runtime.locations));
    r.cast.src = cast.src;
    r.cast.dst = cast.dst;
    r.cast.outcome = cast.outcome;
    r.cast.role = cast.role;
    r.cast.arg_index = cast.arg_index;
    r.cast.list_index = cast.list_index;
    r.cast.ndim = static_cast<uint8_t>(std::min<size_t>(cast.shape.size(), 255));
    for (size_t d = 0; d < cast.shape.size() && d < static_cast<size_t>(kMaxShapeDims); ++d) r.cast.shape[d] = cast.shape[d];
    r.cast.bytes = cast.bytes;
    log.record(r);
  } catch (...) {
    log.count_internal_error();
  }
}

}  // namespace castscope
