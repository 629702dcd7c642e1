// What a cast or an op did to values, as small tensors on the values' own
// device. The checks are ATen ops: they queue on the device like the job's
// own work and never read a value back, so on CUDA the caller adds them to a
// device accumulator and reads it once, at the window's end (no host
// synchronisation inside a window); on the CPU it reads them at once.
// Only counts and magnitudes come out, never tensor contents.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/core/GradMode.h>

#include "agent/src/gpu/launch_scope.h"

namespace castscope::numerics {

// Whether castscope looks at a tensor's values: a dense, non-empty floating
// tensor with real storage on the CPU or a CUDA device. Not meta, fake,
// functional or batched tensors, nor Python subclasses (their values are not
// what the op computes on, or reading them runs the user's code).
bool checkable(const at::Tensor& t);

// Around the checks' own ops: no autograd graph, no autocast, no Python
// dispatch modes or subclasses (the user's TorchDispatchMode must not see
// castscope's reads), and with GPU timing on their kernels under castscope's
// own launch id, not the op's (seen on an H100: ~145 check kernels per
// `linear` in a window were timed as the op's).
struct CheckScope {
  CheckScope();
  c10::AutoGradMode no_grad{false};
  c10::impl::ExcludeDispatchKeyGuard no_python_or_autocast;
  LaunchScope own_kernels{true, kCastscopeOwnLaunchId};
};

// Casting `source` to a lower precision gave `result` (same shape).
// counts: int64 [overflowed, underflowed, nonfinite, nan, saturated] — finite
// source values that became +-inf (or NaN: float8's fnuz formats), nonzero ones that became 0, source values
// already inf or NaN, of those NaN, and (float8 results) finite values beyond
// the format's largest that came out finite (clipped). max_abs: float32
// scalar, the largest |x| over the finite source values (0 when none).
struct CastCheck {
  at::Tensor counts;
  at::Tensor max_abs;
};
CastCheck check_cast(const at::Tensor& source, const at::Tensor& result);

// nonfinite: int64 scalar, values of `t` that are inf or NaN; max_abs as above.
struct ValueCheck {
  at::Tensor nonfinite;
  at::Tensor max_abs;
};
ValueCheck check_values(const at::Tensor& t);

// The same counts read on the host in one pass over contiguous CPU data
// (float32 -> float16/bfloat16 casts; float32/float16/bfloat16/float64
// values), with no ATen op: on the CPU the checks cost a loop, not a dozen
// small ops. False when the tensors are not such (the caller falls back to
// the ATen checks above).
struct HostCounts {
  int64_t overflowed = 0, underflowed = 0, nonfinite = 0, nan = 0, saturated = 0;
  double max_abs = 0;
};
bool count_cast_on_host(const at::Tensor& source, const at::Tensor& result, HostCounts& out);
bool count_values_on_host(const at::Tensor& t, HostCounts& out);

// The largest finite value of a float8 dtype; 0 for any other dtype.
double float8_max(c10::ScalarType dtype);

// floor(log2(x)) for x > 0 and finite; kNoMagnitude (cast_record.h) otherwise.
int16_t magnitude_log2(double x);

}  // namespace castscope::numerics
