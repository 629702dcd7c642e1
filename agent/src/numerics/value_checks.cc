#include "agent/src/numerics/value_checks.h"

#include <ATen/ATen.h>
#include <ATen/TensorSubclassLikeUtils.h>

#include <algorithm>
#include <cmath>

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
  const at::Tensor overflowed = (result.isinf() & finite).sum();
  const at::Tensor underflowed = ((result == 0) & (source != 0)).sum();
  const at::Tensor nonfinite = (~finite).sum();
  const at::Tensor nan = source.isnan().sum();
  return {at::stack({overflowed, underflowed, nonfinite, nan}), finite_max_abs(source, finite)};
}

ValueCheck check_values(const at::Tensor& t) {
  const at::Tensor finite = t.isfinite();
  return {(~finite).sum(), finite_max_abs(t, finite)};
}

namespace {

template <typename Low>
void count_cast(const float* source, const Low* result, int64_t n, HostCounts& out) {
  float max_abs = 0;
  for (int64_t i = 0; i < n; ++i) {
    const float x = source[i];
    const float y = static_cast<float>(result[i]);
    if (!std::isfinite(x)) {
      ++out.nonfinite;
      out.nan += std::isnan(x);
      continue;
    }
    const float a = std::fabs(x);
    max_abs = a > max_abs ? a : max_abs;
    out.overflowed += std::isinf(y);
    out.underflowed += (y == 0) & (x != 0);
  }
  out.max_abs = std::max<double>(out.max_abs, max_abs);
}

template <typename T>
void count_values(const T* values, int64_t n, HostCounts& out) {
  double max_abs = 0;
  for (int64_t i = 0; i < n; ++i) {
    const double x = static_cast<double>(values[i]);
    if (!std::isfinite(x)) {
      ++out.nonfinite;
      out.nan += std::isnan(x);
      continue;
    }
    const double a = std::fabs(x);
    max_abs = a > max_abs ? a : max_abs;
  }
  out.max_abs = std::max(out.max_abs, max_abs);
}

}  // namespace

bool count_cast_on_host(const at::Tensor& source, const at::Tensor& result, HostCounts& out) {
  if (!source.is_cpu() || !result.is_cpu() || source.scalar_type() != at::kFloat || !source.is_contiguous() ||
      !result.is_contiguous() || source.numel() != result.numel())
    return false;
  const float* from = source.const_data_ptr<float>();
  if (result.scalar_type() == at::kHalf) {
    count_cast(from, result.const_data_ptr<c10::Half>(), source.numel(), out);
  } else if (result.scalar_type() == at::kBFloat16) {
    count_cast(from, result.const_data_ptr<c10::BFloat16>(), source.numel(), out);
  } else {
    return false;
  }
  return true;
}

bool count_values_on_host(const at::Tensor& t, HostCounts& out) {
  if (!t.is_cpu() || !t.is_contiguous()) return false;
  switch (t.scalar_type()) {
    case at::kFloat: count_values(t.const_data_ptr<float>(), t.numel(), out); return true;
    case at::kHalf: count_values(t.const_data_ptr<c10::Half>(), t.numel(), out); return true;
    case at::kBFloat16: count_values(t.const_data_ptr<c10::BFloat16>(), t.numel(), out); return true;
    case at::kDouble: count_values(t.const_data_ptr<double>(), t.numel(), out); return true;
    default: return false;
  }
}

int16_t magnitude_log2(double x) {
  if (!(x > 0) || !std::isfinite(x)) return kNoMagnitude;
  int exponent = 0;
  std::frexp(x, &exponent);  // x = m * 2^exponent, 0.5 <= m < 1
  return static_cast<int16_t>(exponent - 1);
}

}  // namespace castscope::numerics
