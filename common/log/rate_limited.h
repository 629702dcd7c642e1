// A warning that can come once per batch or per stream, and so by the
// thousand under load: at most `burst` lines per `interval`, the rest counted
// and told in one line ("... 4,310 more like it in the last 30 s, not shown"),
// written before the next line that passes, or by flush_rate_limited() (at a
// collector's exit). Learnt from journald's RateLimitBurst/RateLimitIntervalSec.
#pragma once

#include <spdlog/logger.h>

#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace castscope::log {

class RateLimited {
 public:
  // `what` names the kind of line in the summary ("ingest streams rejected").
  RateLimited(spdlog::logger& logger, std::string what, size_t burst = 10,
              std::chrono::seconds interval = std::chrono::seconds(30));
  ~RateLimited();
  RateLimited(const RateLimited&) = delete;
  RateLimited& operator=(const RateLimited&) = delete;

  template <class... Args>
  void warn(spdlog::format_string_t<Args...> format, Args&&... args) {
    if (admit()) logger_.warn(format, std::forward<Args>(args)...);
  }

  // Writes the summary of the lines held back, if any.
  void flush();
  uint64_t held_back_total() const;

 private:
  bool admit();  // also writes the summary of the window before
  void summarise_locked();

  spdlog::logger& logger_;
  const std::string what_;
  const size_t burst_;
  const std::chrono::seconds interval_;
  mutable std::mutex mutex_;
  std::chrono::steady_clock::time_point window_start_{};
  size_t written_in_window_ = 0;
  uint64_t held_back_ = 0;        // since the last summary
  uint64_t held_back_total_ = 0;  // since the start
};

// flush() of every RateLimited alive.
void flush_rate_limited();

}  // namespace castscope::log
