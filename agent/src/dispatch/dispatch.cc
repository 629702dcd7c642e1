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
#include "agent/src/dispatch/dispatch.h"

#include <ATen/autocast_mode.h>
#include <ATen/ops/_autocast_to_full_precision_native.h>
#include <ATen/ops/_autocast_to_reduced_precision_native.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/core/op_registration/infer_schema.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <c10/util/Exception.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/library.h>

#include <array>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <tuple>
#include <type_traits>
#include <utility>

#include "agent/src/context/autocast_keys.h"
#include "agent/src/context/cast_cache_observer.h"
#include "agent/src/dispatch/cast_without_dispatch.h"
#include "agent/src/gpu/gemm_scope.h"
#include "agent/src/gpu/launch_scope.h"
#include "agent/src/numerics/numerics_windows.h"
#include "agent/src/observers/op_probe.h"

namespace castscope {
namespace {

c10::ScalarType to_scalar_type(DType dtype) {
  return dtype == DType::kFloat16 ? c10::ScalarType::Half : c10::ScalarType::BFloat16;
}

// How each schema argument is treated; mirrors the overload set of
// cached_cast / prioritize / set_opt_dtype (anything else passes through).
enum class ArgKind : uint8_t { kOther, kTensor, kOptionalTensor, kTensorList, kOptionalScalarType };

ArgKind classify_arg(const c10::Argument& arg) {
  // The real type: a schema's `ScalarType? dtype` reads as `int?` through
  // type() (the JIT's fake type), which left fp32_set_opt_dtype ops without
  // their float32 dtype (found by torch's CUDA autocast lists on a GPU).
  const auto& type = arg.real_type();
  if (type->kind() == c10::TypeKind::TensorType) return ArgKind::kTensor;
  if (auto optional = type->cast<c10::OptionalType>()) {
    const auto inner = optional->getElementType()->kind();
    if (inner == c10::TypeKind::TensorType) return ArgKind::kOptionalTensor;
    if (inner == c10::TypeKind::ScalarTypeType) return ArgKind::kOptionalScalarType;
    return ArgKind::kOther;
  }
  if (auto list = type->cast<c10::ListType>()) {
    if (list->getElementType()->kind() == c10::TypeKind::TensorType) return ArgKind::kTensorList;
  }
  return ArgKind::kOther;
}

Role role_of(const at::Tensor& t) {
  // What requires_grad() and is_leaf() read, from one read of the tensor's
  // autograd meta: requires_grad is the meta's (virtual: a view's asks its
  // base), and torch::autograd::VariableHooks::is_leaf is "no meta, or no
  // grad_fn_". Through the getters a weight cost ~45 more instructions
  // (is_leaf goes through autograd's hooks and looks the meta up twice).
  const auto* meta = static_cast<const torch::autograd::AutogradMeta*>(t.unsafeGetTensorImpl()->autograd_meta());
  if (meta == nullptr || !meta->requires_grad()) return Role::kInput;
  return meta->grad_fn_ == nullptr ? Role::kWeight : Role::kActivation;
}

// `Record r{}` in eight 16-byte stores, written out: for the zeroing GCC
// emits `rep stos` (16 iterations, and a string operation's start-up on
// every op); a loop of the same stores it would turn back into that.
void zero_record(Record& r) {
  static_assert(sizeof(Record) == 128 && std::is_trivially_copyable_v<Record>);
  using Chunk = long long __attribute__((vector_size(16), may_alias, aligned(8)));
  Chunk* const c = reinterpret_cast<Chunk*>(&r);
  const Chunk zero{};
  c[0] = zero, c[1] = zero, c[2] = zero, c[3] = zero, c[4] = zero, c[5] = zero, c[6] = zero, c[7] = zero;
}

// new_cast_record's record written into `r`, zeroed here first: the kernels
// build each cast's record where it is logged from, with no 128-byte
// temporary to zero and copy (docs/performance.md, "ninth pass").
void fill_cast_record(Record& r, EventLog& log, uint32_t op_id, uint32_t thread, CastPolicy policy, DeviceKind device,
                      const OpContext& context, uint64_t reserved_seq, uint64_t ts_ns) {
  r = Record{};
  EventLog::set_header(r, RecordKind::kCast, thread, reserved_seq != 0 ? reserved_seq : log.next_seq(),
                       ts_ns != 0 ? ts_ns : now_ns());
  r.op_id = op_id;
  r.policy = policy;
  r.device = device;
  r.cast.list_index = -1;
  r.cast.mode = context.mode;
  r.cast.phase = context.phase;
  r.cast.location = context.location;
  r.cast.cache = CacheOutcome::kNotCacheable;
}

}  // namespace

Record new_cast_record(EventLog& log, uint32_t op_id, uint32_t thread, CastPolicy policy, DeviceKind device,
                       const OpContext& context, uint64_t reserved_seq, uint64_t ts_ns) {
  Record r;
  fill_cast_record(r, log, op_id, thread, policy, device, context, reserved_seq, ts_ns);
  return r;
}

namespace {

// Records made while this is set are built (decisions kept for the compile
// capture) but not logged: a compile-time duplicate (compile_capture.h).
// (ThreadBlock's `unlogged`.)
struct UnloggedRecords {
  UnloggedRecords(ThreadBlock& thread, bool on) : thread_(thread), previous_(thread.unlogged) { thread.unlogged = on; }
  ~UnloggedRecords() { thread_.unlogged = previous_; }
  UnloggedRecords(const UnloggedRecords&) = delete;
  UnloggedRecords& operator=(const UnloggedRecords&) = delete;

 private:
  ThreadBlock& thread_;
  bool previous_;
};

// Shape of a cast's source tensor. Symbolic shapes (tracing for export) have
// no concrete sizes: left at zero dims.
void describe_shape(CastFields& cast, const at::Tensor& t) {
  if (t.unsafeGetTensorImpl()->has_symbolic_sizes_strides()) return;
  const auto sizes = t.sizes();
  cast.ndim = static_cast<uint8_t>(sizes.size() > 255 ? 255 : sizes.size());
  for (size_t d = 0; d < sizes.size() && d < static_cast<size_t>(kMaxShapeDims); ++d) cast.shape[d] = sizes[d];
}

// Size of a cast's source tensor in bytes; 0 for a symbolic shape, as its
// dims. `type`: its scalar type, read once by the caller (element_size()
// reads it again through the tensor's TypeMeta).
uint64_t source_bytes(const at::Tensor& t, c10::ScalarType type) {
  const c10::TensorImpl* impl = t.unsafeGetTensorImpl();
  if (impl->has_symbolic_sizes_strides()) return 0;
  return static_cast<uint64_t>(impl->numel()) * c10::elementSize(type);
}
uint64_t source_bytes(const at::Tensor& t) { return source_bytes(t, t.scalar_type()); }

CastOutcome classify_tensor(const at::Tensor& t, c10::ScalarType target, c10::DeviceType device) {
  if (t.scalar_type() == at::kDouble) return CastOutcome::kFloat64;
  if (!t.is_floating_point()) return CastOutcome::kNotFloating;
  if (!at::autocast::is_eligible(t, device)) return CastOutcome::kOtherDevice;
  if (t.scalar_type() == target) return CastOutcome::kAlreadyTarget;
  return CastOutcome::kCast;
}

// The sequence numbers an op reserved for its casts' records when it took its
// own (one fetch_add for all: docs/performance.md); a cast past them takes a
// new one.
struct CastSeqs {
  uint64_t next = 0;
  uint64_t end = 0;
  uint64_t take(EventLog& log) { return next != end ? next++ : log.next_seq(); }
};

// The unboxed kernel's casts whose records wait for the op's: written
// together after the op, so castscope's recording code runs once per op
// instead of between torch's casts, where torch's own code evicted it from
// the instruction cache each time (docs/performance.md, "fifth pass"). Only
// in the steady state: a cast made while compiling or inside a probe or
// numerics window is recorded at once, as the boxed kernel records all of
// them. What a record reads of its source (dtype, shape, role) does not
// change across the op; what the cast cache did, and the source's version,
// which another thread could change meanwhile, are read at the cast.
// What make_cast says of a cast it made, besides the cast: for a recorded op
// (`op_record`) also what the cast cache did, when its observer follows the
// cast (observed at the cast: the source's version then, which another
// thread could change before the record is written), and the seq its
// kernels carry (GPU timing). Written by make_cast where its caller keeps it
// (a pending cast's own), not returned and copied.
struct CastFacts {
  uint64_t seq;
  Role role;    // role_of the source (recorded or direct casts), asked once for cast and record
  // Given to make_cast: may be made with at::_to_copy (its `direct`); then
  // whether it was, counted once the op is recorded.
  bool direct;
  bool cast;    // the result is another tensor: cached_cast cast it
  std::optional<CastCacheObserver::Observation> observed;  // cacheable casts of a recorded op
};
// No initializers: cast_pending writes every member of the ones it uses (in
// aggregate mode only `facts`; the rest is not read then), and a kernel's
// PendingCasts is not zeroed first (~12 instructions a slot).
struct PendingCast {
  const at::Tensor* source;  // the kernel's argument: alive until the kernel returns
  c10::ScalarType target;
  uint16_t arg_index;
  CastFacts facts;  // make_cast's
};
// One slot per tensor argument of the kernel's signature. In aggregate mode
// (`counting`) each cast is described as its counter counts it when it is
// made, into `counts`, and nothing else is kept of it: what a record reads
// would be read the same after the op, and the loop over noted casts after
// it cost ~30 instructions a cast more (docs/performance.md, "seventeenth
// pass").
template <size_t kCapacity>
struct PendingCasts {
  static_assert(kCapacity <= 8, "samples_due holds a bit per cast");
  std::array<PendingCast, kCapacity> casts;  // not counting: the casts to record after the op
  std::array<CastCount, kCapacity> counts;   // counting: the casts described
  size_t size = 0;                           // of casts, or of counts
  bool direct = false;                       // make_cast's `direct` for these casts
  bool counting = false;                     // aggregate mode when the op began
  uint8_t samples_due = 0;                   // counting: bit i, counts[i]'s miss made a cache sample due
  uint64_t made_directly = 0;                // of them, the casts make_cast made so
};

// Everything an autocast op runs inside, built and torn down in this order:
// compile-duplicate records unlogged, the autocast key excluded (as native
// wrappers do), autocast reading as off without the user having turned it
// off, GPU launches carrying the op's seq, cuBLASLt's logger writing into
// the op's record.
struct OpScope {
  OpScope(ThreadBlock& thread, const AutocastDevice& device, bool record, bool compile_duplicate, Record& op_record)
      : unlogged(thread, compile_duplicate),
        no_autocast(device.key),
        inside(thread),
        launches(record && op_record.seq != 0 && gpu_correlates(device.kind == DeviceKind::kCuda), op_record.seq),
        gemms(record ? &op_record.op : nullptr) {}
  UnloggedRecords unlogged;
  c10::impl::ExcludeDispatchKeyGuard no_autocast;
  InsideAutocastKernel inside;
  LaunchScope launches;
  GemmScope gemms;
};

// What the boxed and the unboxed kernel share: the op's policy, its casts and
// its records. They differ only in how they reach the arguments (the
// dispatcher's stack of IValues, or C++ arguments), so both make exactly the
// same decisions and records.
class KernelCore {
 protected:
  KernelCore(RecordingState& runtime, const PolicyEntry& entry, const AutocastDevice& device, uint32_t op_id,
             bool casts_right_to_left)
      : runtime_(runtime),
        policy_(entry.policy),
        dtype_override_(entry.dtype),
        message_(entry.message),
        device_(device),
        op_id_(op_id),
        casts_right_to_left_(casts_right_to_left) {}

  // Fills `op_record` (zeroed by the caller) for the op about to run;
  // `input_dtypes(DType*)` writes the inputs' dtypes and returns how many. False when the op records
  // nothing: recording is off, it is a compile-time duplicate (then
  // `compile_duplicate`), or describing it failed (counted). `region_dtype`:
  // the region's lower-precision dtype, read once by the caller. When it
  // records and takes seqs, the op's seq is taken with `count_casts()` more
  // for its casts (`seqs`), and `included` is the thread's included dispatch
  // keys, read for the context (thread_sees_no_cast_ops asks them again
  // otherwise). `counts_without_seqs`: the caller counts an op that took no
  // seqs whatever the mode when it ends (the unboxed kernel; the boxed one
  // records its casts at once, so it always takes them).
  template <class InputDtypes, class CountCasts>
  bool start_op_record(ThreadBlock& thread, Record& op_record, bool& compile_duplicate, c10::ScalarType region_dtype,
                       InputDtypes&& input_dtypes, CountCasts&& count_casts, CastSeqs& seqs,
                       c10::DispatchKeySet& included, bool counts_without_seqs) {
    if (!g_record_events.load(std::memory_order_relaxed)) [[unlikely]] return false;
    try {
      // The seq last, once the op is known to record (a duplicate takes none).
      EventLog::set_header(op_record, RecordKind::kOp, runtime_.events.thread_id(thread), 0, now_ns());
      op_record.op_id = op_id_;
      op_record.policy = policy_;
      op_record.device = device_.kind;
      // The thread's dispatch keys, read once for the context and the record.
      const c10::impl::LocalDispatchKeySet keys = thread_dispatch_keys();
      included = keys.included_;
      describe_op_context(op_record.op, region_dtype, current_op_context(runtime_.locations, keys, thread), keys, thread);
      const bool compiling = op_record.op.mode == ExecutionMode::kCompiling;
      // Aggregate mode's op records only fold into counters, whose keys hold
      // neither the inputs' dtypes nor the nesting (CounterKey): not read
      // there, but while compiling, whose duplicate check reads the dtypes
      // (docs/performance.md, "tenth pass").
      if (!runtime_.events.aggregating() || compiling) {
        op_record.op.num_inputs = input_dtypes(op_record.op.input_dtypes);
        // ATen has no getter for the nesting depth; this pair of calls reads
        // the thread-local counter and leaves it as it was.
        const int nesting = at::autocast::increment_nesting() - 1;
        at::autocast::decrement_nesting();
        op_record.op.autocast_nesting = static_cast<uint8_t>(nesting < 0 ? 0 : (nesting > 255 ? 255 : nesting));
      }
      // torch.compile traces the same code several times: its records once
      // per compile, its decisions kept every time while collecting.
      if (compiling) [[unlikely]] {
        compile_duplicate = !runtime_.compile.first_in_epoch(compile_record_key(op_record));
        if (compile_duplicate && !CompileCapture::collecting()) return false;
      }
      // Aggregate mode's steady state folds the op and its casts into
      // counters, which hold no seqs: none taken (one shared atomic add per
      // op). Whatever records or correlates by seq takes them as in full
      // mode: compile-time records, probe and numerics windows (their casts
      // recorded at once), GPU launches. An op without them records its
      // casts after it (records_casts_after) and is counted, never logged
      // (the unboxed kernel's `counting`).
      if (!counts_without_seqs || !runtime_.events.aggregating() || compiling || probe_window_open() ||
          numerics_window_open() || gpu_correlates(device_.kind == DeviceKind::kCuda)) {
        const uint64_t casts = count_casts();
        op_record.seq = runtime_.events.reserve_seqs(1 + casts);
        seqs = CastSeqs{op_record.seq + 1, op_record.seq + 1 + casts};
      }
      return true;
    } catch (...) {
      runtime_.events.count_internal_error();
      return false;
    }
  }

  // A COMPILING record about to be logged: kept for the compile capture
  // too while it collects (compile_capture.h), counted when dropped.
  void keep_if_collecting(const Record& r) {
    if (CompileCapture::collecting() && !runtime_.compile.keep_logged(r)) runtime_.events.count_internal_error();
  }

  // `output()` returns the dtype of the op's first tensor output (or
  // kUnspecified); not called when the op failed.
  template <class OutputDtype>
  void finish_op_record(ThreadBlock& thread, Record& r, bool ok, OutputDtype&& output) noexcept {
    try {
      r.op.ok = ok;
      r.op.cpu_duration_ns = now_ns() - r.ts_ns;
      r.op.output = ok ? output() : DType::kUnspecified;
      if (thread.unlogged) return;
      if (r.op.mode == ExecutionMode::kCompiling) [[unlikely]] keep_if_collecting(r);
      runtime_.events.record(r, thread);
    } catch (...) {
      runtime_.events.count_internal_error();
    }
  }

  // The same for the unboxed kernel, with the casts in `pending` (the steady
  // state's, never compiling; none when they were recorded at once): their
  // records are made after the op's time is taken, as record_cast makes them
  // (a cache sample a cast made due right after it), and logged before the
  // op's, all with one look-up of the thread's ring (EventLog::record_op).
  template <class OutputDtype, size_t kPending>
  void finish_op_record(ThreadBlock& thread, Record& r, bool ok, OutputDtype&& output,
                        PendingCasts<kPending>& pending) noexcept {
    try {
      r.op.ok = ok;
      r.op.cpu_duration_ns = now_ns() - r.ts_ns;
      r.op.output = ok ? output() : DType::kUnspecified;
      // Direct casts are counted with the op's records, in the same look-up of the thread's slot.
      // (Counted casts of an op that ends after aggregate mode was turned off are dropped there, counted.)
      if (pending.counting || runtime_.events.aggregating()) {
        count_op_casts(thread, r, pending);
        return;
      }
      std::array<Record, 2 * kPending> before;  // each cast, and the cache sample it may make due
      size_t n = 0;
      for (size_t i = 0; i < pending.size; ++i) {
        const PendingCast& cast = pending.casts[i];
        try {
          CacheOutcome cache = CacheOutcome::kNotCacheable;
          const bool sample_due =
              describe_cast(before[n], cache, r, *cast.source, cast.target, cast.arg_index, -1,
                            cast_outcome(cast.facts.cast), cast.facts.role,
                            cast.facts.observed ? &*cast.facts.observed : nullptr, cast.facts.seq);
          ++n;
          // Step-free growth evidence (cast_cache_observer.h), after the miss that made it due.
          if (sample_due) [[unlikely]] before[n++] = cache_sample_record(runtime_, SampleTrigger::kMisses);
        } catch (...) {
          runtime_.events.count_internal_error();  // that cast's record only, as record_cast
        }
      }
      pending.size = 0;
      if (!thread.unlogged) {
        if (r.op.mode == ExecutionMode::kCompiling) [[unlikely]] keep_if_collecting(r);  // its casts were recorded at once
        runtime_.events.record_op(before.data(), n, r, thread, pending.made_directly);
      } else {
        runtime_.events.count_direct_casts(thread, pending.made_directly);
      }
    } catch (...) {
      runtime_.events.count_internal_error();
    }
  }

  // finish_op_record's aggregate mode: the op's casts, described as their
  // records would be (describe_cast_fields) at the casts (cast_pending) or,
  // for an op begun before aggregate mode was on, now; no records made, and
  // counted with the op's record in one go (EventLog::count_op).
  template <size_t kPending>
  void count_op_casts(ThreadBlock& thread, const Record& r, PendingCasts<kPending>& pending) {
    if (!pending.counting) [[unlikely]] describe_noted_casts(pending);
    // Step-free growth evidence (cast_cache_observer.h): as in full mode, into the ring.
    if (pending.samples_due != 0 && !thread.unlogged) [[unlikely]]
      for (size_t i = 0; i < pending.size; ++i)
        if ((pending.samples_due >> i) & 1)
          runtime_.events.record(cache_sample_record(runtime_, SampleTrigger::kMisses), thread);
    const size_t counted = std::exchange(pending.size, 0);
    if (!thread.unlogged) {
      if (r.op.mode == ExecutionMode::kCompiling) [[unlikely]] keep_if_collecting(r);
      runtime_.events.count_op(r, pending.counts.data(), counted, thread, pending.made_directly);
    } else {
      runtime_.events.count_direct_casts(thread, pending.made_directly);
    }
  }

  // Casts noted, not described (an op that began before aggregate mode was
  // turned on): described now into `pending`'s counts, as count_cast
  // describes them at the cast. Out of line: count_op_casts stays small.
  template <size_t kPending>
  [[gnu::noinline, gnu::cold]] void describe_noted_casts(PendingCasts<kPending>& pending) noexcept {
    const size_t noted = std::exchange(pending.size, 0);
    for (size_t i = 0; i < noted; ++i) {
      const PendingCast& cast = pending.casts[i];
      count_cast(*cast.source, cast.target, cast.arg_index, cast.facts, pending);
    }
  }

  // The lower-precision policy's target: the entry's own dtype, else the
  // region's (`region_dtype`, read once per op by the kernel).
  c10::ScalarType lower_precision(c10::ScalarType region_dtype) const {
    return dtype_override_ == DType::kUnspecified ? region_dtype : to_scalar_type(dtype_override_);
  }

  // What a made cast's record says: kCast when cached_cast returned another
  // tensor (it does only when the source is eligible and of another type,
  // which is classify_tensor's kCast), else classify_tensor decides why not.
  static std::optional<CastOutcome> cast_outcome(bool cast) {
    return cast ? std::optional(CastOutcome::kCast) : std::nullopt;
  }

  // A defined tensor's cast to `target`, as cached_cast makes it natively;
  // what it says of the cast into `facts`. `direct` (thread_sees_no_cast_ops,
  // asked once per op): a cast cached_cast would not cache (its source's role
  // is not a weight's: the cache keeps only leaves that need grad) is made by
  // cast_without_dispatch, the op Tensor::to makes it with (at::_to_copy with
  // the dtype alone) after the RecordFunction draw to's dispatch takes: the
  // same kernel, tensor and observers, without the dispatch through to.dtype
  // and its composite wrapper (docs/performance.md, "eleventh pass").
  // `direct` comes in `facts.direct` (one argument fewer on the stack).
  at::Tensor make_cast(ThreadBlock& thread, const at::Tensor& t, c10::ScalarType target, const Record* op_record,
                       CastSeqs& seqs, CastFacts& facts) {
    const bool direct = facts.direct;
    facts.role = op_record != nullptr || direct ? role_of(t) : Role::kInput;
    // An op that took no seqs (start_op_record) gives its casts none.
    facts.seq = op_record != nullptr && op_record->seq != 0 ? seqs.take(runtime_.events) : 0;
    facts.direct = false;
    facts.observed.reset();
    // (An op that took no seqs gives its launches no id: correlation turned on during it.)
    const LaunchScope launches(facts.seq != 0 && gpu_correlates(device_.kind == DeviceKind::kCuda),
                               facts.seq | kCastLaunchBit);
    at::Tensor result;
    if (direct && facts.role != Role::kWeight && t.scalar_type() != target &&
        at::autocast::is_eligible(t, device_.device) && plain_tensor(t)) {
      result = cast_without_dispatch(t, target);
      facts.direct = true;
    } else {
      result = at::autocast::cached_cast(target, t, device_.device);
    }
    facts.cast = result.unsafeGetTensorImpl() != t.unsafeGetTensorImpl();
    // Whether cached_cast consulted its cache: only for a leaf that needs grad
    // (a weight's role), under a condition the cast does not change. A cast
    // the observer saw the cache return for this source before was the
    // cache's (observe_known, the steady state's hit); otherwise the
    // condition is asked. Compile-time decisions see fake tensors: nothing
    // for the cache observer.
    if (op_record != nullptr && facts.role == Role::kWeight && op_record->op.mode != ExecutionMode::kCompiling)
      observe_cast(thread, t, target, result, facts);
    return result;
  }

  // make_cast's observation of a weight's cast: the memo's answer, else
  // observe's for a cacheable one. Observing fails only short of memory:
  // counted, and the cast is recorded as not observed (the op still runs).
  void observe_cast(ThreadBlock& thread, const at::Tensor& t, c10::ScalarType target, const at::Tensor& result,
                    CastFacts& facts) noexcept {
    const int64_t version = CastCacheObserver::version_of(t);
    CastCacheObserver::Observation seen;
    if (runtime_.cast_cache.observe_known(thread, t, result, version, seen)) [[likely]] {
      facts.observed = seen;
      return;
    }
    try {
      if (CastCacheObserver::cacheable_leaf(t, target, device_.device))
        facts.observed = runtime_.cast_cache.observe(thread, t, result, version);
    } catch (...) {
      runtime_.events.count_internal_error();
    }
  }

  // `direct`: as make_cast's.
  at::Tensor cast_one(const at::Tensor& t, c10::ScalarType target, size_t arg_index, int list_index, Record* op_record,
                      ThreadBlock& thread, CastSeqs& seqs, bool direct = false) {
    if (!t.defined()) return t;
    CastFacts facts;
    facts.direct = direct;
    at::Tensor result = make_cast(thread, t, target, op_record, seqs, facts);
    if (op_record != nullptr) {
      const CacheOutcome cache =
          record_cast(thread, *op_record, t, target, arg_index, list_index, cast_outcome(facts.cast),
                      facts.observed ? &*facts.observed : nullptr, facts.seq, facts.role);
      if (facts.direct) runtime_.events.count_direct_casts(thread, 1);
      // Numerics windows: a cast the cache served was checked when it was made.
      if (checks_numerics(op_record) && facts.cast && cache != CacheOutcome::kHit &&
          cache != CacheOutcome::kStaleHit) [[unlikely]]
        numerics_check_cast(*op_record, static_cast<uint16_t>(arg_index), t, result);
    }
    return result;
  }

  // cast_one's steady state (the unboxed kernel, recording, no window open,
  // not compiling): the cast, and a note for its record after the op (in
  // aggregate mode its count, count_cast).
  template <size_t kPending>
  at::Tensor cast_pending(ThreadBlock& thread, const at::Tensor& t, c10::ScalarType target, size_t arg_index,
                          const Record& op_record, CastSeqs& seqs, PendingCasts<kPending>& pending) {
    if (!t.defined()) return t;
    // The next slot, counted once the cast is made: a cast that raised has no record, as in cast_one.
    PendingCast& cast = pending.casts[pending.size];
    cast.facts.direct = pending.direct;
    at::Tensor result = make_cast(thread, t, target, &op_record, seqs, cast.facts);
    pending.made_directly += cast.facts.direct ? 1 : 0;
    if (pending.counting) {
      count_cast(t, target, arg_index, cast.facts, pending);
      return result;
    }
    ++pending.size;
    cast.source = &t;
    cast.target = target;
    cast.arg_index = static_cast<uint16_t>(arg_index);
    return result;
  }

  // cast_pending's aggregate mode: the cast made, described into the next of
  // `pending`'s counts. Describing never fails the op: a failure is counted
  // and that cast not (as count_op_casts did after the op). Inlined: as a
  // call, its frame cost ~30 instructions a cast.
  template <size_t kPending>
  [[gnu::always_inline]] void count_cast(const at::Tensor& t, c10::ScalarType target, size_t arg_index, const CastFacts& facts,
                  PendingCasts<kPending>& pending) noexcept {
    try {
      CastCount& count = pending.counts[pending.size];
      // What describe_cast_fields leaves to the caller: a cast the cache's observer does not follow.
      count.cache = CacheOutcome::kNotCacheable;
      count.source_version = 0;
      count.cached_version = 0;
      CacheOutcome cache = CacheOutcome::kNotCacheable;
      if (describe_cast_fields(count, cache, t, target, arg_index, cast_outcome(facts.cast), facts.role,
                               facts.observed ? &*facts.observed : nullptr, false)) [[unlikely]]
        pending.samples_due |= static_cast<uint8_t>(1u << pending.size);
      ++pending.size;
    } catch (...) {
      runtime_.events.count_internal_error();
    }
  }

  // Whether this op's casts are recorded after it (cast_pending) or at once
  // (cast_one): windows and compile-time records need the latter. Asked once
  // per op, before its casts. An op that took no seqs (aggregate mode's
  // steady state, start_op_record) records after it, though a window opened
  // since: it is not checked, as an op begun before a window opens is not.
  static bool records_casts_after(const Record* op_record) {
    return op_record != nullptr && op_record->op.mode != ExecutionMode::kCompiling &&
           (op_record->seq == 0 || (!numerics_window_open() && !probe_window_open()));
  }

  // Numerics windows: the op's inputs as it received them and its outputs.
  // Not an op that took no seqs (no window open when it started).
  static bool checks_numerics(const Record* op_record) {
    return op_record != nullptr && numerics_window_open() && op_record->op.mode != ExecutionMode::kCompiling &&
           op_record->seq != 0;
  }

  // Records one decision. `forced` replaces the computed outcome (dtype-arg
  // policies decide by the first argument, not by a cast; a cast made is
  // kCast). `observed`: what the cast cache's observer saw at the cast
  // (make_cast), nullptr when it does not follow it. `role`: the source's,
  // when the caller has it (make_cast's).
  // Returns what the cast cache did (kNotCacheable when not observed).
  CacheOutcome record_cast(ThreadBlock& thread, const Record& op_record, const at::Tensor& t, c10::ScalarType target,
                           size_t arg_index, int list_index, std::optional<CastOutcome> forced,
                           const CastCacheObserver::Observation* observed = nullptr, uint64_t reserved_seq = 0,
                           std::optional<Role> role = std::nullopt) noexcept {
    CacheOutcome cache = CacheOutcome::kNotCacheable;
    try {
      Record r;
      const bool sample_due = describe_cast(r, cache, op_record, t, target, arg_index, list_index, forced,
                                            role ? *role : role_of(t), observed, reserved_seq);
      if (r.cast.mode == ExecutionMode::kCompiling) [[unlikely]] {
        if (r.cast.outcome == CastOutcome::kCast && CompileCapture::collecting() &&
            !runtime_.compile.keep(CompileDecision{op_id_, policy_, device_.kind, r.cast}))
          runtime_.events.count_internal_error();
        if (thread.unlogged) return cache;
        keep_if_collecting(r);
      }
      runtime_.events.record(r, thread);
      // Step-free growth evidence (cast_cache_observer.h), after the miss that made it due.
      if (sample_due) runtime_.events.record(cache_sample_record(runtime_, SampleTrigger::kMisses));
    } catch (...) {
      runtime_.events.count_internal_error();
    }
    return cache;
  }

  // record_cast's record, made in `r`, not logged; true when the cast cache's
  // observer said a cache sample is due after it. May throw; `cache` is
  // what the cast cache did, set first, so a throw after that still
  // reports it (cast_one's numerics check needs it).
  // Inlined: finish_op_record's loop runs it per cast (as a call, 39 more
  // instructions per op; docs/performance.md, "tenth pass").
  [[gnu::always_inline]] bool describe_cast(Record& r, CacheOutcome& cache, const Record& op_record,
                                            const at::Tensor& t, c10::ScalarType target, size_t arg_index,
                                            int list_index, std::optional<CastOutcome> forced, Role role,
                                            const CastCacheObserver::Observation* observed, uint64_t reserved_seq) {
    const OpContext context{op_record.op.mode, op_record.op.phase, op_record.op.location};
    fill_cast_record(r, runtime_.events, op_id_, op_record.thread, policy_, device_.kind, context, reserved_seq,
                     op_record.ts_ns);
    r.cast.op_seq = op_record.seq;
    r.cast.list_index = static_cast<int16_t>(list_index);
    const bool sample_due = describe_cast_fields(r.cast, cache, t, target, arg_index, forced, role, observed,
                                                 r.cast.mode == ExecutionMode::kCompiling);
    describe_shape(r.cast, t);
    return sample_due;
  }

  // What a cast's record (CastFields) and its aggregate-mode counter
  // (CastCount) both say of it, written into `fields`, whose other members
  // the caller fills; `role` is role_of(t), asked once by the caller,
  // `observed` as record_cast's. Returns and throws as describe_cast.
  template <class Fields>
  [[gnu::always_inline]] bool describe_cast_fields(Fields& fields, CacheOutcome& cache, const at::Tensor& t,
                                                   c10::ScalarType target, size_t arg_index,
                                                   std::optional<CastOutcome> forced, Role role,
                                                   const CastCacheObserver::Observation* observed, bool compiling) {
    bool sample_due = false;
    if (observed != nullptr) {
      sample_due = observed->sample_due;
      fields.cache = cache = observed->outcome;
      fields.source_version = static_cast<uint32_t>(observed->source_version);
      fields.cached_version = static_cast<uint32_t>(observed->cached_version);
    }
    fields.arg_index = static_cast<uint16_t>(arg_index);
    const c10::ScalarType source_type = t.scalar_type();
    fields.src = to_dtype(source_type);
    fields.dst = to_dtype(target);
    // Not value_or: its argument would classify the tensor even when forced.
    fields.outcome = forced ? *forced : classify_tensor(t, target, device_.device);
    fields.role = role;
    fields.bytes = source_bytes(t, source_type);
    if (!compiling) fields.round_trip = fields.outcome == CastOutcome::kCast && probe_is_round_trip(t, target);
    return sample_due;
  }

  RecordingState& runtime_;
  const CastPolicy policy_;
  const DType dtype_override_;
  const std::string message_;
  const AutocastDevice& device_;
  const uint32_t op_id_;
  // Native autocast's order for an op's casts (native_cast_order.h), read
  // by the registry before castscope's kernels replace the native ones.
  const bool casts_right_to_left_;
};

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
    redispatch_->callBoxed(stack);
  }

  const std::optional<c10::OperatorHandle> redispatch_;
  std::once_flag schema_once_;
  std::vector<ArgKind> kinds_;
};

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
  at::Tensor result = at::native::_autocast_to_reduced_precision(self, cuda_enabled, cpu_enabled, cuda_dtype, cpu_dtype);
  record_jit_cast(g_reduced_precision_op, CastPolicy::kLowerPrecisionFp, self, result);
  return result;
}

at::Tensor jit_to_full_precision(const at::Tensor& self, bool cuda_enabled, bool cpu_enabled) {
  at::Tensor result = at::native::_autocast_to_full_precision(self, cuda_enabled, cpu_enabled);
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

std::vector<std::string> DispatchRegistry::register_policies(const PolicySet& policies) {
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
  return errors;
}

}  // namespace castscope
