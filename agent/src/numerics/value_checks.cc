#include "agent/src/numerics/value_checks.h"

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <ATen/TensorSubclassLikeUtils.h>
#include <c10/util/Float8_e4m3fn.h>
#include <c10/util/Float8_e4m3fnuz.h>
#include <c10/util/Float8_e5m2.h>
#include <c10/util/Float8_e5m2fnuz.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "agent/src/context/autocast_keys.h"
#include "agent/src/record/cast_record.h"

namespace castscope::numerics {
namespace {

c10::DispatchKeySet excluded_keys() {
  c10::DispatchKeySet keys{c10::DispatchKey::Python, c10::DispatchKey::PythonTLSSnapshot};
  for (const auto& device : kAutocastDevices) keys = keys.add(device.key);
  return keys;
}

// |t| where t is finite, 0 elsewhere; its maximum as a float32 scalar.
at::Tensor finite_max_abs(const at::Tensor& t, const at::Tensor& finite) {
  return at::where(finite, t.abs(), at::zeros({}, t.options())).amax().to(at::kFloat);
}

}  // namespace

bool checkable(const at::Tensor& t) {
  if (!t.defined() || t.layout() != c10::kStrided || !t.is_floating_point() || t.numel() == 0) return false;
  if (!(t.is_cpu() || t.is_cuda())) return false;
  if (t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return false;
  // Python subclasses and fake tensors, functorch wrappers, functional
  // tensors, conjugate/negative/zero views.
  if (at::isTensorSubclassLike(t)) return false;
  return !t.key_set().has(c10::DispatchKey::Functionalize);
}

CheckScope::CheckScope() : no_python_or_autocast(excluded_keys()) {}

CastCheck check_cast(const at::Tensor& source, const at::Tensor& result) {
  const at::Tensor finite = source.isfinite();
  const double max = float8_max(result.scalar_type());
  // float8 has few ops of its own: its values are read widened (exactly).
  const at::Tensor converted = max > 0 ? result.to(at::kFloat) : result;
  // A finite value that comes out NaN overflowed too: the fnuz float8 formats have no inf.
  const at::Tensor overflowed = ((converted.isinf() | converted.isnan()) & finite).sum();
  const at::Tensor underflowed = ((converted == 0) & (source != 0)).sum();
  const at::Tensor nonfinite = (~finite).sum();
  const at::Tensor nan = source.isnan().sum();
  const at::Tensor saturated = max > 0 ? (finite & (source.abs() > max) & converted.isfinite()).sum()
                                       : at::zeros({}, nan.options());
  return {at::stack({overflowed, underflowed, nonfinite, nan, saturated}), finite_max_abs(source, finite)};
}

double float8_max(c10::ScalarType dtype) {
  switch (dtype) {
    case c10::ScalarType::Float8_e4m3fn:
      return static_cast<double>(std::numeric_limits<c10::Float8_e4m3fn>::max());
    case c10::ScalarType::Float8_e5m2:
      return static_cast<double>(std::numeric_limits<c10::Float8_e5m2>::max());
    case c10::ScalarType::Float8_e4m3fnuz:
      return static_cast<double>(std::numeric_limits<c10::Float8_e4m3fnuz>::max());
    case c10::ScalarType::Float8_e5m2fnuz:
      return static_cast<double>(std::numeric_limits<c10::Float8_e5m2fnuz>::max());
    default:
      return 0;  // e8m0 holds scales, not scaled data
  }
}

ValueCheck check_values(const at::Tensor& t) {
  const at::Tensor finite = t.isfinite();
  return {(~finite).sum(), finite_max_abs(t, finite)};
}

namespace {

// The loops read IEEE-754 bits, not values: integer compares and adds the
// compiler vectorizes, and for non-negative floats the order of the bits is
// the order of the values (so the largest |x| is a max over bits).
struct Format {
  uint32_t abs_mask, inf;  // |x|'s bits, and +inf's
};
constexpr Format kFloat32{0x7fffffffu, 0x7f800000u};
constexpr Format kFloat16{0x7fffu, 0x7c00u};
constexpr Format kBfloat16{0x7fffu, 0x7f80u};

template <typename Bits>
const Bits* bits_of(const at::Tensor& t) {
  return reinterpret_cast<const Bits*>(t.const_data_ptr());
}

float float_of(uint32_t bits) {
  float value = 0;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}


// Counts over [begin, end) into `out` (one chunk, at most 2^32 elements;
// chunks are summed after). Masks are template arguments and the sums 32-bit
// so that the loop vectorizes.
template <uint32_t kLowMask, uint32_t kLowInf>
void count_cast_chunk(const uint32_t* __restrict source, const uint16_t* __restrict result, int64_t begin,
                      int64_t end, HostCounts& out) {
  uint32_t overflowed = 0, underflowed = 0, nonfinite = 0, nan = 0, max_bits = 0;
  for (int64_t i = begin; i < end; ++i) {
    const uint32_t x = source[i] & kFloat32.abs_mask;
    const uint32_t y = static_cast<uint32_t>(result[i]) & kLowMask;
    const uint32_t finite = x < kFloat32.inf;
    nonfinite += 1 - finite;
    nan += x > kFloat32.inf;
    overflowed += finite & (y == kLowInf);
    underflowed += finite & (x != 0) & (y == 0);
    max_bits = std::max(max_bits, x & (0u - finite));  // a mask, not a select: the loop vectorizes
  }
  out.overflowed += overflowed;
  out.underflowed += underflowed;
  out.nonfinite += nonfinite;
  out.nan += nan;
  out.max_abs = std::max<double>(out.max_abs, float_of(max_bits));
}

template <typename Bits, uint32_t kMask, uint32_t kInf>
void count_values_chunk(const Bits* __restrict values, int64_t begin, int64_t end, HostCounts& out) {
  uint32_t nonfinite = 0, nan = 0, max_bits = 0;
  for (int64_t i = begin; i < end; ++i) {
    const uint32_t x = static_cast<uint32_t>(values[i]) & kMask;
    const uint32_t finite = x < kInf;
    nonfinite += 1 - finite;
    nan += x > kInf;
    max_bits = std::max(max_bits, x & (0u - finite));  // a mask, not a select: the loop vectorizes
  }
  out.nonfinite += nonfinite;
  out.nan += nan;
  const double max_abs = kInf == kFloat32.inf ? float_of(max_bits)
                         : kInf == kBfloat16.inf
                             ? float_of(max_bits << 16)  // bfloat16 widens exactly to float32
                             : static_cast<float>(c10::Half(static_cast<uint16_t>(max_bits), c10::Half::from_bits()));
  out.max_abs = std::max(out.max_abs, max_abs);
}

// Runs `chunk(begin, end, counts)` over [0, n) on torch's intra-op threads
// (large tensors only) and sums the chunks' counts.
template <typename Chunk>
HostCounts parallel_counts(int64_t n, Chunk&& chunk) {
  constexpr int64_t kGrain = int64_t{1} << 16;
  if (n <= kGrain) {
    HostCounts out;
    chunk(0, n, out);
    return out;
  }
  std::vector<HostCounts> parts(static_cast<size_t>((n + kGrain - 1) / kGrain));
  at::parallel_for(0, static_cast<int64_t>(parts.size()), 1, [&](int64_t first, int64_t last) {
    for (int64_t part = first; part < last; ++part)
      chunk(part * kGrain, std::min(n, (part + 1) * kGrain), parts[static_cast<size_t>(part)]);
  });
  HostCounts out;
  for (const HostCounts& part : parts) {
    out.overflowed += part.overflowed;
    out.underflowed += part.underflowed;
    out.nonfinite += part.nonfinite;
    out.nan += part.nan;
    out.max_abs = std::max(out.max_abs, part.max_abs);
  }
  return out;
}

void add(HostCounts& into, const HostCounts& counts) {
  into.overflowed += counts.overflowed;
  into.underflowed += counts.underflowed;
  into.nonfinite += counts.nonfinite;
  into.nan += counts.nan;
  into.max_abs = std::max(into.max_abs, counts.max_abs);
}

}  // namespace

bool count_cast_on_host(const at::Tensor& source, const at::Tensor& result, HostCounts& out) {
  if (!source.is_cpu() || !result.is_cpu() || source.scalar_type() != at::kFloat || !source.is_contiguous() ||
      !result.is_contiguous() || source.numel() != result.numel())
    return false;
  const uint32_t* from = bits_of<uint32_t>(source);
  const uint16_t* to = bits_of<uint16_t>(result);
  if (result.scalar_type() == at::kHalf) {
    add(out, parallel_counts(source.numel(), [&](int64_t begin, int64_t end, HostCounts& part) {
          count_cast_chunk<kFloat16.abs_mask, kFloat16.inf>(from, to, begin, end, part);
        }));
    return true;
  }
  if (result.scalar_type() == at::kBFloat16) {
    add(out, parallel_counts(source.numel(), [&](int64_t begin, int64_t end, HostCounts& part) {
          count_cast_chunk<kBfloat16.abs_mask, kBfloat16.inf>(from, to, begin, end, part);
        }));
    return true;
  }
  return false;
}

bool count_values_on_host(const at::Tensor& t, HostCounts& out) {
  if (!t.is_cpu() || !t.is_contiguous()) return false;
  const int64_t n = t.numel();
  switch (t.scalar_type()) {
    case at::kFloat:
      add(out, parallel_counts(n, [&](int64_t b, int64_t e, HostCounts& p) {
            count_values_chunk<uint32_t, kFloat32.abs_mask, kFloat32.inf>(bits_of<uint32_t>(t), b, e, p);
          }));
      return true;
    case at::kHalf:
      add(out, parallel_counts(n, [&](int64_t b, int64_t e, HostCounts& p) {
            count_values_chunk<uint16_t, kFloat16.abs_mask, kFloat16.inf>(bits_of<uint16_t>(t), b, e, p);
          }));
      return true;
    case at::kBFloat16:
      add(out, parallel_counts(n, [&](int64_t b, int64_t e, HostCounts& p) {
            count_values_chunk<uint16_t, kBfloat16.abs_mask, kBfloat16.inf>(bits_of<uint16_t>(t), b, e, p);
          }));
      return true;
    case at::kDouble: {
      // Rare under autocast: a plain loop over values.
      const double* values = t.const_data_ptr<double>();
      for (int64_t i = 0; i < n; ++i) {
        if (!std::isfinite(values[i])) {
          ++out.nonfinite;
          out.nan += std::isnan(values[i]);
        } else {
          out.max_abs = std::max(out.max_abs, std::fabs(values[i]));
        }
      }
      return true;
    }
    default:
      return false;
  }
}

int16_t magnitude_log2(double x) {
  if (!(x > 0) || !std::isfinite(x)) return kNoMagnitude;
  int exponent = 0;
  std::frexp(x, &exponent);  // x = m * 2^exponent, 0.5 <= m < 1
  return static_cast<int16_t>(exponent - 1);
}

}  // namespace castscope::numerics
