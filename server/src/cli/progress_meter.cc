#include "server/src/cli/progress_meter.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <iterator>
#include <cstdlib>

namespace castscope::collector {
namespace {

// 1234567 bytes → "1.2 MB"; 1234567 events → "1.2M".
std::string amount(double value, ProgressMeter::Unit unit) {
  const bool bytes = unit == ProgressMeter::Unit::kBytes;
  const char* suffixes[] = {"", bytes ? " kB" : "k", bytes ? " MB" : "M", bytes ? " GB" : "G", bytes ? " TB" : "T"};
  size_t i = 0;
  while (value >= 1000 && i + 1 < std::size(suffixes)) {
    value /= 1000;
    ++i;
  }
  char text[32];
  std::snprintf(text, sizeof text, i == 0 ? "%.0f%s%s" : "%.1f%s%s", value, suffixes[i], i == 0 && bytes ? " B" : "");
  return text;
}

std::string duration(double seconds) {
  char text[32];
  const auto s = static_cast<long long>(seconds + 0.5);
  if (s < 60) std::snprintf(text, sizeof text, "%llds", s);
  else if (s < 3600) std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s % 3600 / 60);
  return text;
}

}  // namespace

ProgressMeter::ProgressMeter(std::string label, Unit unit)
    : label_(std::move(label)), unit_(unit), on_terminal_(::isatty(STDERR_FILENO) == 1) {
  if (const char* interval = std::getenv("CASTSCOPE_PROGRESS_INTERVAL_MS"); interval != nullptr && *interval != '\0')
    interval_ = std::chrono::milliseconds(std::strtoul(interval, nullptr, 10));
}

ProgressMeter::~ProgressMeter() { finish(); }

std::string ProgressMeter::line(const std::string& label, Unit unit, uint64_t done, uint64_t total, double seconds) {
  const double fraction = total == 0 ? 1.0 : static_cast<double>(std::min(done, total)) / static_cast<double>(total);
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
  const std::string of_unit = unit == Unit::kEvents ? " events" : "";
  std::string text = label + ": " + std::to_string(static_cast<int>(fraction * 100)) + "% (" + amount(static_cast<double>(done), unit) +
                     " of " + amount(static_cast<double>(total), unit) + of_unit + ", ";
  text += rate > 0 ? amount(rate, unit) + of_unit + "/s, ETA " + duration(static_cast<double>(total > done ? total - done : 0) / rate)
                   : std::string("ETA ?");
  return text + ")";
}

void ProgressMeter::update(uint64_t done, uint64_t total) {
  if (!on_terminal_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < interval_) return;
  last_draw_ = now;
  const std::string text = "\r" + line(label_, unit_, done, total, std::chrono::duration<double>(now - started_).count()) + "\x1b[K";
  std::fputs(text.c_str(), stderr);
  std::fflush(stderr);
  drawn_ = true;
}

void ProgressMeter::finish() {
  if (!drawn_) return;
  std::fputs("\r\x1b[K", stderr);
  std::fflush(stderr);
  drawn_ = false;
}

}  // namespace castscope::collector
