#include "agent/src/dispatch/native_cast_order.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/record_function.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>
#include <torch/csrc/autograd/function.h>

#include <string>

namespace castscope {
namespace {

// The autograd node of a cast the wrapper made of `edge`'s input, or null.
const torch::autograd::Node* cast_node(const torch::autograd::Edge& edge) {
  const torch::autograd::Node* node = edge.function.get();
  return node != nullptr && node->name() == "ToCopyBackward0" ? node : nullptr;
}

}  // namespace

NativeCastOrder read_native_cast_order() {
  NativeCastOrder result;
  try {
    const at::RecordFunctionGuard unobserved(false);  // no profiler sees the probe
    const c10::InferenceMode not_inference(false);
    const c10::AutoGradMode grad(true);
    // Activations (not leaves): cached_cast neither reads nor fills its cache for them.
    const at::Tensor left = at::ones({2, 2}).requires_grad_(true).mul(1);
    const at::Tensor right = at::ones({2, 2}).requires_grad_(true).mul(1);
    const bool was_enabled = at::autocast::is_autocast_enabled(at::kCPU);
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::Tensor out;
    try {
      out = at::mm(left, right);
    } catch (...) {
      at::autocast::set_autocast_enabled(at::kCPU, was_enabled);
      throw;
    }
    at::autocast::set_autocast_enabled(at::kCPU, was_enabled);
    const auto& mm_node = out.grad_fn();
    if (mm_node != nullptr && mm_node->num_inputs() > 0 && mm_node->next_edges().size() == 2) {
      const torch::autograd::Node* left_cast = cast_node(mm_node->next_edges()[0]);
      const torch::autograd::Node* right_cast = cast_node(mm_node->next_edges()[1]);
      if (left_cast != nullptr && right_cast != nullptr && left_cast->sequence_nr() != right_cast->sequence_nr()) {
        result.read = true;
        result.order = right_cast->sequence_nr() < left_cast->sequence_nr() ? CastOrder::kRightToLeft
                                                                             : CastOrder::kLeftToRight;
      }
    }
  } catch (const std::exception& e) {
    return NativeCastOrder{CastOrder::kLeftToRight, false, e.what()};
  }
  if (!result.read) result.unread_because = "CPU autocast's mm made no two cast nodes to compare";
  return result;
}

NativeCastOrder native_cast_order() {
  static const NativeCastOrder order = read_native_cast_order();
  return order;
}

}  // namespace castscope
