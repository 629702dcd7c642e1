#include "common/log/rate_limited.h"

#include <algorithm>
#include <vector>

namespace castscope::log {

namespace {

std::mutex& registry_mutex() {
  static std::mutex mutex;
  return mutex;
}

std::vector<RateLimited*>& registry() {
  static std::vector<RateLimited*> limited;
  return limited;
}

}  // namespace

RateLimited::RateLimited(spdlog::logger& logger, std::string what, size_t burst, std::chrono::seconds interval)
    : logger_(logger), what_(std::move(what)), burst_(burst), interval_(interval) {
  std::lock_guard lock(registry_mutex());
  registry().push_back(this);
}

RateLimited::~RateLimited() {
  std::lock_guard lock(registry_mutex());
  auto& all = registry();
  all.erase(std::remove(all.begin(), all.end(), this), all.end());
}

bool RateLimited::admit() {
  std::lock_guard lock(mutex_);
  const auto now = std::chrono::steady_clock::now();
  if (written_in_window_ == 0 || now - window_start_ >= interval_) {
    summarise_locked();
    window_start_ = now;
    written_in_window_ = 0;
  }
  if (written_in_window_ < burst_) {
    ++written_in_window_;
    return true;
  }
  ++held_back_;
  ++held_back_total_;
  return false;
}

void RateLimited::summarise_locked() {
  if (held_back_ == 0) return;
  logger_.warn("{}: {} more like the lines above in the last {} s, not shown (at most {} per {} s)", what_, held_back_,
               std::chrono::duration_cast<std::chrono::seconds>(std::chrono::steady_clock::now() - window_start_).count(),
               burst_, interval_.count());
  held_back_ = 0;
}

void RateLimited::flush() {
  std::lock_guard lock(mutex_);
  summarise_locked();
}

uint64_t RateLimited::held_back_total() const {
  std::lock_guard lock(mutex_);
  return held_back_total_;
}

void flush_rate_limited() {
  std::lock_guard lock(registry_mutex());
  for (RateLimited* limited : registry()) limited->flush();
}

}  // namespace castscope::log
