// The numerics rules on run data built by hand: thresholds, phases and the
// scaler's calibration (the end-to-end cases run real torch in
// tests/integration/test_numerics.py).
#include "server/src/analysis/numerics_findings.h"

#include <gtest/gtest.h>

namespace castscope::collector {
namespace {

NumericsSiteRow cast_row(uint64_t values, uint64_t overflowed, uint64_t underflowed,
                         v1::Phase phase = v1::PHASE_FORWARD) {
  NumericsSiteRow row;
  row.site.file = "/src/model.py";
  row.site.line = 12;
  row.site.op = "aten::mm";
  row.site.arg = "self";
  row.kind = v1::NumericsSummary::KIND_CAST;
  row.src = v1::DTYPE_FLOAT32;
  row.dst = v1::DTYPE_FLOAT16;
  row.phase = phase;
  row.device = v1::DEVICE_TYPE_CPU;
  row.windows = 1;
  row.tensors = 2;
  row.values = values;
  row.overflowed = overflowed;
  row.underflowed = underflowed;
  row.max_abs_log2 = 16;
  return row;
}

std::vector<Finding> findings_of(const RunData& run) {
  std::vector<Finding> out;
  numerics_findings(run, out);
  return out;
}

TEST(NumericsFindings, OverflowIsAnErrorAtItsSiteInForwardOnly) {
  RunData run;
  run.numerics_sites = {cast_row(64, 6, 0), cast_row(64, 6, 0, v1::PHASE_BACKWARD)};
  const auto found = findings_of(run);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "cast-overflow");
  EXPECT_EQ(found[0].severity, "error");
  EXPECT_EQ(found[0].sites[0].line, 12u);
  EXPECT_EQ(found[0].evidence["overflowed"], 6);
  EXPECT_EQ(found[0].evidence["overlay"]["ops"]["aten::mm"], "fp32");
  EXPECT_EQ(found[0].summary.substr(0, 40), "6 of 64 values of `self` became inf cast");
}

TEST(NumericsFindings, UnderflowWarnsFromItsStatedFraction) {
  RunData run;
  run.numerics_sites = {cast_row(1000, 0, 9)};  // 0.9 %: below the fraction
  EXPECT_TRUE(findings_of(run).empty());
  run.numerics_sites = {cast_row(1000, 0, 10)};  // 1 %
  const auto found = findings_of(run);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "cast-underflow");
  EXPECT_EQ(found[0].severity, "warning");
}

// Each direction's fix says its own remedy: values flushed to zero are scaled
// up, never down (the overflow's advice, which made them smaller still).
TEST(NumericsFindings, EachDirectionsFixScalesTheRightWay) {
  RunData run;
  run.numerics_sites = {cast_row(64, 6, 0)};
  const auto overflow = findings_of(run);
  ASSERT_EQ(overflow.size(), 1u);
  EXPECT_NE(overflow[0].fix.find("scale the values down"), std::string::npos) << overflow[0].fix;
  EXPECT_EQ(overflow[0].fix.find("scale the values up"), std::string::npos) << overflow[0].fix;
  run.numerics_sites = {cast_row(1000, 0, 10)};
  const auto underflow = findings_of(run);
  ASSERT_EQ(underflow.size(), 1u);
  EXPECT_NE(underflow[0].fix.find("scale the values up"), std::string::npos) << underflow[0].fix;
  EXPECT_EQ(underflow[0].fix.find("scale the values down"), std::string::npos) << underflow[0].fix;
  EXPECT_EQ(underflow[0].fix.find("does not overflow"), std::string::npos) << underflow[0].fix;
}

ScalerUpdateRow update(uint64_t n, double scale, bool skipped) {
  ScalerUpdateRow row;
  row.agent_id = "agent";
  row.seq = 100 + n;
  row.updates = n;
  row.scale = scale;
  row.found_inf = skipped;
  row.site.file = "/src/train.py";
  row.site.line = 40;
  return row;
}

TEST(NumericsFindings, SkipsWhileTheScaleCalibratesAreInfo) {
  RunData run;
  run.scaler_updates = {update(1, 32768, true), update(2, 16384, true), update(3, 16384, false)};
  for (uint64_t n = 4; n < 200; ++n) run.scaler_updates.push_back(update(n, 16384, false));
  const auto found = findings_of(run);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].kind, "scaler-skips");
  EXPECT_EQ(found[0].severity, "info");
  EXPECT_EQ(found[0].evidence["calibration_skips"], 2);
  EXPECT_EQ(found[0].sites.size(), 1u);  // no window saw a non-finite value: the update line alone
}

TEST(NumericsFindings, RecurringSkipsWarnWithTheFirstNonFiniteOpFirst) {
  RunData run;
  for (uint64_t n = 1; n <= 40; ++n) run.scaler_updates.push_back(update(n, 256.0 / (1 << (n / 7)), n % 7 == 0));
  FirstNonfinite first;
  first.agent_id = "agent";
  first.seq = 7;
  first.kind = v1::NumericsSummary::KIND_OP_OUTPUT;
  first.site.file = "/src/model.py";
  first.site.line = 26;
  first.site.op = "aten::linear";
  run.first_nonfinite = {first};
  const auto found = findings_of(run);
  ASSERT_EQ(found.size(), 1u);
  EXPECT_EQ(found[0].severity, "warning");
  EXPECT_EQ(found[0].evidence["skipped"], 5);
  EXPECT_EQ(found[0].evidence["updates"], 40);
  ASSERT_EQ(found[0].sites.size(), 2u);
  EXPECT_EQ(found[0].sites[0].line, 26u);
  EXPECT_EQ(found[0].sites[1].line, 40u);
  EXPECT_NE(found[0].summary.find("the first non-finite value came from aten::linear at /src/model.py:26"),
            std::string::npos);
}

TEST(NumericsFindings, ACleanRunRaisesNothing) {
  RunData run;
  run.numerics_sites = {cast_row(64, 0, 0)};
  for (uint64_t n = 1; n <= 40; ++n) run.scaler_updates.push_back(update(n, 256, false));
  EXPECT_TRUE(findings_of(run).empty());
}

}  // namespace
}  // namespace castscope::collector
