// When the agent turns GPU timing on, and what it says when it does not
// (docs/gpu.md). Wraps agent/src/gpu, which is absent from builds that found
// no CUPTI headers.
#pragma once

#include <cstdint>
#include <string>

#include "agent/src/config/agent_config.h"
#include "agent/src/record/event_log.h"

namespace castscope {

// "on", or "off: <why>" (configured off, no CUDA device, no CUPTI, another
// tool holds CUPTI, built without CUPTI headers...).
std::string start_gpu_timing(const AgentConfig& config, EventLog& log);
void flush_gpu_timing();           // completed buffers only: cheap, for the exporter
void stop_gpu_timing();            // everything, then off: at stop and exit
void forget_gpu_timing_in_child();  // a forked child must not call CUPTI
// torch.profiler is about to collect GPU activity / has finished: castscope
// steps aside and comes back (gpu_timing.h). Yield returns false when GPU
// timing was not on.
bool yield_gpu_timing();
void resume_gpu_timing();
// The GPU module's own state now ("" without CUPTI headers).
std::string live_gpu_timing_state();
// Kernels of castscope's own checks (numerics windows) that GPU timing left
// out of the events (gpu/launch_scope.h: kCastscopeOwnLaunchId).
uint64_t gpu_own_kernels();
// Timing windows (agent/src/schedule/window_schedule.h): after each optimizer step
// (the training thread) and on the exporter's tick.
void gpu_timing_on_step(uint64_t step);
void gpu_timing_on_tick();

}  // namespace castscope
