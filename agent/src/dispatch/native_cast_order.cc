#include "agent/src/dispatch/native_cast_order.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <torch/csrc/autograd/function.h>

#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace castscope {
namespace {

// The autograd node of a cast the wrapper made of `edge`'s input, or null.
const torch::autograd::Node* cast_node(const torch::autograd::Edge& edge) {
  const torch::autograd::Node* node = edge.function.get();
  return node != nullptr && node->name() == "ToCopyBackward0" ? node : nullptr;
}

// The probe, on a thread of its own: it starts with none of the caller's
// thread-local state (autocast's switch and dtype, grad and inference mode,
// dispatch modes, the JIT tracer, saved-tensor hooks, a profiler's memory
// reporting, the autograd sequence counter), so it neither depends on nor
// changes any of it. The cast cache keeps nothing of it: its inputs are
// activations, which cached_cast does not cache.
NativeCastOrder read_on_this_thread() {
  NativeCastOrder result;
  try {
    const at::RecordFunctionGuard unobserved(false);  // global observers too
    const at::Tensor left = at::ones({2, 2}, at::kFloat).requires_grad_(true).mul(1);
    const at::Tensor right = at::ones({2, 2}, at::kFloat).requires_grad_(true).mul(1);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::set_autocast_enabled(at::kCPU, true);
    const at::Tensor out = at::mm(left, right);
    at::autocast::set_autocast_enabled(at::kCPU, false);
    const auto& mm_node = out.grad_fn();
    if (mm_node != nullptr && mm_node->next_edges().size() == 2) {
      const torch::autograd::Node* left_cast = cast_node(mm_node->next_edges()[0]);
      const torch::autograd::Node* right_cast = cast_node(mm_node->next_edges()[1]);
      if (left_cast != nullptr && right_cast != nullptr && left_cast->sequence_nr() != right_cast->sequence_nr()) {
        result.read = true;
        result.order = right_cast->sequence_nr() < left_cast->sequence_nr() ? CastOrder::kRightToLeft
                                                                             : CastOrder::kLeftToRight;
      }
    }
    if (!result.read) result.unread_because = "CPU autocast's mm made no two cast nodes to compare";
  } catch (const std::exception& e) {
    result = NativeCastOrder{CastOrder::kLeftToRight, false, e.what()};
  }
  return result;
}

}  // namespace

NativeCastOrder read_native_cast_order() {
  NativeCastOrder result;
  try {
    std::thread probe([&result] { result = read_on_this_thread(); });
    probe.join();
  } catch (const std::exception& e) {  // no thread to be had
    result = NativeCastOrder{CastOrder::kLeftToRight, false, e.what()};
  }
  return result;
}

NativeCastOrder native_cast_order() {
  static std::mutex mutex;
  static std::optional<NativeCastOrder> read;  // kept once read: the native wrappers may be replaced after
  const std::lock_guard<std::mutex> lock(mutex);
  if (read) return *read;
  NativeCastOrder order = read_native_cast_order();
  if (order.read) read = order;
  return order;
}

}  // namespace castscope
