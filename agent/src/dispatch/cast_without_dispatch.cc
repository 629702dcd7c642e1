// Tensor::to(dtype) without to's dispatch; cast_without_dispatch.h says why
// nothing can tell.
#include "agent/src/dispatch/cast_without_dispatch.h"

#include <ATen/SequenceNumber.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/dispatch/ObservedOperators.h>
#include <ATen/core/grad_mode.h>
#include <ATen/ops/_to_copy_ops.h>
#include <ATen/ops/to_compositeimplicitautograd_dispatch.h>
#include <ATen/record_function.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <atomic>
#include <functional>
#include <optional>
#include <vector>

namespace castscope {
namespace {

std::atomic<bool> g_to_dtype_is_composite{false};
std::atomic<bool> g_to_dtype_is_observed{true};
std::atomic<const c10::FunctionSchema*> g_to_dtype_schema{nullptr};

bool to_dtype_is_composite(const c10::OperatorHandle& op) {
  for (const c10::DispatchKey key :
       {c10::DispatchKey::CPU, c10::DispatchKey::CUDA, c10::DispatchKey::AutogradCPU, c10::DispatchKey::AutogradCUDA,
        c10::DispatchKey::Autograd, c10::DispatchKey::ADInplaceOrView, c10::DispatchKey::AutocastCPU,
        c10::DispatchKey::AutocastCUDA, c10::DispatchKey::CompositeExplicitAutograd,
        c10::DispatchKey::CompositeExplicitAutogradNonFunctional})
    if (op.hasKernelForDispatchKey(key)) return false;
  return true;
}

// What Dispatcher::callWithDispatchKeySlowPath does for aten::to.dtype with
// the callbacks its draw returned (the kernel it reaches is the composite
// one: read_to_dtype_kernels): the callbacks see the op, its arguments if they
// ask, the autograd sequence number the dispatcher would give (its key set has
// an autograd key and grad mode is on) and its output if they ask.
at::Tensor to_dtype_observed(const at::Tensor& t, c10::ScalarType target, at::StepCallbacks&& callbacks) {
  at::RecordFunction guard(std::move(callbacks));
  const c10::FunctionSchema& schema = *g_to_dtype_schema.load(std::memory_order_acquire);
  const c10::impl::LocalDispatchKeySet local = c10::impl::tls_local_dispatch_key_set();
  const c10::DispatchKeySet keys = (t.key_set() | local.included_) - local.excluded_;
  const int64_t sequence_nr = !(keys & c10::autograd_dispatch_keyset).empty() && at::GradMode::is_enabled()
                                  ? static_cast<int64_t>(at::sequence_number::peek())
                                  : -1;
  if (guard.needsInputs()) {
    const c10::IValue inputs[] = {t, target, false, false, c10::IValue()};
    guard.before(std::cref(schema), c10::ArrayRef<const c10::IValue>(inputs), sequence_nr);
  } else {
    guard.before(std::cref(schema), sequence_nr);
  }
  at::Tensor out = at::compositeimplicitautograd::to(t, target, false, false, std::nullopt);
  if (guard.needsOutputs()) guard.setOutputs(std::vector<c10::IValue>{out});
  return out;
}

}  // namespace

void read_to_dtype_kernels() {
  const auto op = c10::Dispatcher::singleton().findSchema({"aten::to", "dtype"});
  if (op) {
    g_to_dtype_schema.store(&op->schema(), std::memory_order_release);
    g_to_dtype_is_observed.store(c10::ObservedOperators::isObserved(op->operator_name()), std::memory_order_relaxed);
  }
  g_to_dtype_is_composite.store(op && to_dtype_is_composite(*op), std::memory_order_release);
}

bool thread_sees_no_cast_ops(c10::DispatchKeySet included) {
  return g_to_dtype_is_composite.load(std::memory_order_acquire) && included == c10::default_included_set;
}

bool thread_sees_no_cast_ops() { return thread_sees_no_cast_ops(c10::impl::tls_local_dispatch_key_set().included_); }

at::Tensor cast_without_dispatch(const at::Tensor& t, c10::ScalarType target) {
  // The draw aten::to's dispatch takes (Dispatcher::call): one per cast, so a
  // sampled callback's countdown moves as natively.
  std::optional<at::StepCallbacks> callbacks = at::getStepCallbacksUnlessEmpty(at::RecordScope::FUNCTION);
  if (C10_UNLIKELY(callbacks.has_value() && g_to_dtype_is_observed.load(std::memory_order_relaxed)))
    return to_dtype_observed(t, target, std::move(*callbacks));
  return at::_ops::_to_copy::call(t, target, std::nullopt, std::nullopt, std::nullopt, false, std::nullopt);
}

}  // namespace castscope
