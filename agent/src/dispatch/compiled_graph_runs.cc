#include "agent/src/dispatch/compiled_graph_runs.h"

#include <utility>

#include "agent/src/context/autocast_keys.h"
#include "agent/src/dispatch/dispatch.h"

namespace castscope {

uint32_t CompiledGraphs::add(CompiledGraph graph) {
  std::lock_guard<std::mutex> lock(mutex_);
  graphs_.push_back(std::move(graph));
  return static_cast<uint32_t>(graphs_.size());
}

const CompiledGraph* CompiledGraphs::find(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  return id >= 1 && id <= graphs_.size() ? &graphs_[id - 1] : nullptr;
}

namespace {

// The c10 device of an autocast device (CPU where it is none of them).
c10::DeviceType torch_device(DeviceKind kind) {
  const AutocastDevice* device = find_autocast_device(kind);
  return device != nullptr ? device->device : c10::DeviceType::CPU;
}

}  // namespace

uint32_t record_compiled_graph_run(RecordingState& runtime, const CompiledGraph& graph, uint32_t calling_location) noexcept {
  if (!g_record_events.load(std::memory_order_relaxed)) return calling_location;
  EventLog& log = runtime.events;
  try {
    OpContext context;
    context.mode = ExecutionMode::kCompiled;
    context.phase = graph.phase;
    context.location = calling_location;
    if (LocationReader reader = g_python_location_reader.load(std::memory_order_acquire); context.location == 0 && reader)
      context.location = reader();
    // A graph without casts names no device: the run's op says none (the
    // report then reads autocast as on when any device has it on).
    const DeviceKind device = graph.casts.empty() ? DeviceKind::kUnspecified : graph.casts.front().cast.device;
    Record op = log.new_record(RecordKind::kOp);
    op.op_id = graph.op_id;
    op.device = device;
    describe_op_context(op.op, torch_device(device), context);
    op.op.ok = true;
    log.record(op);
    for (const CompiledCast& compiled : graph.casts) {
      OpContext at = context;
      at.phase = compiled.phase;
      if (compiled.location != 0) at.location = compiled.location;
      Record r = described_cast_record(log, op.thread, compiled.cast, at);
      r.cast.op_seq = op.seq;
      log.record(r);
    }
    return context.location;
  } catch (...) {
    log.count_internal_error();
    return calling_location;
  }
}

}  // namespace castscope
