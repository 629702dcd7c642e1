#include "agent/src/context/op_context.h"

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/graph_task.h>
#if __has_include(<torch/csrc/autograd/node.h>)
#include <torch/csrc/autograd/node.h>
#else  // torch before 2.12 declares Node in function.h
#include <torch/csrc/autograd/function.h>
#endif
#include <torch/csrc/jit/frontend/tracer.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <array>
#include <iterator>
#include <map>
#include <mutex>
#include <string>
#include <tuple>

#include "agent/src/context/autocast_keys.h"
#include "agent/src/context/compile_capture.h"
#include "agent/src/context/jit_context.h"
#include "agent/src/record/module_scopes.h"

namespace castscope {

std::atomic<bool> g_record_events{true};
std::atomic<LocationReader> g_python_location_reader{nullptr};
std::atomic<LocationReader> g_tracing_location_reader{nullptr};
std::atomic<LocationReader> g_backward_caller_reader{nullptr};
std::atomic<ThreadLocationReader> g_python_thread_location_reader{nullptr};

namespace {

// A scripted line run while torch.jit.trace records, with the traced Python
// line that called into TorchScript as the second frame of its stack: that
// call is where the user combined the two (script-under-trace names both).
// Rare (only while a trace records), so one mutex-guarded map suffices.
uint32_t with_calling_line(uint32_t scripted, uint32_t python, LocationTable& locations) {
  static std::mutex mutex;
  static std::map<std::tuple<const LocationTable*, uint32_t, uint32_t>, uint32_t> combined;
  std::lock_guard<std::mutex> lock(mutex);
  const auto key = std::make_tuple(&locations, scripted, python);
  if (auto found = combined.find(key); found != combined.end()) return found->second;
  auto frame = [](const Location& l) { return l.file + ":" + std::to_string(l.line) + " " + l.function; };
  Location location = locations.get(scripted);
  const Location caller = locations.get(python);
  location.stack = frame(location) + "\n" + frame(caller);
  const uint32_t id = locations.intern(location);
  combined.emplace(key, id);
  return id;
}

}  // namespace

OpContext current_op_context(LocationTable& locations) {
  return current_op_context(locations, thread_dispatch_keys(), this_thread_block());
}

namespace {

// The calling thread's innermost user Python line (0: none, or no reader).
uint32_t python_location(ThreadBlock& thread) {
  if (ThreadLocationReader reader = g_python_thread_location_reader.load(std::memory_order_acquire))
    return reader(&thread.python_frames);
  if (LocationReader fallback = g_python_location_reader.load(std::memory_order_acquire)) return fallback();
  return 0;
}

// A backward's op with no user frame on its thread (autograd's device
// threads): the line that called backward, asked once per graph task and
// thread. Out of line: backwards on the calling thread never come here.
[[gnu::noinline]] uint32_t backward_caller_location(ThreadBlock& thread, int64_t graph_task) {
  if (thread.backward_graph_task != graph_task) {
    LocationReader reader = g_backward_caller_reader.load(std::memory_order_acquire);
    thread.backward_caller = reader != nullptr ? reader() : 0;
    thread.backward_graph_task = graph_task;
  }
  return thread.backward_caller;
}

// In a backward outside any module call (module hooks run in the forward):
// the module the running node's forward op was made in, by its sequence
// number (ModuleScopes::module_at), remembered for the node.
[[gnu::noinline]] uint32_t backward_module(ThreadBlock& thread) {
  const auto node = torch::autograd::get_current_node();  // intrusive_ptr in 2.14, shared_ptr before
  if (!node) return 0;
  const uint64_t seq = node->sequence_nr();
  if (node.get() != thread.module_node || seq != thread.module_node_seq) {
    thread.module_node = node.get();
    thread.module_node_seq = seq;
    thread.module_of_node = module_scopes().module_at(node->thread_id(), seq);
  }
  return thread.module_of_node;
}

// The context's module (OpContext::module): the thread's innermost module
// call, else in a backward its node's forward module.
inline void add_module(OpContext& context, ThreadBlock& thread, int64_t graph_task) {
  context.module = thread.module;
  if (context.module == 0 && graph_task != -1) [[unlikely]] context.module = backward_module(thread);
}

// current_op_context where a dispatch mode, the JIT tracer or TorchScript
// may be on. Out of line: the common op's path saves no registers for it.
[[gnu::noinline]] OpContext op_context_beyond_eager(LocationTable& locations, const c10::impl::LocalDispatchKeySet& keys,
                                                    ThreadBlock& thread, Phase phase) {
  OpContext context;
  context.phase = phase;
  // torch.compile tracing: the line is the FX node's, not a frame on the stack.
  if (compile_tracing_now(keys)) [[unlikely]] {
    context.mode = ExecutionMode::kCompiling;
    if (LocationReader tracing = g_tracing_location_reader.load(std::memory_order_acquire)) context.location = tracing();
    if (context.location == 0) context.location = python_location(thread);
    return context;
  }
  // setTracingState includes the Tracer key exactly while a state is set.
  if (keys.included_.has(c10::DispatchKey::Tracer) && torch::jit::tracer::isTracing()) [[unlikely]]
    context.mode = ExecutionMode::kTraceRecording;
  JitContext jit;
  if (context.mode == ExecutionMode::kEager && current_jit_context(locations, jit)) {
    context.mode = jit.mode;
    context.location = jit.location;
    // The tracer pauses inside scripted calls: only the bracket knows.
    if (jit.mode == ExecutionMode::kScript && trace_recording_on_this_thread()) {
      context.mode = ExecutionMode::kScriptWhileTracing;
      const uint32_t python = python_location(thread);
      if (jit.has_source && python != 0) context.location = with_calling_line(jit.location, python, locations);
    }
    if (jit.has_source) return context;
    // JIT-inserted ops (autocast casts inside differentiable graphs) carry no
    // range: the Python line that called into TorchScript is the best we have.
  }
  if (const uint32_t python = python_location(thread); python != 0 || context.location == 0) context.location = python;
  return context;
}

}  // namespace

OpContext current_op_context(LocationTable& locations, const c10::impl::LocalDispatchKeySet& keys,
                             ThreadBlock& thread) {
  const int64_t graph_task = torch::autograd::get_current_graph_task_id();
  const Phase phase = graph_task != -1 ? Phase::kBackward : Phase::kForward;
  // The common op: eager. A dispatch mode (torch.compile's fake tensors
  // among them) and the JIT tracer include their keys while on
  // (compile_tracing_now, op_context.h); TorchScript's interpreter sets its
  // thread's state (a bool asked, ~20 instructions less than building its
  // empty call stack).
  const bool eager = !keys.included_.has(c10::DispatchKey::Python) && !keys.included_.has(c10::DispatchKey::Tracer) &&
                     !torch::jit::in_torchscript_runtime();
  OpContext context = eager ? OpContext{ExecutionMode::kEager, phase, python_location(thread)}
                            : op_context_beyond_eager(locations, keys, thread, phase);
  if (context.location == 0 && graph_task != -1) [[unlikely]]
    context.location = backward_caller_location(thread, graph_task);
  add_module(context, thread, graph_task);
  return context;
}

void describe_op_context(OpFields& op, c10::DeviceType device, const OpContext& context) {
  describe_op_context(op, at::autocast::get_lower_precision_fp_from_device_type(device), context,
                      thread_dispatch_keys(), this_thread_block());
}

namespace {

// What at::autocast::is_autocast_enabled reads per device (its key not
// excluded), for all of them from the one read of the thread's keys; each
// key's set made at compile time (has() works a functionality key's bit out per call).
uint8_t autocast_enabled_devices(c10::DispatchKeySet excluded) {
  static constexpr auto kDeviceKeys = [] {
    std::array<c10::DispatchKeySet, std::size(kAutocastDevices)> sets;
    for (size_t i = 0; i < sets.size(); ++i) sets[i] = c10::DispatchKeySet(kAutocastDevices[i].key);
    return sets;
  }();
  uint8_t enabled = 0;
  for (size_t i = 0; i < kDeviceKeys.size(); ++i)
    if (!excluded.has_any(kDeviceKeys[i])) enabled |= static_cast<uint8_t>(1u << static_cast<int>(kAutocastDevices[i].kind));
  return enabled;
}

}  // namespace

void describe_op_context(OpFields& op, c10::ScalarType region_dtype, const OpContext& context,
                         const c10::impl::LocalDispatchKeySet& keys, ThreadBlock& thread) {
  op.autocast_dtype = to_dtype(region_dtype);
  op.mode = context.mode;
  op.phase = context.phase;
  op.location = context.location;
  // A thread's excluded keys rarely change between its ops: the last answer
  // is kept with the keys it came from (~15 instructions an op less than
  // testing every device's key).
  const uint64_t excluded = keys.excluded_.raw_repr();
  if (excluded != thread.autocast_excluded_seen) [[unlikely]] {
    thread.autocast_enabled_seen = autocast_enabled_devices(keys.excluded_);
    thread.autocast_excluded_seen = excluded;
  }
  op.autocast_enabled |= thread.autocast_enabled_seen;
}

}  // namespace castscope
