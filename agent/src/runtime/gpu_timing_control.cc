#include "agent/src/runtime/gpu_timing_control.h"

#include <ATen/Context.h>

#include <memory>
#include <mutex>

#include "agent/src/gpu/launch_scope.h"
#include "agent/src/schedule/window_schedule.h"
#include "common/log/log.h"
#if CASTSCOPE_HAVE_CUPTI
#include "agent/src/gpu/cupti_library.h"
#include "agent/src/gpu/gpu_timing.h"
#endif

namespace castscope {
namespace {
std::mutex g_windows_mutex;
std::unique_ptr<WindowSchedule> g_windows;  // set while GPU timing is on

void apply(WindowSchedule::Change change) {
#if CASTSCOPE_HAVE_CUPTI
  if (change != WindowSchedule::Change::kNone) gpu_timing_window(change == WindowSchedule::Change::kOpen);
#else
  (void)change;
#endif
}
}  // namespace

std::string start_gpu_timing(const AgentConfig& config, EventLog& log) {
  using Mode = GpuTimingConfig::Mode;
  if (config.gpu.mode == Mode::kOff) return "off: gpu_timing is \"off\" in the configuration";
  if (config.gpu.mode == Mode::kAuto && !at::globalContext().hasCUDA())
    return "off: torch sees no CUDA device";
#if CASTSCOPE_HAVE_CUPTI
  const std::string state = gpu_timing_start(config.gpu, cupti_candidates(config.internal_path_prefix), log);
  {
    std::lock_guard<std::mutex> lock(g_windows_mutex);
    g_windows = state == "on" ? std::make_unique<WindowSchedule>(config.gpu.schedule, WindowSchedule::Clock::now()) : nullptr;
  }
  if (state == "on") {
    log::info("GPU timing on (CUPTI activity records, external correlation kind " +
              std::to_string(config.gpu.correlation_kind) + ")");
  } else {
    log::warn("GPU timing " + state);
  }
  return state;
#else
  (void)log;
  return "off: this castscope was built without CUPTI headers";
#endif
}

void flush_gpu_timing() {
#if CASTSCOPE_HAVE_CUPTI
  gpu_timing_flush(false);
#endif
}

void gpu_timing_on_step(uint64_t step) {
  std::lock_guard<std::mutex> lock(g_windows_mutex);
  if (g_windows) apply(g_windows->on_step(step, WindowSchedule::Clock::now()));
}

void gpu_timing_on_tick() {
  std::lock_guard<std::mutex> lock(g_windows_mutex);
  if (g_windows) apply(g_windows->on_tick(WindowSchedule::Clock::now()));
}

void stop_gpu_timing() {
  {
    std::lock_guard<std::mutex> lock(g_windows_mutex);
    g_windows.reset();
  }
#if CASTSCOPE_HAVE_CUPTI
  gpu_timing_stop();
#endif
}

bool yield_gpu_timing() {
#if CASTSCOPE_HAVE_CUPTI
  return gpu_timing_yield();
#else
  return false;
#endif
}

void resume_gpu_timing() {
#if CASTSCOPE_HAVE_CUPTI
  gpu_timing_resume();
#endif
}

std::string live_gpu_timing_state() {
#if CASTSCOPE_HAVE_CUPTI
  return gpu_timing_state();
#else
  return "";
#endif
}

uint64_t gpu_own_kernels() {
#if CASTSCOPE_HAVE_CUPTI
  return gpu_timing_stats().own_kernels;
#else
  return 0;
#endif
}

void forget_gpu_timing_in_child() { gpu_detail::g_correlating.store(false, std::memory_order_relaxed); }

}  // namespace castscope
