// GPU timing against the stand-in CUPTI (tests/stand_ins/cupti), loaded by
// the same dlopen path as the real library.
#include "agent/src/gpu/gpu_timing.h"

#include <dlfcn.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>
#include <vector>

#include "agent/src/gpu/cupti_library.h"
#include "agent/src/gpu/launch_scope.h"

namespace castscope {
namespace {

class GpuTimingTest : public ::testing::Test {
 protected:
  void TearDown() override { gpu_timing_stop(); }

  // Starts GPU timing on the stand-in with `script` (JSON).
  std::string start(const std::string& script, GpuTimingConfig config = {}) {
    path_ = ::testing::TempDir() + "standin_cupti_" + std::to_string(getpid()) + ".json";
    std::ofstream(path_) << script;
    setenv("CASTSCOPE_STANDIN_CUPTI", path_.c_str(), 1);
    config.cupti_library = CASTSCOPE_STANDIN_CUPTI;
    config.mode = GpuTimingConfig::Mode::kOn;
    return gpu_timing_start(config, {}, log_);
  }

  // One autocast op with one cast, as the dispatch kernel runs it.
  void run_op(uint64_t op_seq, uint64_t cast_seq) {
    LaunchScope op(true, op_seq);
    LaunchScope cast(true, cast_seq | kCastLaunchBit);
  }

  std::vector<Record> kernels() {
    std::vector<Record> out;
    log_.drain([&](const Record& r) {
      if (r.kind == RecordKind::kKernel) out.push_back(r);
    });
    return out;
  }

  std::string name(const Record& r) { return log_.op_meta(r.op_id).name; }

  EventLog log_;
  std::string path_;
};

constexpr const char* kOneOfEach = R"({
  "cast": [{"name": "void at::native::elementwise_kernel<copy>", "duration_ns": 2000}],
  "op": [{"name": "sm90_xmma_gemm_bf16bf16_bf16f32", "duration_ns": 9000},
         {"activity": "memset", "bytes": 256, "duration_ns": 300}],
  "unscoped": [{"name": "optimizer_kernel", "duration_ns": 500}]
})";

TEST_F(GpuTimingTest, KernelsAreAttributedToTheCastOrOpTheyWereLaunchedUnder) {
  ASSERT_EQ(start(kOneOfEach), "on");
  run_op(10, 11);
  gpu_timing_flush(true);
  gpu_timing_stop();  // the unscoped kernel waits one buffer; stop sends it
  const std::vector<Record> got = kernels();
  ASSERT_EQ(got.size(), 4u);
  EXPECT_EQ(name(got[0]), "void at::native::elementwise_kernel<copy>");
  EXPECT_EQ(got[0].kernel.launched_by, LaunchedBy::kCast);
  EXPECT_EQ(got[0].kernel.launch_seq, 11u);
  EXPECT_EQ(got[0].kernel.duration_ns, 2000u);
  EXPECT_EQ(got[0].kernel.activity, GpuActivity::kKernel);
  EXPECT_EQ(name(got[1]), "sm90_xmma_gemm_bf16bf16_bf16f32");
  EXPECT_EQ(got[1].kernel.launched_by, LaunchedBy::kOp);
  EXPECT_EQ(got[1].kernel.launch_seq, 10u);
  EXPECT_EQ(got[2].kernel.activity, GpuActivity::kMemset);
  EXPECT_EQ(got[2].kernel.bytes, 256u);
  EXPECT_EQ(got[2].kernel.launched_by, LaunchedBy::kOp);
  EXPECT_EQ(name(got[3]), "optimizer_kernel");
  EXPECT_EQ(got[3].kernel.launched_by, LaunchedBy::kNone);
  EXPECT_EQ(got[3].kernel.launch_seq, 0u);
  for (const Record& r : got) EXPECT_EQ(r.device, DeviceKind::kCuda);
}

TEST_F(GpuTimingTest, CorrelationArrivingInALaterBufferStillAttributes) {
  ASSERT_EQ(start(R"({"op": [{"name": "gemm"}], "correlation_in_next_buffer": true})"), "on");
  run_op(20, 21);
  gpu_timing_flush(true);
  const std::vector<Record> got = kernels();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].kernel.launched_by, LaunchedBy::kOp);
  EXPECT_EQ(got[0].kernel.launch_seq, 20u);
}

TEST_F(GpuTimingTest, KernelTimesAreInTheAgentsClock) {
  // CUPTI's clock runs 5 s ahead of CLOCK_MONOTONIC.
  ASSERT_EQ(start(R"({"op": [{"name": "gemm", "duration_ns": 1000}], "clock_offset_ns": 5000000000})"), "on");
  const uint64_t before = now_ns();
  run_op(30, 31);
  const uint64_t after = now_ns();
  gpu_timing_flush(true);
  const std::vector<Record> got = kernels();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_GE(got[0].ts_ns + 50'000, before);  // within the measurement's bracket
  EXPECT_LE(got[0].ts_ns, after + 50'000);
  EXPECT_NEAR(static_cast<double>(gpu_clock_offset_ns()), 5e9, 1e6);
}

TEST_F(GpuTimingTest, PastTheBufferBudgetRecordsAreDroppedAndCounted) {
  GpuTimingConfig config;
  config.buffer_bytes = 4096;
  config.buffer_budget_bytes = 4096;  // one buffer at a time
  ASSERT_EQ(start(R"({"op": [{"name": "gemm"}], "dropped_records": 3})", config), "on");
  for (uint64_t i = 0; i < 200; ++i) run_op(100 + 2 * i, 101 + 2 * i);
  gpu_timing_flush(true);
  const size_t delivered = kernels().size();
  EXPECT_GT(delivered, 0u);
  EXPECT_LT(delivered, 200u);
  // Every record CUPTI held (correlation, API and kernel per launch) is either delivered or counted.
  EXPECT_GE(log_.stats().gpu_records_dropped, 200u - delivered);
  EXPECT_GT(gpu_timing_stats().buffers_refused, 0u);
}

TEST_F(GpuTimingTest, YieldsToAnotherClientAndTakesCuptiBack) {
  ASSERT_EQ(start(R"({"op": [{"name": "gemm"}]})"), "on");
  run_op(40, 41);
  ASSERT_TRUE(gpu_timing_yield());  // flushes what castscope had
  EXPECT_EQ(kernels().size(), 1u);
  EXPECT_FALSE(gpu_correlating());
  run_op(42, 43);  // the other client's time: castscope pushes nothing, records nothing
  gpu_timing_resume();
  EXPECT_EQ(gpu_timing_state(), "on");
  EXPECT_TRUE(gpu_correlating());
  run_op(44, 45);
  gpu_timing_flush(true);
  const std::vector<Record> after = kernels();
  ASSERT_EQ(after.size(), 1u);
  EXPECT_EQ(after[0].kernel.launch_seq, 44u);
  EXPECT_EQ(gpu_timing_stats().yields, 1u);
  gpu_timing_stop();
  gpu_timing_resume();  // after a stop there is nothing to take back
  EXPECT_EQ(gpu_timing_state(), "off: stopped");
}

TEST_F(GpuTimingTest, BetweenWindowsNothingIsPushedOrCollected) {
  ASSERT_EQ(start(R"({"op": [{"name": "gemm"}]})"), "on");
  run_op(50, 51);
  gpu_timing_window(false);
  EXPECT_FALSE(gpu_correlating());
  run_op(52, 53);
  gpu_timing_flush(false);  // the first window's buffers still come out
  ASSERT_EQ(kernels().size(), 1u);
  gpu_timing_window(true);
  EXPECT_EQ(gpu_timing_state(), "on");
  run_op(54, 55);
  gpu_timing_flush(true);
  const std::vector<Record> got = kernels();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(got[0].kernel.launch_seq, 54u);
  // A profiler during a closed window: castscope stays out after it too, until the next window.
  gpu_timing_window(false);
  ASSERT_TRUE(gpu_timing_yield());
  gpu_timing_resume();
  EXPECT_FALSE(gpu_correlating());
  gpu_timing_window(true);
  EXPECT_TRUE(gpu_correlating());
}

TEST_F(GpuTimingTest, CastscopesOwnKernelsInsideAnOpAreCountedNotRecorded) {
  // The stand-in launches its "cast" kernels for any id with bit 63 set, castscope's own id included.
  ASSERT_EQ(start(kOneOfEach), "on");
  {
    LaunchScope op(true, 50);
    LaunchScope numerics_check(true, kCastscopeOwnLaunchId);
  }
  gpu_timing_flush(true);
  gpu_timing_stop();
  const std::vector<Record> got = kernels();
  ASSERT_EQ(got.size(), 3u);  // the op's gemm and memset, the unscoped kernel: not the check's copy
  EXPECT_EQ(name(got[0]), "sm90_xmma_gemm_bf16bf16_bf16f32");
  EXPECT_EQ(got[0].kernel.launch_seq, 50u);
  for (const Record& r : got) EXPECT_NE(r.kernel.launched_by, LaunchedBy::kCast);
  EXPECT_EQ(gpu_timing_stats().own_kernels, 1u);
}

TEST_F(GpuTimingTest, ABufferCastscopeDidNotAllocateIsLeftAlone) {
  // Freeing it would be a double free when its owner (torch.profiler) frees it too: ASan would say so.
  ASSERT_EQ(start(R"({"op": [{"name": "gemm"}], "foreign_buffer": true})"), "on");
  run_op(60, 61);
  gpu_timing_flush(true);
  EXPECT_EQ(kernels().size(), 1u);
  EXPECT_EQ(gpu_timing_stats().foreign_buffers, 1u);
}

TEST_F(GpuTimingTest, AnActivityCuptiCouldNotTimeIsCountedNotSent) {
  ASSERT_EQ(start(R"({"op": [{"name": "gemm", "incomplete": true}, {"name": "timed"}]})"), "on");
  run_op(70, 71);
  gpu_timing_flush(true);
  const std::vector<Record> got = kernels();
  ASSERT_EQ(got.size(), 1u);
  EXPECT_EQ(name(got[0]), "timed");
  EXPECT_EQ(log_.stats().gpu_records_dropped, 1u);
}

TEST_F(GpuTimingTest, AToolHoldingCuptiIsLeftAloneAndNamed) {
  const std::string state = start(R"({"held_by": "CUPTI for Nsight Systems"})");
  EXPECT_EQ(state, "off: another tool holds CUPTI (CUPTI for Nsight Systems); castscope leaves it alone");
  EXPECT_FALSE(gpu_correlating());
}

TEST_F(GpuTimingTest, AnUnnamedSubscriberLikeTorchProfilersIsNoReasonToStayOff) {
  // Kineto subscribes with cuptiSubscribe (no name) once torch.profiler has run, and stays.
  EXPECT_EQ(start(R"({"held_by": "CUPTI for <not provided>"})"), "on");
}

TEST_F(GpuTimingTest, CastscopeHoldsNoSubscriberSoAProfilerCanTakeOne) {
  ASSERT_EQ(start(kOneOfEach), "on");
  // What a profiler started later would do: subscribe. It must succeed.
  void* cupti = dlopen(CASTSCOPE_STANDIN_CUPTI, RTLD_NOW | RTLD_NOLOAD);
  ASSERT_NE(cupti, nullptr);
  auto subscribe = reinterpret_cast<CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*)>(
      dlsym(cupti, "cuptiSubscribe"));
  auto unsubscribe = reinterpret_cast<CUptiResult (*)(CUpti_SubscriberHandle)>(dlsym(cupti, "cuptiUnsubscribe"));
  CUpti_SubscriberHandle handle = nullptr;
  EXPECT_EQ(subscribe(&handle, nullptr, nullptr), CUPTI_SUCCESS);
  unsubscribe(handle);
  dlclose(cupti);
}

TEST_F(GpuTimingTest, AnEnableErrorTurnsTimingOffAndSaysWhy) {
  const std::string state = start(R"({"enable_error": 3})");  // CUPTI_ERROR_NOT_INITIALIZED... as the stand-in words it
  EXPECT_EQ(state.rfind("off: CUPTI could not enable activity kind", 0), 0u) << state;
  EXPECT_FALSE(gpu_correlating());
}

TEST(GpuTimingLoad, TheWheelBesideTorchIsSearchedFirst) {
  const std::vector<std::string> paths = cupti_candidates("/venv/lib/python3.11/site-packages/torch/");
  ASSERT_FALSE(paths.empty());
  EXPECT_EQ(paths[0], "/venv/lib/python3.11/site-packages/nvidia/cu13/lib/libcupti.so.13");
  EXPECT_EQ(cupti_candidates("/venv/site-packages/torch")[0], "/venv/site-packages/nvidia/cu13/lib/libcupti.so.13");
}

TEST(GpuTimingLoad, NoLibraryMeansOffWithEveryPathTried) {
  EventLog log;
  GpuTimingConfig config;
  config.cupti_library = "/nonexistent/libcupti.so.13";
  const std::string state = gpu_timing_start(config, {}, log);
  EXPECT_EQ(state.rfind("off: no usable CUPTI library:", 0), 0u) << state;
  EXPECT_NE(state.find("/nonexistent/libcupti.so.13"), std::string::npos) << state;
}

}  // namespace
}  // namespace castscope
