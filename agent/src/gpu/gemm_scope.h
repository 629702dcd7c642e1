// The hot path's side of GEMM precision: while an autocast op runs, its
// record is the thread's "current op", so cuBLASLt's logger callback (which
// runs on the thread that called the matmul, inside the op) can write what
// the matmul really computed in into that op's record (cublaslt_logger.h).
//
// Costs one relaxed load when the logger is off.
#pragma once

#include <atomic>

#include "agent/src/record/cast_record.h"

namespace castscope {

namespace gpu_detail {
extern std::atomic<bool> g_gemm_logging;
extern thread_local OpFields* t_gemm_op;
}  // namespace gpu_detail

class GemmScope {
 public:
  explicit GemmScope(OpFields* op) noexcept
      : active_(op != nullptr && gpu_detail::g_gemm_logging.load(std::memory_order_relaxed)) {
    if (active_) {
      previous_ = gpu_detail::t_gemm_op;
      gpu_detail::t_gemm_op = op;
    }
  }
  ~GemmScope() {
    if (active_) gpu_detail::t_gemm_op = previous_;
  }
  GemmScope(const GemmScope&) = delete;
  GemmScope& operator=(const GemmScope&) = delete;

 private:
  const bool active_;
  OpFields* previous_ = nullptr;
};

// A matmul as the logger described it. Returns whether it ran inside an
// autocast op (and went into its record); false: outside any.
bool note_gemm(GemmCompute compute, DType a, DType b, DType d) noexcept;

}  // namespace castscope
