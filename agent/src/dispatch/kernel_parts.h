// What castscope's autocast kernels build an op's casts and records from:
// how a schema argument is treated, a source tensor's role, shape and bytes,
// records zeroed and filled in place, the sequence numbers and pending casts
// of one op, and the scope an op runs inside.
// Included by dispatch.cc alone: its definitions sit in an anonymous
// namespace, so the kernels are one translation unit with internal linkage,
// as when they were one file: the compiler sees every call, and the profile
// (cmake/CastscopeProfileGuided.cmake) is one file's.
#pragma once

#include <ATen/autocast_mode.h>
#include <c10/core/impl/LocalDispatchKeySet.h>
#include <torch/csrc/autograd/variable.h>

#include <array>
#include <optional>
#include <type_traits>

#include "agent/src/context/autocast_keys.h"
#include "agent/src/context/cast_cache_watch.h"
#include "agent/src/dispatch/dispatch.h"
#include "agent/src/gpu/gemm_scope.h"
#include "agent/src/gpu/launch_scope.h"

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
  r.scope = context.module;
  r.cast.list_index = -1;
  r.cast.mode = context.mode;
  r.cast.phase = context.phase;
  r.cast.location = context.location;
  r.cast.cache = CacheOutcome::kNotCacheable;
  r.cast.maker = CastMaker::kAutocast;
}


// Records made while this is set are built (decisions kept for the compile
// capture) but not logged: a compile-time duplicate (compile_capture.h).
// (ThreadBlock's `unlogged`.)
using UnloggedRecords = ThreadFlagScope<&ThreadBlock::unlogged>;

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
  bool relabelled;  // a subclass took it as a new dtype label (castscope_float8_relabelled)
  std::optional<CastCacheWatch::Observation> observed;  // cacheable casts of a recorded op
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

}  // namespace
}  // namespace castscope
