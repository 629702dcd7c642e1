// GPU timing against the real CUPTI on a real GPU, without torch: kernels
// launched inside castscope's launch scopes (an "op" with a nested "cast",
// as the autocast kernel pushes them), a memcpy and a memset, and kernels
// launched outside any scope. Prints what came back and checks it; exits
// non-zero when a check fails. Built and run by tests/gpu/check_on_gpu_machine.sh.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "agent/src/gpu/cupti_library.h"
#include "agent/src/gpu/gpu_timing.h"
#include "agent/src/gpu/launch_scope.h"

using namespace castscope;

__global__ void to_half_like(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = static_cast<float>(static_cast<__half>(in[i]));
}
__global__ void compute(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] = x[i] * 2.0f + 1.0f;
}
__global__ void outside(float* x, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] += 1.0f;
}

int failures = 0;
void check(bool ok, const char* what) {
  std::printf("%s %s\n", ok ? "ok  " : "FAIL", what);
  if (!ok) ++failures;
}

int main() {
  EventLog log;
  GpuTimingConfig config;
  config.mode = GpuTimingConfig::Mode::kOn;
  const std::string state = gpu_timing_start(config, cupti_candidates(""), log);
  std::printf("gpu_timing: %s\n", state.c_str());
  check(state == "on", "CUPTI found and activity collection on");
  if (state != "on") return 1;

  constexpr int n = 1 << 20, ops = 200;
  float *a = nullptr, *b = nullptr;
  cudaMalloc(&a, n * sizeof(float));
  cudaMalloc(&b, n * sizeof(float));
  cudaMemset(a, 0, n * sizeof(float));  // outside any scope
  const uint64_t host_start = now_ns();
  for (int i = 0; i < ops; ++i) {
    const uint64_t op_seq = 1000 + 2 * i, cast_seq = 1001 + 2 * i;
    LaunchScope op(true, op_seq);
    {
      LaunchScope cast(true, cast_seq | kCastLaunchBit);
      to_half_like<<<n / 256, 256>>>(a, b, n);
    }
    compute<<<n / 256, 256>>>(b, n);
  }
  outside<<<n / 256, 256>>>(a, n);
  std::vector<float> host(n);
  cudaMemcpy(host.data(), b, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaDeviceSynchronize();
  const uint64_t host_end = now_ns();
  gpu_timing_stop();

  std::map<std::string, int> by;
  int cast_ok = 0, op_ok = 0, in_window = 0, total = 0;
  log.drain([&](const Record& r) {
    if (r.kind != RecordKind::kKernel) return;
    ++total;
    const std::string name = log.op_meta(r.op_id).name;
    const char* who = r.kernel.launched_by == LaunchedBy::kCast ? "cast" : r.kernel.launched_by == LaunchedBy::kOp ? "op" : "none";
    by[std::string(who) + " " + name] += 1;
    if (name.find("to_half_like") != std::string::npos && r.kernel.launched_by == LaunchedBy::kCast &&
        r.kernel.launch_seq % 2 == 1)
      ++cast_ok;
    if (name.find("compute") != std::string::npos && r.kernel.launched_by == LaunchedBy::kOp && r.kernel.launch_seq % 2 == 0)
      ++op_ok;
    if (r.ts_ns >= host_start - 1'000'000'000ull && r.ts_ns + r.kernel.duration_ns <= host_end + 1'000'000) ++in_window;
  });
  for (const auto& [what, count] : by) std::printf("  %6d  %s\n", count, what.c_str());
  std::printf("clock offset (CUPTI - CLOCK_MONOTONIC): %lld ns; dropped: %llu\n",
              static_cast<long long>(gpu_clock_offset_ns()), static_cast<unsigned long long>(log.stats().gpu_records_dropped));
  check(cast_ok == ops, "every cast kernel attributed to its cast");
  check(op_ok == ops, "every compute kernel attributed to its op");
  check(by["none memset"] == 1 && by["none memcpy DtoH"] == 1, "memset and memcpy outside any scope: launched by none");
  check(in_window == total, "every activity lies within the host's time window (agent clock)");
  check(log.stats().gpu_records_dropped == 0, "no records dropped");
  return failures == 0 ? 0 : 1;
}
