// The hot path's side of GPU timing: castscope's external correlation id,
// pushed on CUPTI's stack around an autocast op and around each cast inside
// it, so CUPTI tags every launch with the innermost one: a cast's _to_copy
// kernels with the cast, the compute kernels with the op.
//
// Costs one relaxed load when GPU timing is off.
#pragma once

#include <atomic>
#include <cstdint>

namespace castscope {

// The id of a cast carries this bit; an op's id is its record's seq.
inline constexpr uint64_t kCastLaunchBit = uint64_t{1} << 63;

// castscope's own GPU work (the numerics windows' checks and reads): pushed
// over the op's id, so the op's time stays the op's; GPU timing counts such
// kernels and records none of them. No seq reaches it.
inline constexpr uint64_t kCastscopeOwnLaunchId = ~uint64_t{0};

// Set by GPU timing (gpu_timing.cc) when it starts: the functions first,
// then the flag, so this header needs no CUPTI and the hot path no lock.
namespace gpu_detail {
extern std::atomic<bool> g_correlating;
extern std::atomic<bool> g_correlate_all_ops;  // config gpu_correlate: "all_ops"
extern void (*g_push_launch_id)(uint64_t id) noexcept;
extern void (*g_pop_launch_id)() noexcept;
}  // namespace gpu_detail

// True while GPU timing is on: the caller then reserves seqs for its casts.
inline bool gpu_correlating() { return gpu_detail::g_correlating.load(std::memory_order_acquire); }

// Whether an autocast op on this device pushes its ids: CUDA ops, or every
// op when a stand-in CUPTI stands for a GPU.
inline bool gpu_correlates(bool cuda_op) {
  return gpu_correlating() && (cuda_op || gpu_detail::g_correlate_all_ops.load(std::memory_order_relaxed));
}

class LaunchScope {
 public:
  LaunchScope(bool active, uint64_t id) noexcept : pushed_(active && gpu_correlating()) {
    if (pushed_) gpu_detail::g_push_launch_id(id);
  }
  ~LaunchScope() {
    if (pushed_) gpu_detail::g_pop_launch_id();
  }
  LaunchScope(const LaunchScope&) = delete;
  LaunchScope& operator=(const LaunchScope&) = delete;

 private:
  const bool pushed_;
};

}  // namespace castscope
