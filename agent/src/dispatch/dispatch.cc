// castscope's autocast kernels.
//
// One boxed kernel serves any op, and an unboxed one the common signatures
// (mm, linear, conv, addmm) so the dispatcher need not box their arguments;
// both share KernelCore. They apply the op's policy exactly as
// ATen's WrapFunction_ templates do (aten/src/ATen/autocast_mode.h), using the
// same helpers (is_eligible, prioritize, cached_cast) so the cast cache and
// eligibility rules stay native, then call the op again from the top with
// the autocast key excluded, as the native wrappers do. One shortcut, where
// nothing can tell: a cast the cache would not keep is made by the op that
// Tensor::to itself calls (make_cast's `direct`).
//
// Logging never changes what runs: every decision is made first; recording
// only reads, and is wrapped so a failure is counted, not raised.
//
// The kernels' parts are headers this file alone includes (kernel_parts.h,
// kernel_core.h, autocast_kernel.h, unboxed_autocast_kernel.h); this file
// registers them.
#include "agent/src/dispatch/dispatch.h"

#include <ATen/ops/_autocast_to_full_precision_native.h>
#include <ATen/ops/_autocast_to_reduced_precision_native.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/op_registration/infer_schema.h>
#include <torch/library.h>

#include <atomic>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "agent/src/dispatch/autocast_kernel.h"
#include "agent/src/dispatch/unboxed_autocast_kernel.h"

namespace castscope {

Record new_cast_record(EventLog& log, uint32_t op_id, uint32_t thread, CastPolicy policy, DeviceKind device,
                       const OpContext& context, uint64_t reserved_seq, uint64_t ts_ns) {
  Record r;
  fill_cast_record(r, log, op_id, thread, policy, device, context, reserved_seq, ts_ns);
  return r;
}

namespace {

// The signatures the unboxed kernel is built for (the ops of the shipped
// policies that small models call most); any other op gets the boxed kernel.
using Optional = std::optional<at::Tensor>;
using MatmulSignature = at::Tensor(const at::Tensor&, const at::Tensor&);                     // mm, bmm, matmul
using LinearSignature = at::Tensor(const at::Tensor&, const at::Tensor&, const Optional&);    // linear
using AddmmSignature = at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Scalar&,
                                  const at::Scalar&);                                         // addmm, baddbmm
using ConvSignature = at::Tensor(const at::Tensor&, const at::Tensor&, const Optional&, c10::SymIntArrayRef,
                                 c10::SymIntArrayRef, c10::SymIntArrayRef, c10::SymInt);      // conv1d/2d/3d

template <class Signature>
bool schema_matches(const c10::FunctionSchema& schema) {
  return !c10::findSchemaDifferences(c10::inferFunctionSchemaFlattenedReturns<Signature>(), schema).has_value();
}

// The dispatcher's kernel for `entry` on `op`: unboxed when the op's schema
// and policy allow it, boxed otherwise. `kept` receives the kernel object.
// What the dispatcher needs to register an unboxed kernel (as torch::Library
// passes it): the kernel, its C++ signature and the schema inferred from it.
struct UnboxedRegistration {
  c10::KernelFunction kernel;
  c10::impl::CppSignature signature;
  std::unique_ptr<c10::FunctionSchema> schema;
};

template <class Signature>
std::optional<UnboxedRegistration> unboxed_if(const c10::OperatorHandle& op, RecordingState& runtime, const PolicyEntry& entry,
                                              const AutocastDevice& device, uint32_t op_id, bool casts_right_to_left) {
  if (!schema_matches<Signature>(op.schema())) return std::nullopt;
  using Kernel = UnboxedAutocastKernel<Signature>;
  auto kernel = std::make_unique<Kernel>(runtime, entry, device, op_id, casts_right_to_left, op);
  // The dispatcher calls kernels through a raw pointer: a thread may be
  // inside this one while detach replaces it. One extra reference that is
  // never dropped keeps it alive (a few hundred bytes per op).
  c10::raw::intrusive_ptr::incref(kernel.get());
  return UnboxedRegistration{c10::KernelFunction::makeFromUnboxedFunctor<false, Kernel>(std::move(kernel)),
                             c10::impl::CppSignature::make<Signature>(),
                             c10::detail::inferFunctionSchemaFromFunctor<Kernel>()};
}

bool unboxed_policy(CastPolicy policy) {
  return policy == CastPolicy::kLowerPrecisionFp || policy == CastPolicy::kFp32 || policy == CastPolicy::kPromote;
}

std::optional<UnboxedRegistration> unboxed_kernel(const c10::OperatorHandle& op, RecordingState& runtime,
                                                  const PolicyEntry& entry, const AutocastDevice& device, uint32_t op_id,
                                                  bool casts_right_to_left) {
  if (!unboxed_policy(entry.policy)) return std::nullopt;
  std::optional<UnboxedRegistration> kernel;
  if (!kernel) kernel = unboxed_if<MatmulSignature>(op, runtime, entry, device, op_id, casts_right_to_left);
  if (!kernel) kernel = unboxed_if<LinearSignature>(op, runtime, entry, device, op_id, casts_right_to_left);
  if (!kernel) kernel = unboxed_if<AddmmSignature>(op, runtime, entry, device, op_id, casts_right_to_left);
  if (!kernel) kernel = unboxed_if<ConvSignature>(op, runtime, entry, device, op_id, casts_right_to_left);
  return kernel;
}

// JIT autocast does not go through the autocast keys: it inserts explicit
// aten::_autocast_to_reduced_precision / _autocast_to_full_precision ops.
// castscope overrides their CompositeImplicitAutograd kernels with wrappers
// that call the very same ATen implementations and record the cast.
// The runtime of the registry that installed the JIT cast kernels (free
// functions, so they find it here).
std::atomic<RecordingState*> g_jit_runtime{nullptr};

void record_jit_cast(uint32_t op_id, CastPolicy policy, const at::Tensor& self, const at::Tensor& result) noexcept {
  RecordingState* runtime = g_jit_runtime.load(std::memory_order_acquire);
  if (runtime == nullptr || !g_record_events.load(std::memory_order_relaxed) || !self.defined()) return;
  EventLog& log = runtime->events;
  try {
    Record r = new_cast_record(log, op_id, log.thread_id(), policy, self.is_cuda() ? DeviceKind::kCuda : DeviceKind::kCpu,
                               current_op_context(runtime->locations));
    r.cast.src = to_dtype(self.scalar_type());
    r.cast.dst = to_dtype(result.scalar_type());
    if (result.scalar_type() != self.scalar_type()) {
      r.cast.outcome = CastOutcome::kCast;
    } else if (self.scalar_type() == at::kDouble) {
      r.cast.outcome = CastOutcome::kFloat64;
    } else {
      r.cast.outcome = self.is_floating_point() ? CastOutcome::kAlreadyTarget : CastOutcome::kNotFloating;
    }
    // cache stays NOT_CACHEABLE: JIT autocast has no cast cache
    r.cast.role = role_of(self);
    r.cast.bytes = source_bytes(self);
    describe_shape(r.cast, self);
    log.record(r);
  } catch (...) {
    log.count_internal_error();
  }
}

uint32_t g_reduced_precision_op = 0;
uint32_t g_full_precision_op = 0;

at::Tensor jit_to_reduced_precision(const at::Tensor& self, bool cuda_enabled, bool cpu_enabled,
                                    at::ScalarType cuda_dtype, at::ScalarType cpu_dtype) {
  at::Tensor result;
  {
    const ConversionScope inside(this_thread_block());  // recorded below, not again as an explicit cast
    result = at::native::_autocast_to_reduced_precision(self, cuda_enabled, cpu_enabled, cuda_dtype, cpu_dtype);
  }
  record_jit_cast(g_reduced_precision_op, CastPolicy::kLowerPrecisionFp, self, result);
  return result;
}

at::Tensor jit_to_full_precision(const at::Tensor& self, bool cuda_enabled, bool cpu_enabled) {
  at::Tensor result;
  {
    const ConversionScope inside(this_thread_block());  // recorded below, not again as an explicit cast
    result = at::native::_autocast_to_full_precision(self, cuda_enabled, cpu_enabled);
  }
  record_jit_cast(g_full_precision_op, CastPolicy::kFp32, self, result);
  return result;
}

// "ns::name.overload" -> OperatorName{"ns::name", "overload"}.
c10::OperatorName parse_operator_name(const std::string& op) {
  const auto dot = op.find('.', op.find("::"));
  if (dot == std::string::npos) return c10::OperatorName(op, "");
  return c10::OperatorName(op.substr(0, dot), op.substr(dot + 1));
}

}  // namespace

DispatchRegistry::DispatchRegistry(RecordingState& runtime) : runtime_(runtime) {}
DispatchRegistry::~DispatchRegistry() {
  explicit_casts_.reset();  // unregisters
  unboxed_.clear();    // unregisters
  libraries_.clear();  // unregisters; the JIT cast kernels stop finding this runtime next
  RecordingState* expected = &runtime_;
  g_jit_runtime.compare_exchange_strong(expected, nullptr, std::memory_order_acq_rel);
}

bool DispatchRegistry::register_unboxed(const std::string& op, const PolicyEntry& entry, const AutocastDevice& device,
                                        uint32_t op_id) {
  const auto handle = c10::Dispatcher::singleton().findSchema(parse_operator_name(op));
  if (!handle) return false;  // not loaded yet: the boxed kernel reads its schema on the first call
  try {
    auto unboxed = unboxed_kernel(*handle, runtime_, entry, device, op_id, cast_order_.right_to_left());
    if (!unboxed) return false;
    unboxed_.push_back(std::make_unique<c10::RegistrationHandleRAII>(c10::Dispatcher::singleton().registerImpl(
        handle->operator_name(), device.key, std::move(unboxed->kernel), unboxed->signature, std::move(unboxed->schema),
        "castscope unboxed autocast kernel (" + entry.origin + ")")));
  } catch (const std::exception&) {
    return false;  // the dispatcher disagrees with the signature (another C++ type): the boxed kernel serves it
  }
  ++registered_;
  ++registered_unboxed_;
  return true;
}

std::vector<std::string> DispatchRegistry::register_policies(const PolicySet& policies, bool explicit_casts) {
  std::vector<std::string> errors;
  read_to_dtype_kernels();
  // Read while the native wrappers are in place, before any kernel below replaces them.
  cast_order_ = native_cast_order();
  try {
    g_reduced_precision_op = runtime_.events.intern_op("aten::_autocast_to_reduced_precision");
    runtime_.events.set_arg_names(g_reduced_precision_op, {"self"});
    g_full_precision_op = runtime_.events.intern_op("aten::_autocast_to_full_precision");
    runtime_.events.set_arg_names(g_full_precision_op, {"self"});
    g_jit_runtime.store(&runtime_, std::memory_order_release);
    libraries_.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, "aten",
                                                          c10::DispatchKey::CompositeImplicitAutograd, __FILE__, __LINE__));
    libraries_.back()->impl("_autocast_to_reduced_precision", TORCH_FN(jit_to_reduced_precision));
    libraries_.back()->impl("_autocast_to_full_precision", TORCH_FN(jit_to_full_precision));
  } catch (const std::exception& e) {
    errors.push_back(std::string("JIT autocast casts: cannot register: ") + e.what());
  }
  for (const auto& [device_name, device] : policies.devices) {
    const AutocastDevice* key = find_autocast_device(device_name);
    if (key == nullptr) continue;
    // One IMPL library per (namespace, key): torch::Library scopes impls to one namespace.
    std::map<std::string, torch::Library*> by_namespace;
    for (const auto& [op, entry] : device.ops) {
      if (entry.policy == kKeepNativePolicy) continue;
      const std::string ns = op.substr(0, op.find("::"));
      try {
        std::optional<c10::OperatorHandle> redispatch;
        if (entry.policy == CastPolicy::kFp32AppendDtype) {
          redispatch = c10::Dispatcher::singleton().findSchema(parse_operator_name(entry.redispatch));
          if (!redispatch) {
            errors.push_back(entry.origin + ": " + op + ": redispatch overload " + entry.redispatch + " does not exist");
            continue;
          }
        }
        auto& library = by_namespace[ns];
        if (library == nullptr) {
          libraries_.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, ns, key->key, __FILE__, __LINE__));
          library = libraries_.back().get();
        }
        const uint32_t op_id = runtime_.events.intern_op(op);
        if (register_unboxed(op, entry, *key, op_id)) continue;
        auto kernel =
            std::make_unique<AutocastKernel>(runtime_, entry, *key, op_id, cast_order_.right_to_left(), std::move(redispatch));
        AutocastKernel* kept = kernel.get();
        library->impl(op.c_str(), torch::CppFunction::makeFromBoxedFunctor(std::move(kernel)));
        // The dispatcher calls kernels through a raw pointer: a thread may be
        // inside this one while detach replaces it. One extra reference that
        // is never dropped keeps it alive (a few hundred bytes per op).
        c10::raw::intrusive_ptr::incref(kept);
        ++registered_;
      } catch (const std::exception& e) {
        errors.push_back(entry.origin + ": " + op + ": cannot register on " + c10::toString(key->key) + ": " + e.what());
      }
    }
  }
  // Every other conversion of the job (explicit_casts.h).
  if (!explicit_casts) return errors;
  explicit_casts_ = std::make_unique<ExplicitCastHooks>(runtime_);
  if (std::string error = explicit_casts_->register_kernels(); !error.empty()) errors.push_back(std::move(error));
  return errors;
}

}  // namespace castscope
