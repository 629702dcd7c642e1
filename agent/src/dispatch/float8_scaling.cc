#include "agent/src/dispatch/float8_scaling.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "agent/src/numerics/value_checks.h"

namespace castscope {
namespace {

int16_t floor_log2(double x) { return static_cast<int16_t>(std::floor(std::log2(x))); }

}  // namespace

void describe_float8_scaling(const Float8Scope& scope, c10::ScalarType target, CastFields& cast) {
  const double max = numerics::float8_max(target);
  if (max == 0 || scope.scale == nullptr || scope.scale_numel == 0) return;
  double smallest = std::numeric_limits<double>::infinity(), largest = 0;  // finite, nonzero scales
  double smallest_amax = std::numeric_limits<double>::infinity(), largest_amax = 0;  // nonzero amaxes
  uint64_t zero_amax = 0;
  for (uint64_t i = 0; i < scope.scale_numel; ++i) {
    const double scale = scope.scale[i];
    // An infinite, NaN, zero or negative scale says no amax; a tiny amax is the maker's floor for zero.
    const bool usable = std::isfinite(scale) && scale > 0;
    if (usable) {
      smallest = std::min(smallest, scale);
      largest = std::max(largest, scale);
    }
    const double amax = usable ? max / scale : 0;
    if (amax <= kZeroAmax) {
      ++zero_amax;
    } else {
      smallest_amax = std::min(smallest_amax, amax);
      largest_amax = std::max(largest_amax, amax);
    }
  }
  cast.float8_scaled = true;
  cast.zero_amax = static_cast<uint16_t>(std::min<uint64_t>(zero_amax, std::numeric_limits<uint16_t>::max()));
  const bool any_scale = largest > 0;
  cast.float8_log2[kScaleLog2Min] = any_scale ? floor_log2(smallest) : kNoMagnitude;
  cast.float8_log2[kScaleLog2Max] = any_scale ? floor_log2(largest) : kNoMagnitude;
  // Over the nonzero amaxes (zero ones are counted in zero_amax); none when all were zero.
  cast.float8_log2[kAmaxLog2Min] = largest_amax > 0 ? floor_log2(smallest_amax) : kNoMagnitude;
  cast.float8_log2[kAmaxLog2Max] = largest_amax > 0 ? floor_log2(largest_amax) : kNoMagnitude;
}

}  // namespace castscope
