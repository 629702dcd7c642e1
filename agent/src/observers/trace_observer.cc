#include "agent/src/observers/trace_observer.h"

#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>

#include "agent/src/context/op_context.h"
#include "agent/src/context/recording_state.h"
#include "agent/src/record/event_log.h"

namespace castscope {
namespace {

thread_local at::CallbackHandle t_handle = 0;

bool any_autocast_enabled() {
  for (const auto device : {at::kCPU, at::kCUDA, at::kXPU, at::kMPS})
    if (at::autocast::is_autocast_enabled(device)) return true;
  return false;
}

std::unique_ptr<at::ObserverContext> on_op(const at::RecordFunction& fn) {
  try {
    if (fn.scope() != at::RecordScope::FUNCTION || !g_record_events.load(std::memory_order_relaxed) ||
        inside_autocast_kernel() || any_autocast_enabled())
      return nullptr;
    EventLog& log = process_recording_state().events;
    Record r = log.new_record(RecordKind::kOp);
    r.op_id = log.intern_op(fn.name());
    r.policy = CastPolicy::kUnspecified;
    r.device = DeviceKind::kUnspecified;
    r.op.ok = true;
    r.op.mode = ExecutionMode::kTraceRecording;
    r.op.phase = Phase::kForward;
    r.op.autocast_enabled = 0;  // the point of the record
    if (LocationReader reader = g_python_location_reader.load(std::memory_order_acquire)) r.op.location = reader();
    log.record(r);
  } catch (...) {
    process_recording_state().events.count_internal_error();
  }
  return nullptr;
}

}  // namespace

void begin_trace_recording() {
  if (this_thread_block().trace_recording_depth++ == 0)
    t_handle = at::addThreadLocalCallback(at::RecordFunctionCallback(&on_op));
}

void end_trace_recording() {
  int& depth = this_thread_block().trace_recording_depth;
  if (depth == 0) return;
  if (--depth == 0 && t_handle != 0) {
    at::removeCallback(t_handle);
    t_handle = 0;
  }
}

}  // namespace castscope
