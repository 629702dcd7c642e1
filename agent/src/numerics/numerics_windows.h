// Numerics windows: what casts to a lower precision did to the values
// (overflow to inf, underflow to 0, NaN already there) and which autocast ops
// produced inf or NaN from finite inputs, per site (op, argument, line,
// mode, phase, thread), in windows like the op probe's (docs/numerics.md).
// GradScaler updates are recorded always.
//
// Cost: the checks are a few ATen reductions per cast and op, only while a
// window is open; outside one, a kernel pays one relaxed load. On the CPU
// the counts are read at once; on CUDA they accumulate on the device per
// site and are read when the window closes, so nothing inside a window waits
// for the GPU.
//
// Schedule (schedule/window_schedule.h, the op probe's): open from attach
// until `steps` optimizer steps have passed, then for `steps` steps every
// `every_steps`; closed after `max_ms`; jobs without steps get one every
// `every_ms`. A GradScaler step skipped outside a window opens a capture
// window that closes at the next skipped step (so its first non-finite op is
// seen), or after `skip_capture_steps` steps.
#pragma once

#include <ATen/core/Tensor.h>

#include <atomic>
#include <cstdint>
#include <span>

#include "agent/src/config/agent_config.h"
#include "agent/src/record/cast_record.h"

namespace castscope {

void numerics_start(const NumericsConfig& config);
// Closes any window (its counts go out).
void numerics_stop();
// After optimizer step `iteration` (the training thread).
void numerics_on_iteration(uint64_t iteration);
// Now and then from the exporter thread: time-based opening and closing.
void numerics_on_tick();

// One relaxed load: whether kernels check values now. Inline, as every
// autocast op asks it (docs/performance.md, "sixteenth pass").
extern std::atomic<bool> g_numerics_window_open;
inline bool numerics_window_open() { return g_numerics_window_open.load(std::memory_order_relaxed); }

// A cast `source` -> `result` that the cast cache did not serve, for the op
// whose record is `op`. Never throws (a failure is counted).
void numerics_check_cast(const Record& op, uint16_t arg_index, const at::Tensor& source, const at::Tensor& result) noexcept;
// A conversion to float8 that `cast` (its record, kind kCast) describes:
// what it saturated and flushed to zero, at the conversion's own line.
void numerics_check_conversion(const Record& cast, const at::Tensor& source, const at::Tensor& result) noexcept;
// An autocast op's call: its tensor inputs as the op received them (after
// the casts) and its tensor outputs.
void numerics_check_op(const Record& op, std::span<const at::Tensor> inputs, std::span<const at::Tensor> outputs) noexcept;

// GradScaler.update() ran: `scale` after it, `found_inf` whether the step
// before it was skipped, `updates` this scaler's updates so far. Records it
// (at the calling Python line) and may open a capture window.
void numerics_on_scaler_update(double scale, bool found_inf, uint64_t updates) noexcept;

// pthread_atfork: a forked child checks nothing.
void numerics_after_fork_in_child();

// A torch.cuda.graph capture begins or ends (the Python package brackets
// it): while one runs, CUDA tensors are not checked and no window closes.
void numerics_cuda_graph_capture(bool begin);

// Sites dropped because a window already had kMaxSites of them.
uint64_t numerics_sites_dropped();

}  // namespace castscope
