// Prometheus' text exposition format, version 0.0.4 (what /metrics sends):
// per metric family a HELP and a TYPE line, then its samples. Label values
// are escaped (backslash, quote, newline) as the format asks; HELP text the
// same, less the quote.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace castscope::collector {

inline constexpr const char* kPrometheusContentType = "text/plain; version=0.0.4; charset=utf-8";

class PrometheusText {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // Starts a family; `type` is "counter" or "gauge". Counters' names end in _total.
  PrometheusText& family(const std::string& name, const char* type, const std::string& help);
  // A sample of the family begun last.
  PrometheusText& sample(double value, const Labels& labels = {});
  PrometheusText& sample(uint64_t value, const Labels& labels = {});

  const std::string& text() const { return out_; }

 private:
  void sample_text(const std::string& value, const Labels& labels);

  std::string out_;
  std::string name_;
};

}  // namespace castscope::collector
