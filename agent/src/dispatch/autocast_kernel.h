// The boxed autocast kernel: any schema, its arguments on the dispatcher's
// stack of IValues.
// Included by dispatch.cc alone: its definitions sit in an anonymous
// namespace, so the kernels are one translation unit with internal linkage,
// as when they were one file: the compiler sees every call, and the profile
// (cmake/CastscopeProfileGuided.cmake) is one file's.
#pragma once

#include <ATen/core/dispatch/Dispatcher.h>

#include <mutex>
#include <optional>
#include <vector>

#include "agent/src/dispatch/kernel_core.h"

namespace castscope {
namespace {

// The kernel for any schema: the dispatcher boxes the arguments into a stack
// of IValues for it.
class AutocastKernel final : public c10::OperatorKernel, KernelCore {
 public:
  AutocastKernel(RecordingState& runtime, const PolicyEntry& entry, const AutocastDevice& device, uint32_t op_id,
                 bool casts_right_to_left, std::optional<c10::OperatorHandle> redispatch)
      : KernelCore(runtime, entry, device, op_id, casts_right_to_left), redispatch_(std::move(redispatch)) {}

  void operator()(const c10::OperatorHandle& op, c10::DispatchKeySet /*keys*/, torch::jit::Stack* stack) {
    std::call_once(schema_once_, [&] { read_schema(op); });
    ThreadBlock& thread = this_thread_block();
    Record op_record;
    zero_record(op_record);
    bool compile_duplicate = false;
    // Read once (a call into libtorch): the record's autocast dtype and the casts' target.
    const c10::ScalarType region_dtype = at::autocast::get_lower_precision_fp_from_device_type(device_.device);
    CastSeqs seqs;  // none reserved: the boxed kernel's casts take theirs one at a time
    c10::DispatchKeySet included;  // not kept: cast_all asks thread_sees_no_cast_ops() itself
    const bool record = start_op_record(thread, op_record, compile_duplicate, region_dtype,
                                        [&](DType* out) { return input_dtypes(stack, out); },
                                        [] { return uint64_t{0}; }, seqs, included, false);
    const OpScope scope(thread, device_, record, compile_duplicate, op_record);
    std::vector<at::Tensor> checked_inputs;
    try {
      apply_policy(op, stack, region_dtype, record ? &op_record : nullptr, thread, seqs, checked_inputs);
    } catch (...) {
      if (record) finish_op_record(thread, op_record, false, [] { return DType::kUnspecified; });
      throw;
    }
    if (record) {
      if (checks_numerics(&op_record)) [[unlikely]] {
        std::vector<at::Tensor> outputs;
        for (const c10::IValue& out : *stack) add_tensors(out, outputs);
        numerics_check_op(op_record, checked_inputs, outputs);
      }
      finish_op_record(thread, op_record, true, [&] { return output_dtype(*stack); });
    }
  }

 private:
  // Built aside and assigned last: if anything throws, call_once retries
  // with kinds_ untouched.
  void read_schema(const c10::OperatorHandle& op) {
    const auto& args = op.schema().arguments();
    std::vector<ArgKind> kinds;
    std::vector<std::string> names;
    for (const auto& arg : args) {
      kinds.push_back(classify_arg(arg));
      names.push_back(arg.name());
    }
    runtime_.events.set_arg_names(op_id_, std::move(names));
    kinds_ = std::move(kinds);
  }

  uint8_t input_dtypes(const torch::jit::Stack* stack, DType* out) const {
    const c10::IValue* args = stack->data() + (stack->size() - kinds_.size());
    uint8_t n = 0;
    for (size_t i = 0; i < kinds_.size() && n < kMaxOpInputDtypes; ++i) {
      if (args[i].isTensor() && args[i].toTensor().defined()) {
        out[n++] = to_dtype(args[i].toTensor().scalar_type());
      } else if (args[i].isTensorList()) {
        for (const at::Tensor& t : args[i].toTensorList().vec()) {
          if (n < kMaxOpInputDtypes && t.defined()) out[n++] = to_dtype(t.scalar_type());
        }
      }
    }
    return n;
  }

  static DType output_dtype(const torch::jit::Stack& stack) {
    for (const c10::IValue& out : stack) {
      if (out.isTensor() && out.toTensor().defined()) return to_dtype(out.toTensor().scalar_type());
      if (out.isTensorList() && out.toTensorList().size() > 0) return to_dtype(out.toTensorList().get(0).scalar_type());
    }
    return DType::kUnspecified;
  }

  static void add_tensors(const c10::IValue& value, std::vector<at::Tensor>& out) {
    if (value.isTensor()) {
      out.push_back(value.toTensor());
    } else if (value.isTensorList()) {
      for (const at::Tensor& t : value.toTensorList().vec()) out.push_back(t);
    }
  }

  // `checked_inputs` receives the op's tensor arguments as it gets them (after
  // the casts) when numerics windows check this call.
  void apply_policy(const c10::OperatorHandle& op, torch::jit::Stack* stack, c10::ScalarType region_dtype,
                    Record* op_record, ThreadBlock& thread, CastSeqs& seqs, std::vector<at::Tensor>& checked_inputs) {
    c10::IValue* args = stack->data() + (stack->size() - kinds_.size());
    const auto keep_inputs = [&] {
      if (!checks_numerics(op_record)) [[likely]] return;
      for (size_t i = 0; i < kinds_.size(); ++i) add_tensors(args[i], checked_inputs);
    };
    switch (policy_) {
      case CastPolicy::kLowerPrecisionFp:
        cast_all(args, lower_precision(region_dtype), op_record, thread, seqs);
        break;
      case CastPolicy::kFp32:
        cast_all(args, at::kFloat, op_record, thread, seqs);
        break;
      case CastPolicy::kPromote:
        cast_all(args, promote_type(args, region_dtype), op_record, thread, seqs);
        break;
      case CastPolicy::kFp32SetOptDtype:
        set_opt_dtype(args, op_record, thread);
        break;
      case CastPolicy::kFp32AppendDtype:
        keep_inputs();
        append_dtype_and_call(args, stack, op_record, thread);
        return;
      case CastPolicy::kBanned:
        TORCH_CHECK(false, message_);
      default:
        break;
    }
    keep_inputs();
    // fp32_set_opt_dtype: the op converts its input to the dtype autocast set (explicit_casts.h).
    const ThreadFlagScope<&ThreadBlock::autocast_dtype_arg> dtype_arg(thread,
                                                                      policy_ == CastPolicy::kFp32SetOptDtype);
    op.callBoxed(stack);
  }

  // lower_precision_fp, fp32, promote: cached_cast every Tensor, Tensor? and
  // Tensor[] argument to `target`, the arguments in native autocast's order
  // (native_cast_order.h), a list's elements first to last (as cached_cast
  // casts a list).
  void cast_all(c10::IValue* args, c10::ScalarType target, Record* op_record, ThreadBlock& thread, CastSeqs& seqs) {
    // make_cast's `direct`, once per op: recorded ops (their casts' roles are
    // asked anyway), not while compiling.
    const bool direct =
        op_record != nullptr && op_record->op.mode != ExecutionMode::kCompiling && thread_sees_no_cast_ops();
    for (size_t n = 0; n < kinds_.size(); ++n) {
      const size_t i = casts_right_to_left_ ? kinds_.size() - 1 - n : n;
      c10::IValue& arg = args[i];
      switch (kinds_[i]) {
        case ArgKind::kTensor:
        case ArgKind::kOptionalTensor:
          if (arg.isTensor()) arg = cast_one(arg.toTensor(), target, i, -1, op_record, thread, seqs, direct);
          break;
        case ArgKind::kTensorList:
          if (arg.isTensorList()) {
            c10::List<at::Tensor> in = arg.toTensorList();
            c10::List<at::Tensor> out;
            out.reserve(in.size());
            for (size_t j = 0; j < in.size(); ++j)
              out.push_back(cast_one(in.get(j), target, i, static_cast<int>(j), op_record, thread, seqs, direct));
            arg = c10::IValue(std::move(out));
          }
          break;
        default:
          break;
      }
    }
  }

  // Native: the widest floating type among eligible Tensor / Tensor[] args,
  // starting from the lower-precision type. A `Tensor?` argument does not
  // take part (std::optional<Tensor> falls to prioritize's pass-through
  // template) although cached_cast then casts it to the result.
  c10::ScalarType promote_type(c10::IValue* args, c10::ScalarType region_dtype) const {
    c10::ScalarType current = region_dtype;
    for (size_t i = 0; i < kinds_.size(); ++i) {
      const c10::IValue& arg = args[i];
      if (kinds_[i] == ArgKind::kTensor && arg.isTensor()) {
        const at::Tensor& t = arg.toTensor();
        if (t.defined()) current = at::autocast::prioritize(current, t, device_.device);
      } else if (kinds_[i] == ArgKind::kTensorList && arg.isTensorList()) {
        for (const at::Tensor& t : arg.toTensorList().vec())
          if (t.defined()) current = at::autocast::prioritize(current, t, device_.device);
      }
    }
    return current;
  }

  // fp32_set_opt_dtype: when the first argument is eligible, every unset
  // `ScalarType? dtype` becomes float32; otherwise nothing changes.
  void set_opt_dtype(c10::IValue* args, Record* op_record, ThreadBlock& thread) {
    if (kinds_.empty() || !args[0].isTensor()) return;
    const at::Tensor& first = args[0].toTensor();
    const bool eligible = at::autocast::is_eligible(first, device_.device);
    bool explicit_dtype = false;
    if (eligible) {
      for (size_t i = 0; i < kinds_.size(); ++i) {
        if (kinds_[i] != ArgKind::kOptionalScalarType) continue;
        if (args[i].isNone()) {
          args[i] = c10::IValue(at::kFloat);
        } else {
          explicit_dtype = true;
        }
      }
    }
    if (op_record != nullptr && first.defined()) {
      std::optional<CastOutcome> outcome;
      if (eligible) outcome = explicit_dtype ? CastOutcome::kDtypeArgKept : CastOutcome::kDtypeArgSet;
      record_cast(thread, *op_record, first, at::kFloat, 0, -1, outcome);
    }
  }

  // fp32_append_dtype: call the dtype-taking overload with float32 appended
  // (or the first argument's own dtype when it is not eligible).
  void append_dtype_and_call(c10::IValue* args, torch::jit::Stack* stack, Record* op_record, ThreadBlock& thread) {
    TORCH_CHECK(!kinds_.empty() && args[0].isTensor(), "castscope: fp32_append_dtype needs a Tensor first argument");
    const at::Tensor& first = args[0].toTensor();
    const bool eligible = at::autocast::is_eligible(first, device_.device);
    const c10::ScalarType out_type = eligible ? at::kFloat : first.scalar_type();
    if (op_record != nullptr)
      record_cast(thread, *op_record, first, at::kFloat, 0, -1,
                  eligible ? std::optional(CastOutcome::kDtypeArgSet) : std::nullopt);
    stack->emplace_back(out_type);
    const ThreadFlagScope<&ThreadBlock::autocast_dtype_arg> dtype_arg(thread);  // explicit_casts.h
    redispatch_->callBoxed(stack);
  }

  const std::optional<c10::OperatorHandle> redispatch_;
  std::once_flag schema_once_;
  std::vector<ArgKind> kinds_;
};


}  // namespace
}  // namespace castscope
