#include "agent/src/observers/op_probe.h"

#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>
#include <c10/core/UndefinedTensorImpl.h>
#include <c10/util/intrusive_ptr.h>
#include <torch/csrc/autograd/engine.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "agent/src/context/autocast_keys.h"
#include "agent/src/context/compile_capture.h"
#include "agent/src/context/op_context.h"
#include "agent/src/context/recording_state.h"
#include "agent/src/record/event_log.h"
#include "agent/src/schedule/window_driver.h"

namespace castscope {

std::atomic<bool> g_probe_window_open{false};

namespace {

using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;

// Per thread and window; past this many tracked tensors the maps start over
// (a missed finding is better than unbounded memory).
constexpr size_t kMaxTracked = size_t{1} << 16;

struct ExplicitCast {
  WeakImpl result;
  c10::ScalarType from;
};

// What one thread knows in the current window (`generation`).
struct ProbeThreadState {
  uint64_t generation = 0;
  int depth = 0;  // RecordFunction nesting: only outermost ops are the user's
  // Lower-precision tensors made under autocast, and what was computed from
  // them alone outside it.
  std::unordered_map<const c10::TensorImpl*, WeakImpl> made_in_region;
  // Results of `.to()` between floating dtypes, with the dtype they came from.
  std::unordered_map<const c10::TensorImpl*, ExplicitCast> explicit_casts;
  // Whether an op has an autocast kernel of its own, per "name.overload" and key.
  std::unordered_map<std::string, bool> has_autocast_kernel;
  // The (line, op, mode, dtypes) signatures already recorded (note_dtypes).
  std::unordered_set<uint64_t> dtypes_seen;

  void sync(uint64_t current) {
    if (generation == current) return;
    generation = current;
    depth = 0;
    forget();
  }
  void forget() {
    made_in_region.clear();
    explicit_casts.clear();
    dtypes_seen.clear();
  }
};
thread_local ProbeThreadState t_state;

WindowDriver g_windows;  // its mutex guards the window state below; held across fork
// A copy per start, never freed: the observer reads it without the lock, and
// an op still in flight after a stop and a new start reads a whole one.
std::atomic<const ProbeConfig*> g_config{nullptr};
bool g_reopen_after_fork = false;
at::CallbackHandle g_handle = 0;
std::atomic<bool>& g_open = g_probe_window_open;
std::atomic<uint64_t> g_generation{1};

bool lower_precision(c10::ScalarType type) { return type == at::kBFloat16 || type == at::kHalf; }

void add_tensors(const c10::IValue& value, std::vector<at::Tensor>& out) {
  if (value.isTensor()) {
    if (value.toTensor().defined()) out.push_back(value.toTensor());
  } else if (value.isTensorList()) {
    for (const at::Tensor& t : value.toTensorList().vec())
      if (t.defined()) out.push_back(t);
  }
}

template <typename Map, typename Value>
void track(Map& map, const at::Tensor& t, Value value) {
  if (map.size() >= kMaxTracked) map.clear();
  map.insert_or_assign(t.unsafeGetTensorImpl(), std::move(value));
}

bool made_in_region(ProbeThreadState& s, const at::Tensor& t) {
  const auto it = s.made_in_region.find(t.unsafeGetTensorImpl());
  return it != s.made_in_region.end() && !it->second.expired();
}

std::string full_name(const c10::OperatorName& name) {
  return name.overload_name.empty() ? name.name : name.name + "." + name.overload_name;
}

bool has_autocast_kernel(ProbeThreadState& s, const c10::OperatorName& name, const AutocastDevice& device) {
  const std::string key = full_name(name) + "@" + device.name;
  const auto it = s.has_autocast_kernel.find(key);
  if (it != s.has_autocast_kernel.end()) return it->second;
  const auto op = c10::Dispatcher::singleton().findOp(name);
  const bool has = op.has_value() && op->hasKernelForDispatchKey(device.key);
  s.has_autocast_kernel.emplace(key, has);
  return has;
}

// Namespaces of PyTorch's own operators: anything else is a custom op.
bool builtin_namespace(const std::string& op) {
  static const char* const kBuiltin[] = {"aten::",      "prim::",         "prims::",    "profiler::",
                                         "quantized::", "_quantized::",   "c10d::",     "_c10d_functional::",
                                         "c10d_functional::", "_c10d_functional_autograd::", "_dtensor::",
                                         "fsdp::",      "symm_mem::",     "inductor::", "mkldnn::",
                                         "mkl::",       "onednn::",       "castscope::"};
  for (const char* prefix : kBuiltin)
    if (op.starts_with(prefix)) return true;
  return false;
}

// Under autocast: whether an op ran at full precision although the user may
// expect autocast to have covered it (an out= or in-place variant of a
// lower-precision op, or a custom op without an autocast kernel).
bool not_covered_by_autocast(ProbeThreadState& s, const c10::OperatorName& name, const AutocastDevice& device) {
  const ProbeConfig* config = g_config.load(std::memory_order_acquire);
  if (config == nullptr || has_autocast_kernel(s, name, device)) return false;
  const std::string& op = name.name;
  const std::string& overload = name.overload_name;
  if (overload == "out" || overload.ends_with("_out")) return config->lower_precision_ops.contains({device.kind, op});
  if (op.ends_with("_") && !op.ends_with("__"))
    return config->lower_precision_ops.contains({device.kind, op.substr(0, op.size() - 1)});
  return !builtin_namespace(op);
}

void emit(const at::RecordFunction& fn, ProbeReason reason, const AutocastDevice& device, const OpContext& context,
          const std::vector<at::Tensor>& inputs, const std::vector<at::Tensor>& outputs) {
  EventLog& log = process_recording_state().events;
  Record r = log.new_record(RecordKind::kOp);
  const auto name = fn.operator_name();
  r.op_id = log.intern_op(name ? full_name(*name) : std::string(fn.name()));
  r.policy = CastPolicy::kUnspecified;
  r.device = device.kind;
  for (const at::Tensor& t : inputs) {
    if (r.op.num_inputs == kMaxOpInputDtypes) break;
    r.op.input_dtypes[r.op.num_inputs++] = to_dtype(t.scalar_type());
  }
  r.op.output = outputs.empty() ? DType::kUnspecified : to_dtype(outputs.front().scalar_type());
  r.op.ok = true;
  describe_op_context(r.op, device.device, context);
  r.op.probe = reason;
  log.record(r);
}

// mode-mismatch compares what a line computed in across eager, scripted and
// traced execution, and ops outside the autocast lists make no cast event: so
// each outermost op's dtypes are recorded once per window, thread, line, op,
// mode and dtypes. The key is a 64-bit hash (the name pointer is the
// overload's own schema string); a collision only skips a record.
void note_dtypes(const at::RecordFunction& fn, ProbeThreadState& s, const AutocastDevice& device,
                 const OpContext& context, const std::vector<at::Tensor>& inputs,
                 const std::vector<at::Tensor>& outputs) {
  // JIT autocast's own casts are the mechanism: their consumers show the result.
  if (std::strncmp(fn.name(), "aten::_autocast_to_", 19) == 0) return;
  uint64_t key = 1469598103934665603ull;
  auto mix = [&key](uint64_t value) { key = (key ^ value) * 1099511628211ull; };
  mix(reinterpret_cast<uintptr_t>(fn.name()));
  mix(context.location);
  mix(static_cast<uint64_t>(context.mode));
  mix(at::autocast::is_autocast_enabled(device.device) ? 1 : 0);
  for (const at::Tensor& t : inputs) mix(static_cast<uint64_t>(t.scalar_type()) + 1);
  mix(0xff);
  for (const at::Tensor& t : outputs) mix(static_cast<uint64_t>(t.scalar_type()) + 1);
  if (s.dtypes_seen.size() >= kMaxTracked) s.dtypes_seen.clear();
  if (s.dtypes_seen.insert(key).second) emit(fn, ProbeReason::kDtypes, device, context, inputs, outputs);
}

// The outermost op's tensor inputs, taken when it starts: the dispatcher
// destroys the boxed inputs once the start callbacks have run.
struct Inputs final : at::ObserverContext {
  std::vector<at::Tensor> tensors;
};

void inspect(const at::RecordFunction& fn, ProbeThreadState& s, const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> outputs;
  for (const c10::IValue& value : fn.outputs()) add_tensors(value, outputs);
  const at::Tensor* floating = nullptr;
  for (const at::Tensor& t : inputs) {
    if (t.is_floating_point()) {
      floating = &t;
      break;
    }
  }
  if (floating == nullptr) return;
  const AutocastDevice* device = nullptr;
  for (const auto& d : kAutocastDevices)
    if (d.device == floating->device().type()) device = &d;
  if (device == nullptr) return;
  const OpContext context = current_op_context(process_recording_state().locations);
  note_dtypes(fn, s, *device, context, inputs, outputs);

  if (std::strcmp(fn.name(), "aten::to") == 0 || std::strcmp(fn.name(), "aten::_to_copy") == 0) {
    const c10::ScalarType from = floating->scalar_type();
    for (const at::Tensor& out : outputs)
      if (out.is_floating_point() && out.scalar_type() != from) track(s.explicit_casts, out, ExplicitCast{WeakImpl(out.getIntrusivePtr()), from});
  }

  if (at::autocast::is_autocast_enabled(device->device)) {
    for (const at::Tensor& out : outputs)
      if (lower_precision(out.scalar_type())) track(s.made_in_region, out, WeakImpl(out.getIntrusivePtr()));
    bool fp32_input = false;
    for (const at::Tensor& t : inputs)
      fp32_input |= t.scalar_type() == at::kFloat && at::autocast::is_eligible(t, device->device);
    const auto name = fn.operator_name();
    if (fp32_input && name && not_covered_by_autocast(s, *name, *device))
      emit(fn, ProbeReason::kFullPrecisionUnderAutocast, *device, context, inputs, outputs);
    return;
  }

  bool from_region = false, meets_fp32 = false;
  for (const at::Tensor& t : inputs) {
    if (lower_precision(t.scalar_type()) && made_in_region(s, t)) from_region = true;
    // A 0-dim fp32 tensor does not promote a lower-precision one.
    if (t.scalar_type() == at::kFloat && t.dim() > 0) meets_fp32 = true;
  }
  if (!from_region) return;
  if (meets_fp32) {
    emit(fn, ProbeReason::kLowPrecisionMeetsFp32, *device, context, inputs, outputs);
    return;
  }
  for (const at::Tensor& out : outputs)  // still the region's data (a view, a sum)
    if (lower_precision(out.scalar_type())) track(s.made_in_region, out, WeakImpl(out.getIntrusivePtr()));
}

// A FUNCTION-scope record with no operator behind it: torch.compile's
// "Torch-Compiled Region: 0/0" around every run of a compiled frame. It is
// no op: the ops it wraps are still the outermost ones.
bool is_annotation(const at::RecordFunction& fn) { return std::strstr(fn.name(), "::") == nullptr; }

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  if (is_annotation(fn)) return nullptr;
  ProbeThreadState& s = t_state;
  s.sync(g_generation.load(std::memory_order_relaxed));
  if (++s.depth != 1 || !g_open.load(std::memory_order_relaxed) || !g_record_events.load(std::memory_order_relaxed) ||
      inside_autocast_kernel())
    return nullptr;
  // The autograd engine's own dtype handling (saved lower-precision tensors
  // meeting fp32 gradients) is not the user's.
  if (torch::autograd::get_current_graph_task_id() != -1) return nullptr;
  // torch.compile tracing runs fake tensors through torch's own code: what a
  // compiled line computes in is its graph's business (compile_capture.h).
  if (compile_tracing_now()) return nullptr;
  try {
    auto inputs = std::make_unique<Inputs>();
    for (const c10::IValue& value : fn.inputs()) add_tensors(value, inputs->tensors);
    return inputs;
  } catch (...) {
    process_recording_state().events.count_internal_error();
    return nullptr;
  }
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* context) {
  if (is_annotation(fn)) return;
  ProbeThreadState& s = t_state;
  s.depth = s.depth > 0 ? s.depth - 1 : 0;
  // RecordFunction keeps its own copy of the callbacks: an op in flight ends
  // here after a window closed or the agent stopped.
  if (context == nullptr || !g_open.load(std::memory_order_relaxed) ||
      !g_record_events.load(std::memory_order_relaxed))
    return;
  try {
    inspect(fn, s, static_cast<Inputs*>(context)->tensors);
  } catch (...) {
    process_recording_state().events.count_internal_error();
  }
}

at::RecordFunctionCallback observer() {
  return at::RecordFunctionCallback(&on_start, &on_end).needsInputs(true).needsOutputs(true).scopes(
      {at::RecordScope::FUNCTION});
}

void open_locked() {
  if (g_handle == 0) g_handle = at::addGlobalCallback(observer());
  g_generation.fetch_add(1, std::memory_order_relaxed);
  g_open.store(true, std::memory_order_relaxed);
}

void close_locked() {
  if (g_handle != 0) {
    at::removeCallback(g_handle);
    g_handle = 0;
  }
  g_open.store(false, std::memory_order_relaxed);
}

void apply_locked(WindowSchedule::Change change) {
  if (change == WindowSchedule::Change::kOpen) open_locked();
  if (change != WindowSchedule::Change::kClose) return;
  close_locked();
  // At a step, this is the training thread, which holds most weak
  // references: let them go now. Other threads (and the exporter, closing
  // a window on its tick) let theirs go when the next window reaches them.
  t_state.forget();
}

}  // namespace

void probe_start(const ProbeConfig& config) {
  g_windows.start(
      config.schedule, config.enabled,
      [&] { g_config.store(new ProbeConfig(config), std::memory_order_release); },  // leaked on purpose (see above)
      apply_locked);
}

void probe_stop() { g_windows.stop(close_locked); }

void probe_on_iteration(uint64_t iteration) { g_windows.step(iteration, /*hold_open=*/false, apply_locked); }

void probe_on_tick() { g_windows.tick(/*hold_open=*/false, apply_locked); }

bool probe_is_round_trip_in_window(const at::Tensor& source, c10::ScalarType target) {
  if (!g_open.load(std::memory_order_relaxed)) return false;  // closed since the caller asked
  ProbeThreadState& s = t_state;
  s.sync(g_generation.load(std::memory_order_relaxed));
  const auto it = s.explicit_casts.find(source.unsafeGetTensorImpl());
  return it != s.explicit_casts.end() && !it->second.result.expired() && it->second.from == target;
}

// A forked child (a DataLoader worker) records nothing and has no exporter
// to close windows, so it must not inherit the observer; but removing it in
// the child could block forever on a c10 lock another parent thread held at
// the fork. So the parent removes it before forking and adds it back after.
void probe_before_fork() {
  g_windows.mutex().lock();
  g_reopen_after_fork = g_handle != 0;
  if (g_handle != 0) {
    at::removeCallback(g_handle);
    g_handle = 0;
  }
}
void probe_after_fork_in_parent() {
  if (g_reopen_after_fork) g_handle = at::addGlobalCallback(observer());
  g_windows.mutex().unlock();
}
void probe_after_fork_in_child() {
  g_windows.forget_in_child();
  g_open.store(false, std::memory_order_relaxed);
  g_windows.mutex().unlock();
}

}  // namespace castscope
