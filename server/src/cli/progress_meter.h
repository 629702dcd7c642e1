// Progress of long work on a terminal: `castscope-collector load` (spool
// bytes) and `report` (event rows read). One line on stderr, redrawn in
// place (carriage return, erase to end of line) at most every 250 ms with
// the percentage, the rate and the time left; nothing at all when stderr is
// not a terminal, so logs and pipes stay clean. CASTSCOPE_PROGRESS_INTERVAL_MS
// changes the spacing (the tests draw every update with 0).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace castscope::collector {

class ProgressMeter {
 public:
  enum class Unit { kBytes, kEvents };

  // `label`: what is drawn first ("castscope-collector load").
  ProgressMeter(std::string label, Unit unit);
  ~ProgressMeter();  // finish()
  ProgressMeter(const ProgressMeter&) = delete;
  ProgressMeter& operator=(const ProgressMeter&) = delete;

  bool shown() const { return on_terminal_; }
  // `done` of `total` so far; draws when the spacing has passed.
  void update(uint64_t done, uint64_t total);
  // Erases the line, so what is printed next starts clean. Idempotent.
  void finish();

  // The line for `done` of `total` after `seconds` (no control characters).
  static std::string line(const std::string& label, Unit unit, uint64_t done, uint64_t total, double seconds);

 private:
  const std::string label_;
  const Unit unit_;
  const bool on_terminal_;
  std::chrono::milliseconds interval_{250};
  const std::chrono::steady_clock::time_point started_ = std::chrono::steady_clock::now();
  std::chrono::steady_clock::time_point last_draw_ = started_;
  bool drawn_ = false;
};

}  // namespace castscope::collector
