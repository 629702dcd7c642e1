// When a costly observer looks: windows of optimizer steps, one schedule for
// the op probe (observers/op_probe.h), numerics windows
// (numerics/numerics_windows.h) and GPU timing (runtime/gpu_timing_control.h),
// so each cost is paid on a few steps in many (2 in 100 by default).
//
// A window opens at start and covers `steps` optimizer steps, then one opens
// every `every_steps` steps (0: only the first). A window also closes after
// `max_ms`; a job that never steps opens one every `every_ms` (0: only the
// first). If the first window timed out during a long setup, the first steps
// still get one. `steps` 0: always open, no windows.
//
// Numerics adds two things: a capture window (opened by a skipped GradScaler
// step, closed by the next one or after its own step count, never by its
// age), and `hold_open` (a CUDA graph capture in progress must not see a
// window close). Pure logic, no clock of its own: the caller passes the time
// and applies the changes.
#pragma once

#include <chrono>
#include <cstdint>

namespace castscope {

struct WindowScheduleConfig {
  uint64_t steps = 2;          // per window; 0: always open
  uint64_t every_steps = 100;  // 0: only the first window
  int64_t max_ms = 5000;
  int64_t every_ms = 60000;    // jobs without steps; 0: only the first window
  bool operator==(const WindowScheduleConfig&) const = default;
};

class WindowSchedule {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Change { kNone, kOpen, kClose };

  WindowSchedule(WindowScheduleConfig config, Clock::time_point now);

  bool open() const { return open_; }
  // The open window is a capture window (open_capture), not a scheduled one.
  bool capture_window_open() const { return open_ && capture_steps_ > 0; }
  // An optimizer step finished; `step` counts them from 1.
  Change on_step(uint64_t step, Clock::time_point now, bool hold_open = false);
  // Called now and then (the exporter's tick): time limits.
  Change on_tick(Clock::time_point now, bool hold_open = false);
  // Opens a capture window at `step` for `steps` steps (a no-op while one is open).
  Change open_capture(uint64_t step, uint64_t steps, Clock::time_point now);
  // Closes the open window, whatever opened it.
  Change close(Clock::time_point now);

 private:
  Change set(bool open, Clock::time_point now, uint64_t step);

  WindowScheduleConfig config_;
  bool open_ = true;
  bool stepped_ = false;
  bool covered_a_step_ = false;
  uint64_t capture_steps_ = 0;  // the open window is a capture window of this many steps
  uint64_t opened_step_ = 0;
  Clock::time_point opened_at_, closed_at_;
};

}  // namespace castscope
