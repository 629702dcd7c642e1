// When GPU timing collects: windows of steps, as the op probe opens them
// (observers/op_probe.h), so its cost is paid on a few steps in many. CUPTI's
// kernel tracing alone costs about 12 % of a launch-bound ResNet-18 step
// (docs/gpu.md, "Cost"); 2 steps in 100 make that about 0.3 %.
//
// A window opens at start and covers `window_steps` optimizer steps, then one
// opens every `every_steps` steps. A window also closes after `window_max_ms`;
// a job that never steps opens one every `every_ms`. `window_steps` 0: always
// open. Pure logic: the caller applies the decisions.
#pragma once

#include <chrono>
#include <cstdint>

namespace castscope {

struct TimingWindowConfig {
  uint64_t window_steps = 2;   // 0: every step, no windows
  uint64_t every_steps = 100;  // 0: only the first window
  int64_t window_max_ms = 5000;
  int64_t every_ms = 60000;    // jobs without steps; 0: only the first window
  bool operator==(const TimingWindowConfig&) const = default;
};

class TimingWindows {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Change { kNone, kOpen, kClose };

  TimingWindows(TimingWindowConfig config, Clock::time_point now);

  bool open() const { return open_; }
  // An optimizer step finished; `step` counts them from 1.
  Change on_step(uint64_t step, Clock::time_point now);
  // Called now and then (the exporter's tick): time limits.
  Change on_tick(Clock::time_point now);

 private:
  Change set(bool open, Clock::time_point now, uint64_t step);

  TimingWindowConfig config_;
  bool open_ = true;
  bool stepped_ = false;
  bool covered_a_step_ = false;
  uint64_t opened_step_ = 0;
  Clock::time_point opened_at_, closed_at_;
};

}  // namespace castscope
