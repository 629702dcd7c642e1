// Every dtype-changing conversion of the job that castscope's autocast
// kernels do not make: `.to(dtype)`, `.float()`, `.half()`, `type_as`,
// `copy_` across dtypes, autograd's gradient conversions, a library's casts
// (transformers' upcasts, torchao's float8 casts). All of them reach
// aten::_to_copy or aten::copy_; castscope registers a kernel for both on the
// CPU and CUDA keys, below autocast and autograd, where a TorchDispatchMode
// would see them too. The kernel calls the composite kernel these keys run
// natively (at::compositeexplicitautograd), so the result is the same tensor,
// and records a cast (maker EXPLICIT, or BACKWARD / AUTOCAST_BACKWARD in the
// backward) only when the dtype changes: an op that converts nothing pays a
// dtype comparison (docs/performance.md, "Explicit casts").
//
// Not seen: conversions inside a kernel that does not dispatch (a fused
// kernel's, Inductor's generated code, Transformer Engine's quantize
// kernels), and tensors on other devices (XPU, MPS, XLA).
#pragma once

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>
#include <vector>

#include "agent/src/record/thread_block.h"

namespace torch {
class Library;
}

namespace castscope {

struct RecordingState;

class ExplicitCastHooks {
 public:
  // Records into `runtime`, which must outlive every call of the kernels.
  explicit ExplicitCastHooks(RecordingState& runtime);
  ~ExplicitCastHooks();  // unregisters: the composite kernels are back
  ExplicitCastHooks(const ExplicitCastHooks&) = delete;
  ExplicitCastHooks& operator=(const ExplicitCastHooks&) = delete;

  // Registers the kernels; an error message when the dispatcher refused
  // (then nothing is registered).
  std::string register_kernels();

 private:
  std::vector<std::unique_ptr<torch::Library>> libraries_;
};

// Set while castscope makes a conversion it records on this thread (one of
// autocast's casts, or an explicit one): the _to_copy and copy_ calls inside
// it are part of it (at::native::_to_copy copies into a new tensor with
// copy_), as a dispatch mode sees one op.
using ConversionScope = ThreadFlagScope<&ThreadBlock::making_conversion>;

// A cast castscope's autocast kernel made and autograd recorded (`cast` has
// a grad_fn): its gradient's conversion in the backward is autocast's
// (CAST_MAKER_AUTOCAST_BACKWARD). Remembered for the latest ~128 K casts;
// the thread's last one is not added again (a cached weight's cast, hit by
// every op that uses it).
void note_autocast_cast(ThreadBlock& thread, const at::Tensor& cast);

}  // namespace castscope
