// The value checks inside a real CPU libtorch: the host loop and the ATen
// ops (the CUDA path's) count the same overflow, underflow, inf and NaN as
// torch's own casts produce, on contiguous and strided tensors.
#include "agent/src/numerics/value_checks.h"

#include <ATen/ATen.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "agent/src/record/cast_record.h"

namespace castscope::numerics {
namespace {

// 12 values: 2 past float16's range, 1 that rounds to 65504, 2 below its
// smallest subnormal, one exact 0, an inf and two NaN, 3 ordinary.
at::Tensor awkward_values() {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  return at::tensor({1e5f, -7e4f, 65504.f, 1e-9f, -2e-8f, 0.f, inf, nan, nan, 1.f, -2.5f, 3e-3f});
}

HostCounts aten_counts(const at::Tensor& source, const at::Tensor& result) {
  const CheckScope scope;
  const CastCheck check = check_cast(source, result);
  const int64_t* c = check.counts.data_ptr<int64_t>();
  return {c[0], c[1], c[2], c[3], c[4], check.max_abs.item<double>()};
}

TEST(ValueChecks, CastToFloat16CountsOverflowUnderflowAndNonFinite) {
  const at::Tensor source = awkward_values();
  const at::Tensor result = source.to(at::kHalf);
  HostCounts host;
  ASSERT_TRUE(count_cast_on_host(source, result, host));
  const HostCounts aten = aten_counts(source, result);
  for (const HostCounts& counts : {host, aten}) {
    EXPECT_EQ(counts.overflowed, 2);
    EXPECT_EQ(counts.underflowed, 2);
    EXPECT_EQ(counts.nonfinite, 3);
    EXPECT_EQ(counts.nan, 2);
    EXPECT_EQ(counts.max_abs, 1e5f);
  }
  EXPECT_EQ(magnitude_log2(host.max_abs), 16);
}

TEST(ValueChecks, Bfloat16KeepsFloat32sRange) {
  const at::Tensor source = awkward_values();
  HostCounts host;
  ASSERT_TRUE(count_cast_on_host(source, source.to(at::kBFloat16), host));
  EXPECT_EQ(host.overflowed, 0);
  EXPECT_EQ(host.underflowed, 0);
  EXPECT_EQ(host.nonfinite, 3);
}

TEST(ValueChecks, StridedTensorsGoThroughAtenWithTheSameCounts) {
  const at::Tensor wide = awkward_values().reshape({3, 4});
  const at::Tensor source = wide.t();  // not contiguous
  const at::Tensor result = source.to(at::kHalf);
  HostCounts host;
  EXPECT_FALSE(count_cast_on_host(source, result, host));
  const HostCounts aten = aten_counts(source, result);
  EXPECT_EQ(aten.overflowed, 2);
  EXPECT_EQ(aten.underflowed, 2);
  EXPECT_EQ(aten.nonfinite, 3);
  EXPECT_EQ(aten.nan, 2);
}

TEST(ValueChecks, ValuesCountInfAndNaNInEveryFloatingDtype) {
  for (const auto dtype : {at::kFloat, at::kHalf, at::kBFloat16, at::kDouble}) {
    const at::Tensor t = at::tensor({1.f, -std::numeric_limits<float>::infinity(), std::nanf(""), -8.f}).to(dtype);
    HostCounts host;
    ASSERT_TRUE(count_values_on_host(t, host)) << dtype;
    EXPECT_EQ(host.nonfinite, 2) << dtype;
    EXPECT_EQ(host.nan, 1) << dtype;
    EXPECT_EQ(host.max_abs, 8) << dtype;
    const CheckScope scope;
    EXPECT_EQ(check_values(t).nonfinite.item<int64_t>(), 2) << dtype;
  }
}

TEST(ValueChecks, LargeTensorsCountedInParallelChunksAgreeWithAten) {
  // Past the host loop's grain: chunks on torch's intra-op threads, summed.
  at::Tensor source = at::randn({5, 100000}) * 10;
  source.index_put_({0, at::indexing::Slice(0, 7)}, 1e5);
  source.index_put_({4, at::indexing::Slice(99990, 100000)}, 1e-9);
  source.index_put_({2, 50000}, std::nanf(""));
  const at::Tensor result = source.to(at::kHalf);
  HostCounts host;
  ASSERT_TRUE(count_cast_on_host(source, result, host));
  const HostCounts aten = aten_counts(source, result);
  EXPECT_EQ(host.overflowed, 7);
  EXPECT_EQ(host.overflowed, aten.overflowed);
  EXPECT_EQ(host.underflowed, aten.underflowed);
  EXPECT_GE(host.underflowed, 10);
  EXPECT_EQ(host.nan, 1);
  EXPECT_EQ(host.max_abs, aten.max_abs);
  HostCounts values;
  ASSERT_TRUE(count_values_on_host(result, values));
  EXPECT_EQ(values.nonfinite, 8);  // 7 inf and the NaN
}

TEST(ValueChecks, OnlyPlainDenseFloatingTensorsAreChecked) {
  EXPECT_TRUE(checkable(at::ones({2, 2})));
  EXPECT_FALSE(checkable(at::ones({2, 2}, at::kLong)));
  EXPECT_FALSE(checkable(at::ones({0})));
  EXPECT_FALSE(checkable(at::ones({2, 2}, at::TensorOptions().device(at::kMeta))));
  EXPECT_FALSE(checkable(at::Tensor()));
}

// Float8: torch 2.14 clips e4m3fn beyond 448 to +-448 (even inf), and turns
// e5m2 past its rounding edge into inf; both flush tiny values to 0.
TEST(ValueChecks, CastToFloat8CountsSaturatedValuesApartFromOverflow) {
  const float inf = std::numeric_limits<float>::infinity();
  const at::Tensor source = at::tensor({500.f, 448.f, 1e-10f, -1000.f, 100.f, inf, 60000.f, 1e6f});
  HostCounts e4m3;
  ASSERT_FALSE(count_cast_on_host(source, source.to(at::kFloat8_e4m3fn), e4m3));  // the ATen path reads float8
  e4m3 = aten_counts(source, source.to(at::kFloat8_e4m3fn));
  EXPECT_EQ(e4m3.saturated, 4);  // 500, -1000, 60000, 1e6 (448 itself is exact)
  EXPECT_EQ(e4m3.overflowed, 0);
  EXPECT_EQ(e4m3.underflowed, 1);
  EXPECT_EQ(e4m3.nonfinite, 1);
  const HostCounts e5m2 = aten_counts(source, source.to(at::kFloat8_e5m2));
  EXPECT_EQ(e5m2.saturated, 1);   // 60000 -> 57344
  EXPECT_EQ(e5m2.overflowed, 1);  // 1e6 -> inf
  EXPECT_EQ(e5m2.underflowed, 1);
  // Other casts count none: float16 rounds 65504.5 to 65504, which is not clipping.
  EXPECT_EQ(aten_counts(awkward_values(), awkward_values().to(at::kHalf)).saturated, 0);
  EXPECT_EQ(float8_max(at::kFloat8_e4m3fn), 448);
  EXPECT_EQ(float8_max(at::kFloat8_e5m2), 57344);
  EXPECT_EQ(float8_max(at::kBFloat16), 0);
}

TEST(ValueChecks, MagnitudesArePowersOfTwo) {
  EXPECT_EQ(magnitude_log2(1.0), 0);
  EXPECT_EQ(magnitude_log2(65504.0), 15);
  EXPECT_EQ(magnitude_log2(0.75), -1);
  EXPECT_EQ(magnitude_log2(0.0), kNoMagnitude);
  EXPECT_EQ(magnitude_log2(std::numeric_limits<double>::infinity()), kNoMagnitude);
}

}  // namespace
}  // namespace castscope::numerics
