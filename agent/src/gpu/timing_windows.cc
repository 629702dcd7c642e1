#include "agent/src/gpu/timing_windows.h"

namespace castscope {

TimingWindows::TimingWindows(TimingWindowConfig config, Clock::time_point now)
    : config_(config), opened_at_(now), closed_at_(now) {}

TimingWindows::Change TimingWindows::set(bool open, Clock::time_point now, uint64_t step) {
  if (open == open_) return Change::kNone;
  open_ = open;
  if (open) {
    opened_at_ = now;
    opened_step_ = step;
  } else {
    closed_at_ = now;
  }
  return open ? Change::kOpen : Change::kClose;
}

TimingWindows::Change TimingWindows::on_step(uint64_t step, Clock::time_point now) {
  if (config_.window_steps == 0) return Change::kNone;
  stepped_ = true;
  if (open_) {
    covered_a_step_ = true;
    return step - opened_step_ >= config_.window_steps ? set(false, now, step) : Change::kNone;
  }
  // The first window may have timed out in a long setup: the first steps still get one.
  if (!covered_a_step_ || (config_.every_steps > 0 && step % config_.every_steps == 0)) return set(true, now, step);
  return Change::kNone;
}

TimingWindows::Change TimingWindows::on_tick(Clock::time_point now) {
  if (config_.window_steps == 0) return Change::kNone;
  if (open_) return now - opened_at_ >= std::chrono::milliseconds(config_.window_max_ms) ? set(false, now, opened_step_)
                                                                                        : Change::kNone;
  if (!stepped_ && config_.every_ms > 0 && now - closed_at_ >= std::chrono::milliseconds(config_.every_ms))
    return set(true, now, 0);
  return Change::kNone;
}

}  // namespace castscope
