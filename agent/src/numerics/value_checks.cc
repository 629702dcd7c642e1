#include "agent/src/numerics/value_checks.h"

#include <ATen/ATen.h>
#include <ATen/TensorSubclassLikeUtils.h>

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

int16_t magnitude_log2(double x) {
  if (!(x > 0) || !std::isfinite(x)) return kNoMagnitude;
  int exponent = 0;
  std::frexp(x, &exponent);  // x = m * 2^exponent, 0.5 <= m < 1
  return static_cast<int16_t>(exponent - 1);
}

}  // namespace castscope::numerics
