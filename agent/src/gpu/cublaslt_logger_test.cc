// The cuBLASLt logger against the stand-in cuBLASLt
// (tests/stand_ins/cublaslt), loaded first as torch loads the real one, then
// found by the logger's real RTLD_NOLOAD path.
#include "agent/src/gpu/cublaslt_logger.h"

#include <cublasLt.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "agent/src/gpu/gemm_scope.h"

namespace castscope {
namespace {

constexpr const char* kTf32Trace =
    "A=0X1 Adesc=[type=R_32F rows=64 cols=64 ld=64] B=0X2 Bdesc=[type=R_32F rows=64 cols=64 ld=64] C=0X3 "
    "Cdesc=[type=R_32F rows=64 cols=64 ld=64] D=0X3 Ddesc=[type=R_32F rows=64 cols=64 ld=64] "
    "computeDesc=[computeType=COMPUTE_32F_FAST_TF32 scaleType=R_32F] algo=[algoId=55]";
constexpr const char* kBf16Trace =
    "A=0X1 Adesc=[type=R_16BF rows=64 cols=64 ld=64] B=0X2 Bdesc=[type=R_16BF rows=64 cols=64 ld=64] C=0X3 "
    "Cdesc=[type=R_16BF rows=64 cols=64 ld=64] D=0X3 Ddesc=[type=R_16BF rows=64 cols=64 ld=64] "
    "computeDesc=[computeType=COMPUTE_32F scaleType=R_32F] algo=[algoId=66]";

class StandIn {
 public:
  StandIn() : handle_(dlopen(CASTSCOPE_STANDIN_CUBLASLT, RTLD_NOW | RTLD_LOCAL)) {
    log_ = reinterpret_cast<void (*)(int, const char*, const char*)>(dlsym(handle_, "standin_cublaslt_log"));
    mask_ = reinterpret_cast<int (*)()>(dlsym(handle_, "standin_cublaslt_mask"));
    has_callback_ = reinterpret_cast<int (*)()>(dlsym(handle_, "standin_cublaslt_has_callback"));
  }
  ~StandIn() { dlclose(handle_); }
  void log(int level, const char* function, const char* message) { log_(level, function, message); }
  int mask() { return mask_(); }
  bool has_callback() { return has_callback_() != 0; }

 private:
  void* handle_;
  void (*log_)(int, const char*, const char*) = nullptr;
  int (*mask_)() = nullptr;
  int (*has_callback_)() = nullptr;
};

std::vector<std::string> g_user_messages;
void user_callback(int level, const char* function, const char*) {
  g_user_messages.push_back(std::to_string(level) + ":" + function);
}

TEST(CublasLtLogger, DescribesTheMatmulsOfTheRunningOpAndCountsTheRest) {
  StandIn standin;
  ASSERT_EQ(cublaslt_logger_start({"/nonexistent/libcublasLt.so.13", CASTSCOPE_STANDIN_CUBLASLT}), "on");
  EXPECT_EQ(standin.mask() & 2, 2);  // the performance trace
  EXPECT_TRUE(standin.has_callback());
  const CublasLtLoggerStats before = cublaslt_logger_stats();

  OpFields op{};
  {
    const GemmScope scope(&op);
    standin.log(2, "cublasLtMatmul", kBf16Trace);
    standin.log(5, "cublasLtMatmul", "A=0X1 Adesc=0X2");  // the API line: not asked for, not read
    standin.log(2, "cublasLtMatmul", kBf16Trace);
  }
  EXPECT_EQ(op.gemm_calls, 2);
  EXPECT_EQ(op.gemm_compute, GemmCompute::k32F);
  EXPECT_EQ(op.gemm_a, DType::kBfloat16);
  EXPECT_EQ(op.gemm_d, DType::kBfloat16);
  EXPECT_FALSE(op.gemm_mixed);

  standin.log(2, "cublasLtSSSMatmul", kTf32Trace);  // no op running: backward, optimizer, fp32 code
  standin.log(2, "cublasLtMatmul", "A=0X1 computeDesc=[scaleType=R_32F]");
  const CublasLtLoggerStats after = cublaslt_logger_stats();
  EXPECT_EQ(after.matmuls_in_ops - before.matmuls_in_ops, 2u);
  EXPECT_EQ(after.matmuls_outside_ops - before.matmuls_outside_ops, 1u);
  EXPECT_EQ(after.tf32_outside_ops - before.tf32_outside_ops, 1u);
  EXPECT_EQ(after.unread - before.unread, 1u);

  OpFields mixed{};
  {
    const GemmScope scope(&mixed);
    standin.log(2, "cublasLtMatmul", kBf16Trace);
    standin.log(2, "cublasLtSSSMatmul", kTf32Trace);
  }
  EXPECT_EQ(mixed.gemm_calls, 2);
  EXPECT_EQ(mixed.gemm_a, DType::kBfloat16);
  EXPECT_TRUE(mixed.gemm_mixed);

  cublaslt_logger_stop();
  EXPECT_EQ(cublaslt_logger_state(), "off: stopped");
  EXPECT_EQ(standin.mask(), 0);
  EXPECT_FALSE(standin.has_callback());
  OpFields after_stop{};
  {
    const GemmScope scope(&after_stop);
    standin.log(2, "cublasLtMatmul", kBf16Trace);
  }
  EXPECT_EQ(after_stop.gemm_calls, 0);
}

std::string read_all(FILE* file) {
  std::fflush(file);
  std::rewind(file);
  std::string out;
  char buffer[512];
  while (size_t n = std::fread(buffer, 1, sizeof(buffer), file)) out.append(buffer, n);
  return out;
}

TEST(CublasLtLogger, ChainsTheJobsCallbackMaskAndFileAndHandsThemBack) {
  StandIn standin;
  ASSERT_EQ(cublaslt_logger_start({CASTSCOPE_STANDIN_CUBLASLT}), "on");
  g_user_messages.clear();
  FILE* job_file = std::tmpfile();
  ASSERT_NE(job_file, nullptr);
  // These calls resolve against castscope's interposers (linked into this test).
  ASSERT_EQ(cublasLtLoggerSetCallback(&user_callback), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtLoggerSetFile(job_file), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtLoggerSetMask(1 | 16), CUBLAS_STATUS_SUCCESS);  // errors and the API trace
  EXPECT_EQ(standin.mask(), 1 | 2 | 16);
  OpFields op{};
  {
    const GemmScope scope(&op);
    standin.log(2, "cublasLtMatmul", kBf16Trace);  // castscope's, not the job's
    standin.log(5, "cublasLtMatmul", "A=0X1");
    standin.log(1, "cublasLtMatmul", "failed");
  }
  EXPECT_EQ(op.gemm_calls, 1);
  EXPECT_EQ(g_user_messages, (std::vector<std::string>{"5:cublasLtMatmul", "1:cublasLtMatmul"}));
  // The job's file gets its levels in cuBLASLt's line format, and only those.
  const std::string written = read_all(job_file);
  EXPECT_NE(written.find("][cublasLt]["), std::string::npos) << written;
  EXPECT_NE(written.find("[Api][cublasLtMatmul] A=0X1\n"), std::string::npos) << written;
  EXPECT_NE(written.find("[Error][cublasLtMatmul] failed\n"), std::string::npos) << written;
  EXPECT_EQ(written.find("[Trace]"), std::string::npos) << written;
  ASSERT_EQ(cublasLtLoggerSetLevel(2), CUBLAS_STATUS_SUCCESS);  // level 2: errors and the performance trace
  standin.log(2, "cublasLtMatmul", kBf16Trace);
  EXPECT_EQ(g_user_messages.back(), "2:cublasLtMatmul");
  EXPECT_EQ(cublasLtLoggerSetLevel(9), CUBLAS_STATUS_INVALID_VALUE);
  cublaslt_logger_stop();
  // The job's settings are the library's again when castscope lets go.
  EXPECT_EQ(standin.mask(), 1 | 2);
  EXPECT_TRUE(standin.has_callback());

  // Remembered while castscope is off too: a new attach honours them, and
  // one the job cleared is never called again.
  ASSERT_EQ(cublaslt_logger_start({CASTSCOPE_STANDIN_CUBLASLT}), "on");
  g_user_messages.clear();
  standin.log(1, "cublasLtMatmul", "failed again");
  EXPECT_EQ(g_user_messages, (std::vector<std::string>{"1:cublasLtMatmul"}));
  ASSERT_EQ(cublasLtLoggerSetCallback(nullptr), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtLoggerSetMask(0), CUBLAS_STATUS_SUCCESS);
  ASSERT_EQ(cublasLtLoggerSetFile(nullptr), CUBLAS_STATUS_SUCCESS);
  cublaslt_logger_stop();
  EXPECT_EQ(standin.mask(), 0);
  EXPECT_FALSE(standin.has_callback());
  std::fclose(job_file);
}

TEST(CublasLtLogger, SaysWhyItIsOff) {
  EXPECT_EQ(cublaslt_logger_start({"/nonexistent/libcublasLt.so.13"}).rfind("off: no cuBLASLt is loaded in this process", 0), 0u);
  {
    StandIn standin;
    setenv("CUBLASLT_LOG_LEVEL", "2", 1);
    EXPECT_EQ(cublaslt_logger_start({CASTSCOPE_STANDIN_CUBLASLT}),
              "off: the job logs cuBLASLt itself (CUBLASLT_LOG_LEVEL is set); castscope leaves its logger alone");
    unsetenv("CUBLASLT_LOG_LEVEL");
    EXPECT_FALSE(standin.has_callback());
  }
  const std::vector<std::string> candidates = cublaslt_candidates("", "/venv/lib/python3.11/site-packages/torch/");
  ASSERT_FALSE(candidates.empty());
  EXPECT_EQ(candidates.front(), "/venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcublasLt.so.13");
  EXPECT_EQ(cublaslt_candidates("/x/libcublasLt.so", "/t/torch"), std::vector<std::string>{"/x/libcublasLt.so"});
}

}  // namespace
}  // namespace castscope
