#include "agent/src/gpu/gemm_scope.h"

namespace castscope {
namespace gpu_detail {
std::atomic<bool> g_gemm_logging{false};
thread_local OpFields* t_gemm_op = nullptr;
}  // namespace gpu_detail

bool note_gemm(GemmCompute compute, DType a, DType b, DType d) noexcept {
  OpFields* op = gpu_detail::t_gemm_op;
  if (op == nullptr) return false;
  if (op->gemm_calls == 0) {
    op->gemm_compute = compute;
    op->gemm_a = a;
    op->gemm_b = b;
    op->gemm_d = d;
  } else if (op->gemm_compute != compute || op->gemm_a != a) {
    op->gemm_mixed = true;
  }
  if (op->gemm_calls < 255) ++op->gemm_calls;
  return true;
}

}  // namespace castscope
