// A stand-in cuBLASLt: the logger entry points castscope calls, with
// cuBLASLt's own types (the wheel's cublasLt.h), and one test hook that logs
// a message the way the real library does (observed on an H100, docs/gpu.md):
// to the callback when one is set, and printed to the log file, or to stdout
// when none is set, whenever the message's level is in the mask.
//
//   standin_cublaslt_log(2, "cublasLtMatmul", "A=0X1 Adesc=[type=R_32F ...] ... computeDesc=[computeType=...]")
//
// Loaded by the agent's real dlopen path (RTLD_NOLOAD: the test loads it
// first, as torch loads the real one).
#include <cublasLt.h>

#include <cstdio>

namespace {
cublasLtLoggerCallback_t g_callback = nullptr;
int g_mask = 0;
FILE* g_file = nullptr;
int g_set_file_calls = 0;
}  // namespace

extern "C" {

cublasStatus_t cublasLtLoggerSetCallback(cublasLtLoggerCallback_t callback) {
  g_callback = callback;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtLoggerSetMask(int mask) {
  if (mask < 0 || mask > 31) return CUBLAS_STATUS_INVALID_VALUE;
  g_mask = mask;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtLoggerSetLevel(int level) {
  if (level < 0 || level > 5) return CUBLAS_STATUS_INVALID_VALUE;
  g_mask = (1 << level) - 1;
  return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtLoggerSetFile(FILE* file) {
  g_file = file;
  ++g_set_file_calls;
  return CUBLAS_STATUS_SUCCESS;
}

size_t cublasLtGetVersion() { return 130100; }

// Test hooks.
void standin_cublaslt_log(int level, const char* function, const char* message) {
  if (level < 1 || (g_mask & (1 << (level - 1))) == 0) return;
  if (g_callback != nullptr) g_callback(level, function, message);
  std::fprintf(g_file != nullptr ? g_file : stdout, "[standin][cublasLt][%d][%s] %s\n", level, function, message);
  std::fflush(g_file != nullptr ? g_file : stdout);
}

int standin_cublaslt_mask() { return g_mask; }
int standin_cublaslt_has_callback() { return g_callback != nullptr; }

}  // extern "C"
