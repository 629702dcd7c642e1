// GPU kernel timing with CUPTI's activity API (docs/gpu.md).
//
// CUPTI is process-wide: its buffer callbacks take no user data and its
// activity kinds are enabled for the whole process, so there is one
// collector per process, behind these free functions.
//
// Records: every kernel, memcpy and memset becomes a kernel Record in the
// event log, its start and duration in the agent's clock, attributed to the
// cast or op it was launched under (launch_scope.h) through CUPTI's external
// correlation records. A kernel whose correlation record has not arrived is
// held for one more buffer; after that (or at stop) it counts as launched
// outside any autocast op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/src/config/agent_config.h"
#include "agent/src/record/event_log.h"

namespace castscope {

struct GpuTimingStats {
  uint64_t activities = 0;          // kernel records made
  uint64_t buffers_refused = 0;     // buffer requests past the budget
  uint64_t yields = 0;              // times castscope stepped aside for another CUPTI client
  uint64_t foreign_buffers = 0;     // completed buffers castscope did not allocate, left alone
  uint64_t own_kernels = 0;         // castscope's own kernels, copies, sets (kCastscopeOwnLaunchId): not recorded
};

// Loads CUPTI (the configured path, else `candidates`), checks that no other
// tool holds it, enables activity collection. Returns the state for the run
// metadata: "on", or "off: <why>". Safe to call again after gpu_timing_stop.
std::string gpu_timing_start(const GpuTimingConfig& config, const std::vector<std::string>& candidates, EventLog& log);

// Hands the activity buffers CUPTI has completed to the event log. `forced`
// also ends the buffers still being filled (at stop and at exit).
void gpu_timing_flush(bool forced);

// Flushes everything, disables collection, and sends what was held back.
void gpu_timing_stop();

// Another CUPTI client (torch.profiler's Kineto) is about to take CUPTI's
// process-wide buffer callbacks and activity kinds: castscope flushes what it
// has, disables its kinds and stops pushing ids, then takes them back in
// gpu_timing_resume once the other client is done. Returns false when GPU
// timing was not on.
bool gpu_timing_yield();
void gpu_timing_resume();

// A timing window opens or closes (schedule/window_schedule.h): between windows
// castscope's activity kinds are off and nothing is pushed; buffers already
// filled still come out at the next flush.
void gpu_timing_window(bool open);

// "on", "off: <why>", or "" when never asked.
std::string gpu_timing_state();

// The CUPTI clock minus the agent's (CLOCK_MONOTONIC), as last measured.
int64_t gpu_clock_offset_ns();

GpuTimingStats gpu_timing_stats();

}  // namespace castscope
