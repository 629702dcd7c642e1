#include "agent/src/schedule/window_schedule.h"

namespace castscope {

WindowSchedule::WindowSchedule(WindowScheduleConfig config, Clock::time_point now)
    : config_(config), opened_at_(now), closed_at_(now) {}

WindowSchedule::Change WindowSchedule::set(bool open, Clock::time_point now, uint64_t step) {
  if (open == open_) return Change::kNone;
  open_ = open;
  if (open) {
    opened_at_ = now;
    opened_step_ = step;
  } else {
    closed_at_ = now;
    capture_steps_ = 0;
  }
  return open ? Change::kOpen : Change::kClose;
}

WindowSchedule::Change WindowSchedule::on_step(uint64_t step, Clock::time_point now, bool hold_open) {
  if (config_.steps == 0) return Change::kNone;
  stepped_ = true;
  if (open_) {
    covered_a_step_ = true;
    const uint64_t length = capture_steps_ > 0 ? capture_steps_ : config_.steps;
    return step - opened_step_ >= length && !hold_open ? set(false, now, step) : Change::kNone;
  }
  // The first window may have timed out in a long setup: the first steps still get one.
  if (!covered_a_step_ || (config_.every_steps > 0 && step % config_.every_steps == 0)) return set(true, now, step);
  return Change::kNone;
}

WindowSchedule::Change WindowSchedule::on_tick(Clock::time_point now, bool hold_open) {
  if (config_.steps == 0) return Change::kNone;
  if (open_) {
    // A capture window ends with a skipped step or its step count, not its age.
    const bool expired = capture_steps_ == 0 && now - opened_at_ >= std::chrono::milliseconds(config_.max_ms);
    return expired && !hold_open ? set(false, now, opened_step_) : Change::kNone;
  }
  if (!stepped_ && config_.every_ms > 0 && now - closed_at_ >= std::chrono::milliseconds(config_.every_ms))
    return set(true, now, 0);
  return Change::kNone;
}

WindowSchedule::Change WindowSchedule::open_capture(uint64_t step, uint64_t steps, Clock::time_point now) {
  if (open_) return Change::kNone;
  const Change change = set(true, now, step);
  capture_steps_ = steps;
  return change;
}

WindowSchedule::Change WindowSchedule::close(Clock::time_point now) { return set(false, now, opened_step_); }

}  // namespace castscope
