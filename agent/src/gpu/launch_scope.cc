#include "agent/src/gpu/launch_scope.h"

namespace castscope::gpu_detail {

namespace {
void no_launch_id(uint64_t) noexcept {}
void no_pop() noexcept {}
}  // namespace

std::atomic<bool> g_correlating{false};
std::atomic<bool> g_correlate_all_ops{false};
void (*g_push_launch_id)(uint64_t id) noexcept = no_launch_id;
void (*g_pop_launch_id)() noexcept = no_pop;

}  // namespace castscope::gpu_detail
