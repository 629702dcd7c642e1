// A C++ libtorch program using CPU autocast, for `castscope run` without
// Python: a few matmuls and a loss under bf16 autocast.
#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>

#include <cstdio>

int main() {
  at::manual_seed(0);
  const at::Tensor x = at::randn({8, 8});
  const at::Tensor w = at::randn({8, 8}).set_requires_grad(true);
  at::autocast::set_autocast_enabled(at::kCPU, true);
  at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  at::Tensor y;
  for (int step = 0; step < 3; ++step) y = at::mm(x, w);
  const at::Tensor loss = at::mse_loss(y, at::zeros_like(y));
  at::autocast::set_autocast_enabled(at::kCPU, false);
  at::autocast::clear_cache();
  std::printf("y %s, loss %s\n", at::toString(y.scalar_type()), at::toString(loss.scalar_type()));
  return 0;
}
