// The policy application both autocast kernels share: an op's casts decided
// exactly as ATen's WrapFunction_ templates decide them, made through the
// same helpers, and recorded.
// Included by dispatch.cc alone: its definitions sit in an anonymous
// namespace, so the kernels are one translation unit with internal linkage,
// as when they were one file: the compiler sees every call, and the profile
// (cmake/CastscopeProfileGuided.cmake) is one file's.
#pragma once

#include <ATen/autocast_mode.h>
#include <c10/util/Exception.h>

#include <string>
#include <utility>

#include "agent/src/dispatch/cast_without_dispatch.h"
#include "agent/src/dispatch/explicit_casts.h"
#include "agent/src/dispatch/kernel_parts.h"
#include "agent/src/numerics/numerics_windows.h"
#include "agent/src/observers/op_probe.h"
#include "agent/src/record/module_scopes.h"

namespace castscope {
namespace {

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
      const OpContext context = current_op_context(runtime_.locations, keys, thread);
      op_record.scope = context.module;
      describe_op_context(op_record.op, region_dtype, context, keys, thread);
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
                            cast_outcome(cast.facts), cast.facts.role,
                            cast.facts.observed ? &*cast.facts.observed : nullptr, cast.facts.seq);
          ++n;
          // Step-free growth evidence (cast_cache_watch.h), after the miss that made it due.
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
    // Step-free growth evidence (cast_cache_watch.h): as in full mode, into the ring.
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
  static std::optional<CastOutcome> cast_outcome(const CastFacts& facts) {
    if (!facts.cast) return std::nullopt;
    return facts.relabelled ? CastOutcome::kRelabelled : CastOutcome::kCast;
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
    {
      const ConversionScope inside(thread);  // its _to_copy is this cast, not an explicit one
      thread.float8_relabelled = false;
      if (direct && facts.role != Role::kWeight && t.scalar_type() != target &&
          at::autocast::is_eligible(t, device_.device) && plain_tensor(t)) {
        result = cast_without_dispatch(t, target);
        facts.direct = true;
      } else {
        result = at::autocast::cached_cast(target, t, device_.device);
      }
    }
    facts.cast = result.unsafeGetTensorImpl() != t.unsafeGetTensorImpl();
    facts.relabelled = thread.float8_relabelled;
    // Autograd recorded it: its gradient's conversion back is autocast's (explicit_casts.h).
    if (facts.cast && facts.role != Role::kInput && op_record != nullptr) note_autocast_cast(thread, result);
    // Whether cached_cast consulted its cache: only for a leaf that needs grad
    // (a weight's role), under a condition the cast does not change. A cast
    // the observer saw the cache return for this source before was the
    // cache's (observe_known, the steady state's hit); otherwise the
    // condition is asked. Compile-time decisions see fake tensors: nothing
    // for the cast-cache watch.
    if (op_record != nullptr && facts.role == Role::kWeight && op_record->op.mode != ExecutionMode::kCompiling)
      observe_cast(thread, t, target, result, facts);
    return result;
  }

  // make_cast's observation of a weight's cast: the memo's answer, else
  // observe's for a cacheable one. Observing fails only short of memory:
  // counted, and the cast is recorded as not observed (the op still runs).
  void observe_cast(ThreadBlock& thread, const at::Tensor& t, c10::ScalarType target, const at::Tensor& result,
                    CastFacts& facts) noexcept {
    const int64_t version = CastCacheWatch::version_of(t);
    CastCacheWatch::Observation seen;
    if (runtime_.cast_cache.observe_known(thread, t, result, version, seen)) [[likely]] {
      facts.observed = seen;
      return;
    }
    try {
      if (CastCacheWatch::cacheable_leaf(t, target, device_.device))
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
          record_cast(thread, *op_record, t, target, arg_index, list_index, cast_outcome(facts),
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
      if (describe_cast_fields(count, cache, t, target, arg_index, cast_outcome(facts), facts.role,
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
                           const CastCacheWatch::Observation* observed = nullptr, uint64_t reserved_seq = 0,
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
      // Step-free growth evidence (cast_cache_watch.h), after the miss that made it due.
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
                                            const CastCacheWatch::Observation* observed, uint64_t reserved_seq) {
    const OpContext context{op_record.op.mode, op_record.op.phase, op_record.op.location, op_record.scope};
    fill_cast_record(r, runtime_.events, op_id_, op_record.thread, policy_, device_.kind, context, reserved_seq,
                     op_record.ts_ns);
    r.cast.op_seq = op_record.seq;
    r.cast.list_index = static_cast<int16_t>(list_index);
    // A weight's cast is its parameter's (the precision map's row), where the module declared it.
    if (role == Role::kWeight) [[unlikely]]
      if (const uint32_t parameter = module_scopes().parameter_of(t.unsafeGetTensorImpl())) r.scope = parameter;
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
                                                   const CastCacheWatch::Observation* observed, bool compiling) {
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

}  // namespace
}  // namespace castscope
