#include "server/src/service/prometheus_text.h"

#include <charconv>
#include <cmath>
#include <system_error>

namespace castscope::collector {

namespace {

std::string escaped(const std::string& text, bool quote) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '"' && quote) out += "\\\"";
    else out += c;
  }
  return out;
}

}  // namespace

PrometheusText& PrometheusText::family(const std::string& name, const char* type, const std::string& help) {
  name_ = name;
  out_ += "# HELP " + name + " " + escaped(help, false) + "\n";
  out_ += "# TYPE " + name + " " + type + "\n";
  return *this;
}

PrometheusText& PrometheusText::sample(double value, const Labels& labels) {
  if (std::isnan(value)) {
    sample_text("NaN", labels);
    return *this;
  }
  char text[32];
  const auto [end, error] = std::to_chars(text, text + sizeof text, value);  // the shortest exact form
  sample_text(error == std::errc() ? std::string(text, end) : std::string("NaN"), labels);
  return *this;
}

PrometheusText& PrometheusText::sample(uint64_t value, const Labels& labels) {
  sample_text(std::to_string(value), labels);
  return *this;
}

void PrometheusText::sample_text(const std::string& value, const Labels& labels) {
  out_ += name_;
  if (!labels.empty()) {
    out_ += '{';
    for (size_t i = 0; i < labels.size(); ++i) {
      if (i > 0) out_ += ',';
      out_ += labels[i].first + "=\"" + escaped(labels[i].second, true) + "\"";
    }
    out_ += '}';
  }
  out_ += ' ' + value + '\n';
}

}  // namespace castscope::collector
