// When a forwarder stops trying: only once its agent is gone, and only after
// the collector has been unreachable for `limit` without a break. An outage
// starts at the first failed attempt (or broken stream) after a stream that
// got as far as the collector's Welcome, and ends at the next Welcome, so
// earlier outages never count against a later one. Time is passed in.
#pragma once

#include <chrono>
#include <optional>

namespace castscope {

class GiveUpRule {
 public:
  using Clock = std::chrono::steady_clock;

  explicit GiveUpRule(std::chrono::seconds limit) : limit_(limit) {}

  // A stream reached the collector: any outage is over.
  void reached() { since_.reset(); }
  // An attempt failed or a stream broke at `now`.
  void unreachable(Clock::time_point now) {
    if (!since_) since_ = now;
  }
  // How long the collector has been unreachable; nothing while it is reachable.
  std::optional<Clock::duration> unreachable_for(Clock::time_point now) const {
    if (!since_) return std::nullopt;
    return now - *since_;
  }
  bool give_up(Clock::time_point now, bool agent_alive) const {
    return !agent_alive && since_ && now - *since_ >= limit_;
  }
  std::chrono::seconds limit() const { return limit_; }

 private:
  std::chrono::seconds limit_;
  std::optional<Clock::time_point> since_;
};

}  // namespace castscope
