// The op probe: a look beyond the autocast keys, in windows.
//
// castscope's kernels see only ops that reach an autocast dispatch key. Three
// findings need other ops: an op outside a region that meets a
// lower-precision tensor made inside one (low-precision-escape), an explicit
// `.float()` / `.to(dtype)` whose result autocast casts straight back
// (cast-churn), and an op under autocast that no autocast kernel covers
// (not-autocast: in-place and out= variants, custom ops). A global
// RecordFunction observer with inputs and outputs sees all of them, at a
// price on every op of every thread, so it runs only in windows
// (schedule/window_schedule.h): from attach until `steps` optimizer steps
// have passed, then for `steps` steps every `every_steps` steps. A window
// also closes after `max_ms`; a job that never steps opens one every `every_ms`.
// Training loops repeat, so a window sees what every iteration does.
//
// Tensor identity: weak references to TensorImpls, per thread, kept for one
// window. A weak reference keeps the TensorImpl object (not its storage)
// allocated, so its address cannot be reused while castscope looks it up.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <set>
#include <string>

#include "agent/src/config/agent_config.h"
#include "agent/src/record/cast_record.h"

namespace castscope {

// At attach: keeps the configuration and opens the first window.
void probe_start(const ProbeConfig& config);
// At detach: closes any window. Ops already in flight keep their copy of the
// callbacks and end in them afterwards; those record nothing.
void probe_stop();
// After optimizer step `iteration` (the training thread).
void probe_on_iteration(uint64_t iteration);
// Now and then from the exporter thread: time-based opening and closing.
void probe_on_tick();
// Whether a window is open: one relaxed load, inline, as every autocast op
// asks it (as a call into this library, ~10 instructions more an op;
// docs/performance.md, "sixteenth pass").
extern std::atomic<bool> g_probe_window_open;
inline bool probe_window_open() { return g_probe_window_open.load(std::memory_order_relaxed); }

// probe_is_round_trip's answer while a window is open.
bool probe_is_round_trip_in_window(const at::Tensor& source, c10::ScalarType target);
// Whether casting `source` to `target` undoes an explicit cast: `source` is
// the result of a `.to()` from `target`'s dtype, made on this thread in the
// current window. Asked of every cast made; inline, the call only in a window.
inline bool probe_is_round_trip(const at::Tensor& source, c10::ScalarType target) {
  return probe_window_open() && probe_is_round_trip_in_window(source, target);
}

// pthread_atfork handlers (called from the agent's): the observer is taken
// out around fork(), so a forked child never has it.
void probe_before_fork();
void probe_after_fork_in_parent();
void probe_after_fork_in_child();

}  // namespace castscope
