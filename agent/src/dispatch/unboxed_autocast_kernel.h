// The unboxed autocast kernel: the common signatures (mm, linear, addmm,
// conv), called with C++ arguments.
// Included by dispatch.cc alone: its definitions sit in an anonymous
// namespace, so the kernels are one translation unit with internal linkage,
// as when they were one file: the compiler sees every call, and the profile
// (cmake/CastscopeProfileGuided.cmake) is one file's.
#pragma once

#include <atomic>
#include <mutex>
#include <tuple>
#include <vector>

#include "agent/src/dispatch/kernel_core.h"

namespace castscope {
namespace {

// The unboxed kernel: the same policy and records as AutocastKernel, for ops
// whose C++ signature is one of those unboxed_kernel tries (mm, linear,
// conv2d, addmm and their like) and whose policy casts every tensor argument to one
// type. The dispatcher calls it with C++ arguments, as it calls native
// autocast's wrappers, so no IValue stack is built for these ops (about a
// fifth of the kernel's cost on an 8x8 mm, docs/performance.md).
template <class Signature>
class UnboxedAutocastKernel;

template <class Return, class... Args>
class UnboxedAutocastKernel<Return(Args...)> final : public c10::OperatorKernel, KernelCore {
 public:
  UnboxedAutocastKernel(RecordingState& runtime, const PolicyEntry& entry, const AutocastDevice& device, uint32_t op_id,
                        bool casts_right_to_left, const c10::OperatorHandle& op)
      : KernelCore(runtime, entry, device, op_id, casts_right_to_left), op_(op.typed<Return(Args...)>()) {
    for (const auto& arg : op.schema().arguments()) arg_names_.push_back(arg.name());
  }

  Return operator()(Args... args) {
    // As the boxed kernel does on the op's first call.
    // (std::call_once alone costs a library call and TLS writes on every call.)
    if (!names_set_.load(std::memory_order_acquire)) [[unlikely]]
      std::call_once(names_once_, [&] {
        runtime_.events.set_arg_names(op_id_, arg_names_);
        names_set_.store(true, std::memory_order_release);
      });
    ThreadBlock& thread = this_thread_block();
    Record op_record;
    zero_record(op_record);
    bool compile_duplicate = false;
    // Read once (a call into libtorch): the record's autocast dtype and the casts' target.
    const c10::ScalarType region_dtype = at::autocast::get_lower_precision_fp_from_device_type(device_.device);
    CastSeqs seqs;
    c10::DispatchKeySet included;  // the thread's, read by start_op_record when it records
    const bool record = start_op_record(
        thread, op_record, compile_duplicate, region_dtype,
        [&](DType* out) {
          uint8_t n = 0;
          (add_input_dtype(args, out, n), ...);
          return n;
        },
        // Every defined tensor argument is cast and recorded: their seqs are taken with the op's.
        [&] {
          uint64_t casts = 0;
          (count_tensor(args, casts), ...);
          return casts;
        },
        seqs, included, true);
    const OpScope scope(thread, device_, record, compile_duplicate, op_record);
    Record* const op_record_or_null = record ? &op_record : nullptr;
    Pending pending;
    Pending* const casts_after = records_casts_after(op_record_or_null) ? &pending : nullptr;
    // The included keys are start_op_record's: OpScope changes only the excluded ones.
    if (casts_after != nullptr) {
      pending.direct = thread_sees_no_cast_ops(included);
      // An op that took no seqs is counted whatever the mode now: count_op
      // drops it, counted, if aggregate mode was turned off meanwhile.
      pending.counting = op_record.seq == 0 || runtime_.events.aggregating();
    }
    try {
      c10::ScalarType target = at::kFloat;
      if (policy_ == CastPolicy::kLowerPrecisionFp) target = lower_precision(region_dtype);
      if (policy_ == CastPolicy::kPromote) {
        target = region_dtype;
        (promote(args, target), ...);
      }
      Return out =
          cast_and_call(std::index_sequence_for<Args...>{}, target, op_record_or_null, thread, seqs, casts_after, args...);
      if (record)
        finish_op_record(
            thread, op_record, true, [&] { return out.defined() ? to_dtype(out.scalar_type()) : DType::kUnspecified; },
            pending);
      return out;
    } catch (...) {
      if (record) finish_op_record(thread, op_record, false, [] { return DType::kUnspecified; }, pending);
      throw;
    }
  }

 private:
  // A tensor argument's slot holds its cast (a new tensor); any other
  // argument has none and is passed on as it came.
  struct NotCast {};
  template <class Arg>
  static constexpr bool kMayBeCast = std::is_same_v<std::decay_t<Arg>, at::Tensor> ||
                                     std::is_same_v<std::decay_t<Arg>, std::optional<at::Tensor>>;
  template <class Arg>
  using Slot = std::conditional_t<kMayBeCast<Arg>, std::decay_t<Arg>, NotCast>;
  // A pending cast for each argument that may be cast.
  using Pending = PendingCasts<(kMayBeCast<Args> + ... + 0)>;

  // The casts run in native autocast's order (native_cast_order.h), as the
  // boxed kernel's do: a comma fold runs left to right, over the positions
  // reversed for right to left. Each cast lands in its argument's slot, and
  // the slots, a tuple in argument order, let go of the casts first argument
  // first: on a libtorch that casts right to left (the wheels), the last made
  // first, as native autocast's temporaries, so a memory profile sees the
  // same allocations and frees (a tuple in the order made, 25 instructions
  // cheaper per linear, frees the first made first).
  template <size_t... Index>
  Return cast_and_call(std::index_sequence<Index...> /*positions*/, c10::ScalarType target, Record* op_record,
                       ThreadBlock& thread, CastSeqs& seqs, Pending* pending, Args&... args) {
    std::tuple<Slot<Args>...> casted;
    const std::tuple<Args&...> in{args...};
    const auto cast_at = [&]<size_t I>() {
      cast_into(std::get<I>(casted), std::get<I>(in), target, I, op_record, thread, seqs, pending);
    };
    constexpr size_t kLast = sizeof...(Args) - 1;
    if (casts_right_to_left_) {
      (cast_at.template operator()<kLast - Index>(), ...);
    } else {
      (cast_at.template operator()<Index>(), ...);
    }
    Return out = op_.call(pass(std::get<Index>(casted), args)...);
    // An op is checked whole or not at all: one whose casts were not (no
    // window when it started) is not, though a window opened meanwhile.
    if (pending == nullptr && checks_numerics(op_record)) [[unlikely]] {
      std::vector<at::Tensor> inputs;
      std::apply([&inputs](const auto&... a) { (add_checked_input(a, inputs), ...); }, casted);
      const at::Tensor outputs[] = {out};
      numerics_check_op(*op_record, inputs, outputs);
    }
    return out;
  }

  static void add_checked_input(const at::Tensor& t, std::vector<at::Tensor>& out) { out.push_back(t); }
  static void add_checked_input(const std::optional<at::Tensor>& t, std::vector<at::Tensor>& out) {
    if (t.has_value()) out.push_back(*t);
  }
  template <class Other>
  static void add_checked_input(const Other& /*other*/, std::vector<at::Tensor>& /*out*/) {}

  // `pending`: casts recorded after the op (records_casts_after), else nullptr.
  void cast_into(at::Tensor& slot, const at::Tensor& t, c10::ScalarType target, size_t index, Record* op_record,
                 ThreadBlock& thread, CastSeqs& seqs, Pending* pending) {
    slot = pending != nullptr ? cast_pending(thread, t, target, index, *op_record, seqs, *pending)
                              : cast_one(t, target, index, -1, op_record, thread, seqs);
  }
  void cast_into(std::optional<at::Tensor>& slot, const std::optional<at::Tensor>& t, c10::ScalarType target,
                 size_t index, Record* op_record, ThreadBlock& thread, CastSeqs& seqs, Pending* pending) {
    if (!t.has_value()) return;
    slot.emplace();
    cast_into(*slot, *t, target, index, op_record, thread, seqs, pending);
  }
  template <class Other>
  static void cast_into(NotCast& /*slot*/, const Other& /*other*/, c10::ScalarType /*target*/, size_t /*index*/,
                        Record* /*op_record*/, ThreadBlock& /*thread*/, CastSeqs& /*seqs*/, Pending* /*pending*/) {}

  // What the op is called with: an argument's cast, or the argument itself.
  static const at::Tensor& pass(const at::Tensor& cast, const at::Tensor& /*arg*/) { return cast; }
  static const std::optional<at::Tensor>& pass(const std::optional<at::Tensor>& cast,
                                               const std::optional<at::Tensor>& /*arg*/) {
    return cast;
  }
  template <class Other>
  static Other& pass(const NotCast& /*slot*/, Other& arg) {
    return arg;
  }

  // What cast_one records a cast for: a defined tensor.
  static void count_tensor(const at::Tensor& t, uint64_t& n) { n += t.defined() ? 1 : 0; }
  static void count_tensor(const std::optional<at::Tensor>& t, uint64_t& n) {
    if (t.has_value()) count_tensor(*t, n);
  }
  template <class Other>
  static void count_tensor(const Other& /*other*/, uint64_t& /*n*/) {}

  static void add_input_dtype(const at::Tensor& t, DType* out, uint8_t& n) {
    if (n < kMaxOpInputDtypes && t.defined()) out[n++] = to_dtype(t.scalar_type());
  }
  static void add_input_dtype(const std::optional<at::Tensor>& t, DType* out, uint8_t& n) {
    if (t.has_value()) add_input_dtype(*t, out, n);
  }
  template <class Other>
  static void add_input_dtype(const Other& /*other*/, DType* /*out*/, uint8_t& /*n*/) {}

  // As AutocastKernel::promote_type: Tensor arguments only, not Tensor?.
  void promote(const at::Tensor& t, c10::ScalarType& current) const {
    if (t.defined()) current = at::autocast::prioritize(current, t, device_.device);
  }
  template <class Other>
  void promote(const Other& /*other*/, c10::ScalarType& /*current*/) const {}

  c10::TypedOperatorHandle<Return(Args...)> op_;
  std::vector<std::string> arg_names_;
  std::once_flag names_once_;
  std::atomic<bool> names_set_{false};
};


}  // namespace
}  // namespace castscope
