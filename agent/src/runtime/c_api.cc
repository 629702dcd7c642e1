// The C API (agent/include/castscope/agent.h): what Python (ctypes), the
// preload shim and C++ programs call. Each entry point catches everything:
// no exception leaves it, and a failure is counted or reported, never raised
// into the job.
#include "castscope/agent.h"

#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <c10/util/Exception.h>
#include <torch/version.h>

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>
#include <nlohmann/json.hpp>

#include "agent/src/config/agent_config.h"
#include "agent/src/context/jit_cast_lines.h"
#include "agent/src/context/jit_context.h"
#include "agent/src/context/recording_state.h"
#include "agent/src/record/thread_block.h"
#include "agent/src/dispatch/callable_overlay_casts.h"
#include "agent/src/dispatch/compile_record_replay.h"
#include "agent/src/dispatch/compiled_graph_json.h"
#include "agent/src/dispatch/compiled_graph_runs.h"
#include "agent/src/dispatch/dispatch.h"
#include "agent/src/dispatch/float8_scaling.h"
#include "agent/src/dispatch/policy_check.h"
#include "agent/src/numerics/numerics_windows.h"
#include "agent/src/observers/trace_observer.h"
#include "agent/src/policy/callables_json.h"
#include "agent/src/policy/policy.h"
#include "agent/src/record/event_log.h"
#include "agent/src/record/location_table.h"
#include "agent/src/record/module_scopes.h"
#include "agent/src/record/user_code.h"
#include "agent/src/runtime/copy_out.h"
#include "agent/src/runtime/own_arena_thread.h"
#include "agent/src/runtime/agent.h"
#include "common/log/log.h"

using castscope::Agent;

extern "C" {

int castscope_agent_start(const char* config_json, char* err, size_t err_len) {
  std::string error;
  int rc = 1;
  try {
    // Its allocations out of the job's arenas (own_arena_thread.h); c10's
    // warnings still go to the caller's handler (it is per thread).
    c10::WarningHandler* const callers_warnings = c10::WarningUtils::get_warning_handler();
    rc = castscope::OwnArenaThread::process().run([&] {
      const c10::WarningUtils::WarningHandlerGuard warnings(callers_warnings);
      return Agent::instance().start(config_json, error);
    });
  } catch (const std::exception& e) {
    error = std::string("castscope: internal error while starting: ") + e.what();
  } catch (...) {
    error = "castscope: internal error while starting";
  }
  if (rc != 0) {
    castscope::log::error(error);
    castscope::copy_out(error, err, err_len);
  }
  return rc;
}

int castscope_agent_stop(void) {
  try {
    return Agent::instance().stop();
  } catch (...) {
    return 2;
  }
}

long castscope_agent_flush(void) {
  try {
    return Agent::instance().flush();
  } catch (...) {
    return -1;
  }
}

size_t castscope_agent_status(char* buf, size_t len) {
  try {
    return castscope::copy_out(Agent::instance().status(), buf, len);
  } catch (...) {
    return castscope::copy_out("{\"error\": \"status failed\"}", buf, len);
  }
}

void castscope_agent_mark_iteration(void) {
  try {
    Agent::instance().mark_iteration();
  } catch (...) {
    castscope::process_recording_state().events.count_internal_error();
  }
}

void castscope_agent_scaler_update(double scale, int found_inf, unsigned long long updates) {
  if (!Agent::instance().attached()) return;
  castscope::numerics_on_scaler_update(scale, found_inf != 0, updates);  // noexcept
}

void castscope_agent_cuda_graph_capture(int begin) { castscope::numerics_cuda_graph_capture(begin != 0); }

void castscope_agent_set_location_reader(unsigned (*reader)(void)) {
  castscope::g_python_location_reader.store(reader, std::memory_order_release);
}

void castscope_agent_set_thread_location_reader(unsigned (*reader)(void** thread_state)) {
  castscope::g_python_thread_location_reader.store(reader, std::memory_order_release);
}

void castscope_agent_set_tracing_location_reader(unsigned (*reader)(void)) {
  castscope::g_tracing_location_reader.store(reader, std::memory_order_release);
}

void castscope_agent_set_backward_caller_reader(unsigned (*reader)(void)) {
  castscope::g_backward_caller_reader.store(reader, std::memory_order_release);
}

namespace {
// The process's compiled graphs (never removed: runs may come until exit).
castscope::CompiledGraphs& compiled_graphs() {
  static auto* graphs = new castscope::CompiledGraphs();
  return *graphs;
}
}  // namespace

void castscope_compile_epoch(void) {
  try {
    castscope::process_recording_state().compile.new_epoch();
  } catch (...) {
    castscope::process_recording_state().events.count_internal_error();
  }
}

namespace {
// castscope_compile_decisions's and castscope_compile_records's texts, each
// taken once: a caller growing its buffer gets the same text again. A new
// collection forgets what was not picked up.
thread_local std::string t_pending_decisions;
thread_local std::string t_pending_records;

// `pending` (made by `make` when empty) copied into buf; forgotten once it fit.
size_t copy_out_once(std::string& pending, char* buf, size_t len, std::string (*make)(castscope::RecordingState&)) {
  auto& runtime = castscope::process_recording_state();
  try {
    if (pending.empty()) pending = make(runtime);
    const size_t needed = castscope::copy_out(pending, buf, len);
    if (needed < len) pending.clear();
    return needed;
  } catch (...) {
    runtime.events.count_internal_error();
    return castscope::copy_out("[]", buf, len);
  }
}
}  // namespace

void castscope_compile_collect(int on) {
  if (on != 0) {
    t_pending_decisions.clear();
    t_pending_records.clear();
  }
  castscope::CompileCapture::set_collecting(on != 0);
}

void castscope_internal_error(const char* what) {
  try {
    castscope::log::warn(what != nullptr ? what : "internal error");
  } catch (...) {
  }
  castscope::process_recording_state().events.count_internal_error();
}

size_t castscope_compile_decisions(char* buf, size_t len) {
  return copy_out_once(t_pending_decisions, buf, len, [](castscope::RecordingState& runtime) {
    return castscope::compile_decisions_json(runtime.compile.take(), runtime.events, runtime.locations);
  });
}

size_t castscope_compile_records(char* buf, size_t len) {
  return copy_out_once(t_pending_records, buf, len, [](castscope::RecordingState& runtime) {
    return castscope::compile_records_json(runtime.compile.take_logged(), runtime.events, runtime.locations);
  });
}

int castscope_compile_replay(const char* json) {
  auto& runtime = castscope::process_recording_state();
  if (!castscope::g_record_events.load(std::memory_order_relaxed)) return 0;
  try {
    std::string error;
    const int logged = castscope::replay_compile_records(json != nullptr ? json : "", runtime, error);
    if (logged < 0) {
      castscope::log::warn(error);
      runtime.events.count_internal_error();
    }
    return logged;
  } catch (...) {
    runtime.events.count_internal_error();
    return -1;
  }
}

unsigned castscope_compiled_graph(const char* json) {
  auto& runtime = castscope::process_recording_state();
  try {
    std::string error;
    auto graph = castscope::parse_compiled_graph(json != nullptr ? json : "", runtime.events, runtime.locations, error);
    if (!graph) {
      castscope::log::warn(error);
      runtime.events.count_internal_error();
      return 0;
    }
    return compiled_graphs().add(std::move(*graph));
  } catch (...) {
    runtime.events.count_internal_error();
    return 0;
  }
}

void castscope_own_conversion(int on) { castscope::this_thread_block().making_conversion = on != 0; }

namespace {
// The calling thread's float8 brackets, innermost last; deeper ones than
// kDepth are counted but not described (none is known to nest at all).
constexpr size_t kFloat8Depth = 4;
thread_local std::array<castscope::Float8Scope, kFloat8Depth> t_float8_scopes;
thread_local size_t t_float8_depth = 0;

void point_at_innermost_float8_scope() {
  castscope::this_thread_block().float8 =
      t_float8_depth == 0 || t_float8_depth > kFloat8Depth ? nullptr : &t_float8_scopes[t_float8_depth - 1];
}
}  // namespace

void castscope_float8_conversion_begin(int role, const float* scale, unsigned long long scale_numel) {
  if (t_float8_depth < kFloat8Depth) {
    const bool known = role >= 0 && role <= static_cast<int>(castscope::v1::enums::Role_MAX);
    t_float8_scopes[t_float8_depth] = {known ? static_cast<castscope::Role>(role) : castscope::Role::kUnspecified,
                                       scale, scale != nullptr ? scale_numel : 0};
  }
  ++t_float8_depth;
  point_at_innermost_float8_scope();
}

void castscope_float8_relabelled(void) { castscope::this_thread_block().float8_relabelled = true; }

unsigned castscope_module_declare(const char* qualified_name) {
  if (qualified_name == nullptr) return 0;
  try {
    return castscope::module_scopes().declare_module(qualified_name);
  } catch (...) {
    return 0;
  }
}

unsigned castscope_parameter_declare(unsigned module, const char* name, const void* tensor_impl) {
  if (name == nullptr) return 0;
  try {
    return castscope::module_scopes().declare_parameter(module, name, tensor_impl);
  } catch (...) {
    return 0;
  }
}

namespace {
// The thread's innermost module after a push or pop, and where the
// forward's autograd nodes are made from now on (ModuleScopes::transition).
void modules_changed(castscope::ThreadBlock& thread) {
  const int known = std::min(thread.module_depth, castscope::ThreadBlock::kModuleDepth);
  thread.module = known > 0 ? thread.modules[known - 1] : 0;
  try {
    castscope::module_scopes().transition(at::RecordFunction::currentThreadId(), at::sequence_number::peek(),
                                          thread.module);
  } catch (...) {
  }
}
}  // namespace

void castscope_module_enter(unsigned module) {
  castscope::ThreadBlock& thread = castscope::this_thread_block();
  if (thread.module_depth < castscope::ThreadBlock::kModuleDepth) thread.modules[thread.module_depth] = module;
  ++thread.module_depth;
  modules_changed(thread);
}

void castscope_module_reset(void) {
  castscope::ThreadBlock& thread = castscope::this_thread_block();
  thread.module_depth = 0;
  thread.module = 0;
}

void castscope_module_exit(void) {
  castscope::ThreadBlock& thread = castscope::this_thread_block();
  if (thread.module_depth == 0) return;
  --thread.module_depth;
  modules_changed(thread);
}

void castscope_float8_conversion_end(void) {
  if (t_float8_depth > 0) --t_float8_depth;
  point_at_innermost_float8_scope();
}

void castscope_compiled_graph_running(int on) {
  // Set, not counted: graphs do not nest, and a backward that raised between
  // its two hooks is put right by the next run's bracket on this thread.
  castscope::this_thread_block().compiled_graph_depth = on != 0 ? 1 : 0;
}

unsigned castscope_compiled_graph_ran(unsigned graph, unsigned calling_location) {
  auto& runtime = castscope::process_recording_state();
  const castscope::CompiledGraph* found = compiled_graphs().find(graph);
  if (found == nullptr) {
    runtime.events.count_internal_error();
    return calling_location;
  }
  return castscope::record_compiled_graph_run(runtime, *found, calling_location);
}

static_assert(CASTSCOPE_SOURCE_USER == static_cast<int>(castscope::SourceKind::kUser) &&
              CASTSCOPE_SOURCE_INTERNAL == static_cast<int>(castscope::SourceKind::kInternal) &&
              CASTSCOPE_SOURCE_GENERATED == static_cast<int>(castscope::SourceKind::kGenerated));

int castscope_source_kind(const char* file) {
  const std::string_view path = file != nullptr ? file : "";
  if (const auto library = castscope::maker_library(path); library != castscope::CastMaker::kUnspecified)
    return CASTSCOPE_SOURCE_LIBRARY + static_cast<int>(library);
  return static_cast<int>(castscope::source_kind(path));
}

void castscope_add_internal_dir(const char* dir) {
  try {
    if (dir != nullptr) castscope::add_internal_dir(dir);
  } catch (...) {
    castscope::process_recording_state().events.count_internal_error();
  }
}

unsigned castscope_intern_location(int kind, const char* file, unsigned line, const char* function, const char* stack) {
  return castscope_intern_library_location(kind, file, line, function, stack, 0);
}

unsigned castscope_intern_library_location(int kind, const char* file, unsigned line, const char* function,
                                           const char* stack, int library) {
  try {
    castscope::Location location;
    location.kind = static_cast<castscope::LocationKind>(kind);
    location.file = file != nullptr ? file : "";
    location.line = line;
    location.function = function != nullptr ? function : "";
    location.stack = stack != nullptr ? stack : "";
    if (library > 0 && library <= static_cast<int>(castscope::v1::enums::CastMaker_MAX))
      location.library = static_cast<castscope::CastMaker>(library);
    return castscope::process_recording_state().locations.intern(location);
  } catch (...) {
    return 0;
  }
}

const char* castscope_agent_torch_version(void) { return TORCH_VERSION; }

void castscope_agent_gpu_profiler(int begin) {
  try {
    castscope::Agent::instance().gpu_profiler(begin != 0);
  } catch (...) {
  }
}

void castscope_agent_trace_recording(int begin) {
  try {
    if (begin != 0) {
      castscope::begin_trace_recording();
    } else {
      castscope::end_trace_recording();
    }
  } catch (...) {
    castscope::process_recording_state().events.count_internal_error();
  }
}

unsigned castscope_overlay_op(const char* name, const char* arg_names) {
  try {
    if (name == nullptr || *name == '\0') return 0;
    auto& events = castscope::process_recording_state().events;
    const uint32_t id = events.intern_op(name);
    std::vector<std::string> names;
    std::string rest = arg_names != nullptr ? arg_names : "";
    for (size_t start = 0; !rest.empty() && start <= rest.size();) {
      const size_t end = std::min(rest.find('\n', start), rest.size());
      names.push_back(rest.substr(start, end - start));
      start = end + 1;
    }
    events.set_arg_names(id, std::move(names));
    return id;
  } catch (...) {
    castscope::process_recording_state().events.count_internal_error();
    return 0;
  }
}

void castscope_overlay_cast(unsigned op_id, int policy, int device, int src, int dst, int outcome, int role,
                            int arg_index, int list_index, const long long* shape, int ndim, unsigned long long bytes) {
  using namespace castscope;
  auto& runtime = process_recording_state();
  const bool valid = op_id != 0 &&
                     (policy == static_cast<int>(CastPolicy::kLowerPrecisionFp) ||
                      policy == static_cast<int>(CastPolicy::kFp32) || policy == static_cast<int>(CastPolicy::kPromote)) &&
                     device >= 1 && device <= 4 && src >= 0 && src <= static_cast<int>(DType::kOther) && dst >= 0 &&
                     dst <= static_cast<int>(DType::kOther) && outcome >= 1 &&
                     outcome <= static_cast<int>(CastOutcome::kDtypeArgKept) && role >= 1 && role <= 3 &&
                     arg_index >= 0 && arg_index <= 0xffff && list_index >= -1 && list_index <= 0x7fff && ndim >= 0 &&
                     ndim <= 255 && (ndim == 0 || shape != nullptr);
  if (!valid) {
    runtime.events.count_internal_error();
    return;
  }
  try {
    CastDescription cast;
    cast.op_id = op_id;
    cast.policy = static_cast<CastPolicy>(policy);
    cast.device = static_cast<DeviceKind>(device);
    cast.src = static_cast<DType>(src);
    cast.dst = static_cast<DType>(dst);
    cast.outcome = static_cast<CastOutcome>(outcome);
    cast.role = static_cast<Role>(role);
    cast.arg_index = static_cast<uint16_t>(arg_index);
    cast.list_index = static_cast<int16_t>(list_index);
    cast.shape.assign(shape, shape + ndim);
    cast.bytes = bytes;
    record_callable_overlay_cast(runtime, cast);
  } catch (...) {
    runtime.events.count_internal_error();
  }
}

void castscope_overlay_error(const char* message) {
  try {
    const std::string text = message != nullptr ? message : "";
    castscope::log::warn("overlay skipped: " + text);
    castscope::process_recording_state().events.note_overlay_error(text);
  } catch (...) {
  }
}

void castscope_agent_finish(void) {
  try {
    Agent::instance().finish();
  } catch (...) {
  }
}

size_t castscope_policy_check(const char* config_json, char* buf, size_t len) {
  using castscope::json;
  json out = {{"ok", false}, {"errors", json::array()}, {"findings", json::array()}};
  try {
    castscope::AgentConfig config;
    const std::string error = castscope::parse_agent_config(config_json, config);
    if (!error.empty()) {
      out["errors"].push_back(error);
    } else {
      const castscope::PolicySet policies = castscope::load_policy_files(config.policy_files);
      castscope::describe_policy_set(policies, out);
      const auto findings = castscope::check_policy_against_dispatcher(policies);
      out["findings"] = castscope::findings_json(findings);
      bool ok = policies.ok();
      for (const auto& f : findings) ok = ok && f.severity != castscope::PolicyFinding::Severity::kError;
      out["ok"] = ok;
    }
  } catch (const std::exception& e) {
    out["errors"].push_back(std::string("castscope: internal error: ") + e.what());
  }
  // Replace, not throw: paths and messages may hold bytes that are not UTF-8,
  // and nothing may leave this extern "C" function as an exception.
  return castscope::copy_out(out.dump(-1, ' ', false, json::error_handler_t::replace), buf, len);
}

}  // extern "C"
