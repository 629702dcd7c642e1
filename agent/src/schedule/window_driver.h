// A WindowSchedule moved from several threads: started at attach, stopped at
// detach, stepped by the training thread, ticked by the exporter. Each move
// runs under one mutex and hands the schedule's change to the caller's
// `apply`, under that mutex too; once stopped, nothing moves it (a step racing
// a stop never reopens a window). The op probe and the numerics windows each
// drive theirs with one; what opening and closing do is theirs.
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>

#include "agent/src/schedule/window_schedule.h"

namespace castscope {

class WindowDriver {
 public:
  using Change = WindowSchedule::Change;
  using Clock = WindowSchedule::Clock;

  // Forgets any schedule; when `enabled`, starts one whose first window opens
  // now: apply(kOpen). `configure` runs first, under the lock.
  template <typename Configure, typename Apply>
  void start(const WindowScheduleConfig& config, bool enabled, Configure&& configure, Apply&& apply) {
    std::lock_guard<std::mutex> lock(mutex_);
    configure();
    started_.store(false);
    schedule_.reset();
    if (!enabled) return;
    schedule_.emplace(config, Clock::now());
    started_.store(true);
    apply(Change::kOpen);
  }

  // Stops the schedule, then close() under the lock.
  template <typename Close>
  void stop(Close&& close) {
    std::lock_guard<std::mutex> lock(mutex_);
    started_.store(false);
    close();
  }

  // Optimizer step `step` finished; `hold_open` keeps an open window open.
  template <typename Apply>
  void step(uint64_t step, bool hold_open, Apply&& apply) {
    with_schedule([&](WindowSchedule& s) { apply(s.on_step(step, Clock::now(), hold_open)); });
  }

  // The exporter's tick: time limits.
  template <typename Apply>
  void tick(bool hold_open, Apply&& apply) {
    with_schedule([&](WindowSchedule& s) { apply(s.on_tick(Clock::now(), hold_open)); });
  }

  // use(schedule) under the lock, while started. The first look is one
  // relaxed load: a job without the observer pays no lock per step.
  template <typename Use>
  void with_schedule(Use&& use) {
    if (!started_.load(std::memory_order_relaxed)) return;
    std::lock_guard<std::mutex> lock(mutex_);
    if (!started_.load(std::memory_order_relaxed)) return;  // stopped meanwhile
    use(*schedule_);  // set before started_
  }

  // A forked child: no exporter ticks there, so nothing is started.
  void forget_in_child() { started_.store(false); }
  // The fork handlers hold it across fork(), so the child's copy is unlocked.
  std::mutex& mutex() { return mutex_; }

 private:
  std::mutex mutex_;
  std::atomic<bool> started_{false};
  std::optional<WindowSchedule> schedule_;
};

}  // namespace castscope
