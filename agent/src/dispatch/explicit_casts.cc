#include "agent/src/dispatch/explicit_casts.h"

#include "agent/src/record/module_scopes.h"

#include <ATen/ops/_chunk_cat_compositeexplicitautograd_dispatch.h>
#include <ATen/ops/_foreach_copy_compositeexplicitautograd_dispatch.h>
#include <ATen/ops/_to_copy_compositeexplicitautograd_dispatch.h>
#include <ATen/ops/_to_copy_ops.h>
#include <ATen/ops/copy_compositeexplicitautograd_dispatch.h>
#include <ATen/ops/copy_ops.h>
#include <c10/core/InferenceMode.h>
#if __has_include(<torch/csrc/autograd/node.h>)
#include <torch/csrc/autograd/node.h>
#else  // torch before 2.12 (the GPU machine's 2.11) declares Node in function.h
#include <torch/csrc/autograd/function.h>
#endif
#include <torch/csrc/autograd/variable.h>
#include <torch/library.h>

#include <array>
#include <atomic>
#include <mutex>
#include <unordered_set>
#include <type_traits>
#include <utility>
#include <vector>

#include "agent/src/context/op_context.h"
#include "agent/src/context/recording_state.h"
#include "agent/src/dispatch/dispatch.h"
#include "agent/src/dispatch/float8_scaling.h"
#include "agent/src/numerics/numerics_windows.h"

namespace castscope {
namespace {

std::atomic<RecordingState*> g_runtime{nullptr};
uint32_t g_to_copy_op = 0;
uint32_t g_copy_op = 0;
uint32_t g_foreach_copy_op = 0;
uint32_t g_chunk_cat_op = 0;

// A grad_fn, named so that a freed node's address reused by a later one does
// not match: its sequence number differs.
struct NodeKey {
  const void* node;
  uint64_t sequence_nr;
  bool operator==(const NodeKey&) const = default;
};
struct NodeKeyHash {
  size_t operator()(const NodeKey& k) const { return std::hash<const void*>()(k.node) ^ (k.sequence_nr * 0x9e3779b97f4a7c15ull); }
};

// Autocast's casts that autograd recorded, the latest two generations of
// kGeneration each: a graph is usually run backward within one step, and one
// that never is (evaluation under grad mode) ages out instead of growing the
// set. A backward conversion older than that reads as BACKWARD.
class AutocastCastNodes {
 public:
  static constexpr size_t kGeneration = size_t{1} << 16;
  void add(NodeKey key) {
    std::unordered_set<NodeKey, NodeKeyHash> retired;  // freed after the lock is let go
    std::lock_guard<std::mutex> lock(mutex_);
    if (current_.size() >= kGeneration) {
      retired = std::exchange(previous_, std::exchange(current_, {}));
    }
    current_.insert(key);
  }
  bool contains(NodeKey key) {
    std::lock_guard<std::mutex> lock(mutex_);
    return current_.contains(key) || previous_.contains(key);
  }

 private:
  std::mutex mutex_;
  std::unordered_set<NodeKey, NodeKeyHash> current_, previous_;
};

AutocastCastNodes& autocast_cast_nodes() {
  static auto* nodes = new AutocastCastNodes;  // never destroyed: kernels may run during exit
  return *nodes;
}

// What a conversion's source is for. Autograd's own conversions in the
// backward convert gradients (ToCopyBackward0, and an input's gradient to
// its dtype); any other conversion's source is what it is (a library's in
// the backward converts parameters too: FSDP's all-gather).
Role conversion_role(const at::Tensor& source, CastMaker maker) {
  if (maker == CastMaker::kBackward || maker == CastMaker::kAutocastBackward) return Role::kGradient;
  if (!source.requires_grad()) return Role::kInput;
  return source.is_leaf() ? Role::kWeight : Role::kActivation;
}

// In the backward: a gradient conversion of one of autocast's casts (the
// node running is the cast's ToCopyBackward0), else autograd's own.
CastMaker backward_maker() {
  const auto node = torch::autograd::get_current_node();  // intrusive_ptr in 2.14, shared_ptr before
  if (node && autocast_cast_nodes().contains(NodeKey{node.get(), node->sequence_nr()}))
    return CastMaker::kAutocastBackward;
  return CastMaker::kBackward;
}

// The calling thread's last few explicit conversions' results: a conversion
// of one of them straight back to the dtype it came from, at the same line,
// is a round trip (CastFields::round_trip; cast-round-trip). A result is
// known by its TensorImpl, data and size (a freed one's address reused by
// another tensor would need all three alike, and the dtypes).
struct RecentConversion {
  const void* impl = nullptr;
  const void* data = nullptr;
  int64_t numel = 0;
  c10::ScalarType from = c10::ScalarType::Undefined, to = c10::ScalarType::Undefined;
  uint32_t location = 0;
};
constexpr size_t kRecentConversions = 4;
thread_local std::array<RecentConversion, kRecentConversions> t_recent;
thread_local size_t t_recent_next = 0;

RecentConversion conversion_result(const at::Tensor& result, c10::ScalarType from, uint32_t location) {
  const c10::TensorImpl* impl = result.unsafeGetTensorImpl();
  return {impl, impl->has_storage() ? impl->storage().data() : nullptr, impl->numel(), from, result.scalar_type(),
          location};
}

// Whether converting `source` to `target` at `location` undoes one of the thread's recent conversions.
bool undoes_recent_conversion(const at::Tensor& source, c10::ScalarType target, uint32_t location) {
  const RecentConversion now = conversion_result(source, target, location);
  for (const RecentConversion& recent : t_recent)
    if (recent.impl == now.impl && recent.data == now.data && recent.numel == now.numel && recent.to == now.to &&
        recent.from == target && recent.location == location)
      return true;
  return false;
}

void remember_conversion(const at::Tensor& result, c10::ScalarType from, uint32_t location) {
  t_recent[t_recent_next] = conversion_result(result, from, location);
  t_recent_next = (t_recent_next + 1) % kRecentConversions;
}

// Whether a conversion made now is recorded: castscope attached and
// recording, and not one castscope's autocast kernel or an enclosing
// conversion makes (those record themselves).
// Only a conversion that came through its autograd kernel (DispatchedConversion
// below): one a backend kernel makes inside (TensorIterator's CPU promotion
// of mixed-dtype inputs, an index op's index conversion) reaches the backend
// key directly, with autograd's keys excluded by the kernel's own autograd
// wrapper, as a dispatch mode does not see it either. Under inference mode
// autograd's kernels never run: every conversion there is recorded.
// A compiled graph's conversions are its own, recorded from the graph.
// The runtime to record into, or nullptr; loaded once by the caller (a
// detach on another thread may clear it meanwhile). `dispatched_only`: as
// above (the list copies are recorded wherever they are called).
RecordingState* records_conversion(ThreadBlock& thread, bool dispatched_only = true) {
  if (!g_record_events.load(std::memory_order_relaxed) || thread.making_conversion || thread.unlogged ||
      thread.compiled_graph_depth != 0 ||
      (dispatched_only && !(thread.dispatched_conversion || c10::InferenceMode::is_enabled())))
    return nullptr;
  return g_runtime.load(std::memory_order_acquire);
}

// Set by the kernels on autograd's keys while the conversion they pass on
// runs: what the backend kernels above ask.
using DispatchedConversion = ThreadFlagScope<&ThreadBlock::dispatched_conversion>;

// The key set that runs autograd's own kernel for the op next: this kernel
// sits on AutogradCPU / AutogradCUDA, and the Autograd alias kernel
// (VariableType) fills AutogradOther too. The keys above autograd's are
// dropped, as any kernel's redispatch drops those above its own (left in,
// the Python dispatcher torch.compile turns on would pick this kernel again).
c10::DispatchKeySet to_autograd_kernel(c10::DispatchKeySet ks) {
  return (ks & c10::after_autograd_keyset) | c10::DispatchKeySet(c10::DispatchKey::AutogradOther);
}

// The record of a conversion of `source` to `target` about to be made.
// False when it records nothing (compile-time tracing, or describing failed: counted).
bool describe_conversion(Record& r, RecordingState& runtime, ThreadBlock& thread, const at::Tensor& source,
                         c10::ScalarType target, uint32_t op_id, uint16_t arg_index, DeviceKind device) noexcept {
  try {
    const OpContext context = current_op_context(runtime.locations, thread_dispatch_keys(), thread);
    if (context.mode == ExecutionMode::kCompiling) return false;  // fake tensors: nothing converted
    r = new_cast_record(runtime.events, op_id, runtime.events.thread_id(thread), CastPolicy::kUnspecified, device,
                        context);
    CastFields& cast = r.cast;
    cast.arg_index = arg_index;
    cast.src = to_dtype(source.scalar_type());
    cast.dst = to_dtype(target);
    cast.outcome = CastOutcome::kCast;
    // A maker library's code between the conversion and the user's line made it (forward or backward).
    const CastMaker library = runtime.locations.library_of(context.location);
    // An op autocast set a dtype argument for converts its input itself (softmax's toType): autocast's.
    cast.maker = thread.autocast_dtype_arg          ? CastMaker::kAutocast
                 : library != CastMaker::kUnspecified ? library
                 : context.phase == Phase::kBackward  ? backward_maker()
                                                      : CastMaker::kExplicit;
    cast.role = conversion_role(source, cast.maker);
    if (cast.role == Role::kWeight)  // a parameter's conversion: its row in the precision map
      if (const uint32_t parameter = module_scopes().parameter_of(source.unsafeGetTensorImpl())) r.scope = parameter;
    if (thread.float8 != nullptr) {  // a library's float8 conversion: the role it named, and its scale
      // torchao's bracket says who made it where no torchao frame is on the
      // stack to read (its backward on autograd's device threads).
      cast.maker = CastMaker::kTorchao;
      cast.role = thread.float8->role;
      describe_float8_scaling(*thread.float8, target, cast);
    }
    const c10::TensorImpl* impl = source.unsafeGetTensorImpl();
    if (!impl->has_symbolic_sizes_strides()) {
      const auto sizes = impl->sizes();
      cast.ndim = static_cast<uint8_t>(sizes.size() > 255 ? 255 : sizes.size());
      for (size_t d = 0; d < sizes.size() && d < static_cast<size_t>(kMaxShapeDims); ++d) cast.shape[d] = sizes[d];
      cast.bytes = static_cast<uint64_t>(impl->numel()) * source.element_size();
    }
    return true;
  } catch (...) {
    runtime.events.count_internal_error();
    return false;
  }
}

// `make()` converts `source` to `target`; recorded around it when it records.
template <class Make>
auto converted(const at::Tensor& source, c10::ScalarType target, uint32_t op_id, uint16_t arg_index, DeviceKind device,
               Make&& make) -> decltype(make()) {
  ThreadBlock& thread = this_thread_block();
  RecordingState* const recording = records_conversion(thread);
  if (recording == nullptr) return make();
  RecordingState& runtime = *recording;
  Record r;
  if (!describe_conversion(r, runtime, thread, source, target, op_id, arg_index, device)) {
    const ConversionScope inside(thread);
    return make();
  }
  const ConversionScope inside(thread);
  try {
    r.cast.round_trip = undoes_recent_conversion(source, target, r.cast.location);
  } catch (...) {
    runtime.events.count_internal_error();
  }
  // Its GPU kernels are not attributed to it (LAUNCHED_BY_NONE, or the
  // autocast op it runs in): a cast launch is an autocast cast's, whose GPU
  // time the cast-share finding sets against its op's.
  auto&& result = make();
  try {
    remember_conversion(result, source.scalar_type(), r.cast.location);
  } catch (...) {
    runtime.events.count_internal_error();
  }
  // In numerics windows: what converting to float8 clipped and flushed (its reads are castscope's own).
  if (c10::isFloat8Type(target) && numerics_window_open()) [[unlikely]]
    numerics_check_conversion(r, source, result);
  runtime.events.record(r, thread);
  return std::forward<decltype(result)>(result);
}

template <DeviceKind kDevice>
at::Tensor to_copy(const at::Tensor& self, std::optional<at::ScalarType> dtype, std::optional<at::Layout> layout,
                   std::optional<at::Device> device, std::optional<bool> pin_memory, bool non_blocking,
                   std::optional<at::MemoryFormat> memory_format) {
  auto make = [&] {
    return at::compositeexplicitautograd::_to_copy(self, dtype, layout, device, pin_memory, non_blocking,
                                                   memory_format);
  };
  // A wrapped number is a Python scalar that TensorIterator converts to its op's dtype: no tensor of the job.
  if (!dtype.has_value() || *dtype == self.scalar_type() || self.unsafeGetTensorImpl()->is_wrapped_number()) [[likely]]
    return make();
  return converted(self, *dtype, g_to_copy_op, 0, kDevice, make);
}

template <DeviceKind kDevice>
at::Tensor& copy(at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  auto make = [&]() -> at::Tensor& { return at::compositeexplicitautograd::copy_(self, src, non_blocking); };
  if (self.scalar_type() == src.scalar_type() || src.unsafeGetTensorImpl()->is_wrapped_number()) [[likely]] return make();
  return converted(src, self.scalar_type(), g_copy_op, 1, kDevice, make);
}

// Copies of a list into buffers of another dtype, as FSDP2 makes its mixed
// precision's casts: each parameter into its bfloat16 all-gather input
// (_foreach_copy_), the gradients into the float32 reduce-scatter input
// (_chunk_cat, inside FSDP's own custom op). One record per tensor that
// changes dtype (its list_index), recorded wherever they are called: these
// ops are asked for explicitly, by FSDP or the user (a dispatch mode sees
// FSDP's chunk_cat only as fsdp::chunk_cat). CPU only: on CUDA their own
// kernels run (docs/events.md, "Makers").
struct ListConversion {
  const at::Tensor* source;
  c10::ScalarType target;
  int16_t index;
};

// `gradients_in_backward`: what the op converts in the backward are gradients (_chunk_cat's reduce-scatter input).
template <class Make>
auto converted_list(const std::vector<ListConversion>& casts, uint32_t op_id, uint16_t arg_index,
                    bool gradients_in_backward, Make&& make) -> decltype(make()) {
  ThreadBlock& thread = this_thread_block();
  RecordingState* const runtime = casts.empty() ? nullptr : records_conversion(thread, false);
  if (runtime == nullptr) return make();
  std::vector<Record> records(casts.size());
  size_t described = 0;
  for (const ListConversion& cast : casts) {
    Record& r = records[described];
    if (!describe_conversion(r, *runtime, thread, *cast.source, cast.target, op_id, arg_index, DeviceKind::kCpu))
      continue;
    r.cast.list_index = cast.index;
    if (gradients_in_backward && r.cast.phase == Phase::kBackward) r.cast.role = Role::kGradient;
    ++described;
  }
  const ConversionScope inside(thread);
  if constexpr (std::is_void_v<decltype(make())>) {
    make();
    for (size_t i = 0; i < described; ++i) runtime->events.record(records[i], thread);
  } else {
    auto&& result = make();
    for (size_t i = 0; i < described; ++i) runtime->events.record(records[i], thread);
    return std::forward<decltype(result)>(result);
  }
}

void foreach_copy(at::TensorList self, at::TensorList src, bool non_blocking) {
  std::vector<ListConversion> casts;
  for (size_t i = 0; i < self.size() && i < src.size(); ++i)
    if (self[i].scalar_type() != src[i].scalar_type() && !src[i].unsafeGetTensorImpl()->is_wrapped_number())
      casts.push_back({&src[i], self[i].scalar_type(), static_cast<int16_t>(i)});
  converted_list(casts, g_foreach_copy_op, 1, false,
                 [&] { at::compositeexplicitautograd::_foreach_copy_(self, src, non_blocking); });
}

at::Tensor& chunk_cat_out(at::TensorList tensors, int64_t dim, int64_t num_chunks, at::Tensor& out) {
  std::vector<ListConversion> casts;
  for (size_t i = 0; i < tensors.size(); ++i)
    if (tensors[i].scalar_type() != out.scalar_type())
      casts.push_back({&tensors[i], out.scalar_type(), static_cast<int16_t>(i)});
  return converted_list(casts, g_chunk_cat_op, 0, true, [&]() -> at::Tensor& {
    return at::compositeexplicitautograd::_chunk_cat_outf(tensors, dim, num_chunks, out);
  });
}

at::Tensor to_copy_autograd(c10::DispatchKeySet ks, const at::Tensor& self, std::optional<at::ScalarType> dtype,
                            std::optional<at::Layout> layout, std::optional<at::Device> device,
                            std::optional<bool> pin_memory, bool non_blocking,
                            std::optional<at::MemoryFormat> memory_format) {
  const DispatchedConversion dispatched(this_thread_block());
  return at::_ops::_to_copy::redispatch(to_autograd_kernel(ks), self, dtype, layout, device, pin_memory, non_blocking,
                                        memory_format);
}

at::Tensor& copy_autograd(c10::DispatchKeySet ks, at::Tensor& self, const at::Tensor& src, bool non_blocking) {
  const DispatchedConversion dispatched(this_thread_block());
  return at::_ops::copy_::redispatch(to_autograd_kernel(ks), self, src, non_blocking);
}

}  // namespace

void note_autocast_cast(ThreadBlock& thread, const at::Tensor& cast) {
  if (g_runtime.load(std::memory_order_relaxed) == nullptr) return;  // explicit_casts off: nobody asks
  const torch::autograd::Node* node = torch::autograd::impl::grad_fn_unsafe(cast);
  if (node == nullptr) return;
  const uint64_t sequence_nr = node->sequence_nr();
  if (node == thread.last_autocast_node && sequence_nr == thread.last_autocast_node_seq) return;
  thread.last_autocast_node = node;
  thread.last_autocast_node_seq = sequence_nr;
  try {
    autocast_cast_nodes().add(NodeKey{node, sequence_nr});
  } catch (...) {
    // Short of memory: its backward conversion reads as autograd's (BACKWARD); the cast itself is unharmed.
  }
}

ExplicitCastHooks::ExplicitCastHooks(RecordingState& runtime) {
  g_to_copy_op = runtime.events.intern_op("aten::_to_copy");
  runtime.events.set_arg_names(g_to_copy_op, {"self"});
  g_copy_op = runtime.events.intern_op("aten::copy_");
  runtime.events.set_arg_names(g_copy_op, {"self", "src"});
  g_foreach_copy_op = runtime.events.intern_op("aten::_foreach_copy_");
  runtime.events.set_arg_names(g_foreach_copy_op, {"self", "src"});
  g_chunk_cat_op = runtime.events.intern_op("aten::_chunk_cat.out");
  runtime.events.set_arg_names(g_chunk_cat_op, {"tensors"});
  g_runtime.store(&runtime, std::memory_order_release);
}

ExplicitCastHooks::~ExplicitCastHooks() {
  libraries_.clear();  // unregisters the kernels
  g_runtime.store(nullptr, std::memory_order_release);
}

std::string ExplicitCastHooks::register_kernels() {
  try {
    auto cpu = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::CPU, __FILE__, __LINE__);
    cpu->impl("_to_copy", TORCH_FN(to_copy<DeviceKind::kCpu>));
    cpu->impl("copy_", TORCH_FN(copy<DeviceKind::kCpu>));
    cpu->impl("_foreach_copy_", TORCH_FN(foreach_copy));
    cpu->impl("_chunk_cat.out", TORCH_FN(chunk_cat_out));
    auto cuda = std::make_unique<torch::Library>(torch::Library::IMPL, "aten", c10::DispatchKey::CUDA, __FILE__, __LINE__);
    cuda->impl("_to_copy", TORCH_FN(to_copy<DeviceKind::kCuda>));
    cuda->impl("copy_", TORCH_FN(copy<DeviceKind::kCuda>));
    // Autograd's keys first in dispatch: they mark the conversions the job
    // dispatched (records_conversion), then run autograd's kernel.
    std::vector<std::unique_ptr<torch::Library>> autograd;
    for (c10::DispatchKey key : {c10::DispatchKey::AutogradCPU, c10::DispatchKey::AutogradCUDA}) {
      autograd.push_back(std::make_unique<torch::Library>(torch::Library::IMPL, "aten", key, __FILE__, __LINE__));
      autograd.back()->impl("_to_copy", TORCH_FN(to_copy_autograd));
      autograd.back()->impl("copy_", TORCH_FN(copy_autograd));
    }
    libraries_.push_back(std::move(cpu));
    libraries_.push_back(std::move(cuda));
    for (auto& library : autograd) libraries_.push_back(std::move(library));
    return "";
  } catch (const std::exception& e) {
    libraries_.clear();
    return std::string("explicit-cast kernels not registered: ") + e.what();
  }
}

}  // namespace castscope
