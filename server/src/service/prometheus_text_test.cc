#include "server/src/service/prometheus_text.h"

#include <gtest/gtest.h>

namespace castscope::collector {
namespace {

TEST(PrometheusText, FamiliesHaveHelpAndTypeAndEscapedLabels) {
  PrometheusText text;
  text.family("castscope_x_total", "counter", "What\\it counts,\nper line.")
      .sample(uint64_t{3}, {{"reason", "a\"b\\c\nd"}})
      .sample(uint64_t{0}, {{"reason", "plain"}, {"kind", "k"}});
  text.family("castscope_seconds_total", "counter", "Time.").sample(1.5);
  EXPECT_EQ(text.text(),
            "# HELP castscope_x_total What\\\\it counts,\\nper line.\n"
            "# TYPE castscope_x_total counter\n"
            "castscope_x_total{reason=\"a\\\"b\\\\c\\nd\"} 3\n"
            "castscope_x_total{reason=\"plain\",kind=\"k\"} 0\n"
            "# HELP castscope_seconds_total Time.\n"
            "# TYPE castscope_seconds_total counter\n"
            "castscope_seconds_total 1.5\n");
}

}  // namespace
}  // namespace castscope::collector
