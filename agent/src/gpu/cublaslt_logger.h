// GEMM precision, exactly: cuBLASLt's logger callback (opt-in, agent config
// `cublaslt_logger`; docs/gpu.md, "GEMM precision"). cuBLASLt describes every
// matmul it runs (cuBLAS's own matmuls run through it too) in a "Trace"
// message on the calling thread, so the autocast op running on that thread
// (gemm_scope.h) gets the compute type and matrix types of its matmuls.
//
// The logger is process-wide and marked experimental by NVIDIA, hence
// opt-in. It is never loaded by castscope: only a cuBLASLt the process has
// already loaded (torch's) is used, found with RTLD_NOLOAD. cuBLASLt still
// prints what it logs unless given a file, so castscope gives it /dev/null.
// A job that turned cuBLASLt logging on itself (CUBLASLT_LOG_LEVEL, _MASK,
// _FILE) is left alone. The job's calls to cublasLtLoggerSetCallback,
// SetMask, SetLevel, SetFile and OpenFile that resolve against castscope's
// library (an LD_PRELOAD attach) are always remembered and chained: its
// callback and file get the levels it asked for, and get them back at stop.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace castscope {

struct CublasLtLoggerStats {
  uint64_t matmuls_in_ops = 0;       // described into an autocast op's record
  uint64_t matmuls_outside_ops = 0;  // backward, optimizer, code outside autocast
  uint64_t tf32_outside_ops = 0;     // of those, float32 matmuls computed as TF32
  uint64_t unread = 0;               // matmul trace messages castscope could not read
};

// Where the loaded cuBLASLt may be: `configured` alone when set, else the
// torch wheel's nvidia/cu13/lib beside `torch_dir`, then the loader's names.
std::vector<std::string> cublaslt_candidates(const std::string& configured, const std::string& torch_dir);

// "on", or "off: <why>" (the job continues either way).
std::string cublaslt_logger_start(const std::vector<std::string>& candidates);
void cublaslt_logger_stop();
std::string cublaslt_logger_state();  // "" when never asked
CublasLtLoggerStats cublaslt_logger_stats();

}  // namespace castscope
