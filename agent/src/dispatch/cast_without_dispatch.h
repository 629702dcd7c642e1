// Casts castscope makes the way Tensor::to makes them, without to's dispatch.
//
// For a cast the cast cache would not keep, Tensor::to(dtype) dispatches
// aten::to.dtype, whose only kernel (composite) calls at::_to_copy with the
// dtype alone. castscope calls at::_to_copy itself (make_cast's `direct` in
// kernel_core.h): the same kernel and the same tensor, without to's dispatch
// and wrapper. What to's dispatch does besides, and what could see the
// difference, is kept: the RecordFunction draw its dispatch takes (so a
// profiler, an execution-trace observer and a sampled observer see and sample
// the same ops), and the checks below rule out every other watcher.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/DispatchKeySet.h>
#include <c10/core/ScalarType.h>

namespace castscope {

// Reads, when castscope registers its kernels, whether aten::to.dtype has no
// kernel of its own for a key a dense tensor's cast reaches (a user's, say,
// through torch.library, which a cast without dispatch would bypass) and
// whether the dispatcher runs RecordFunction callbacks for it.
void read_to_dtype_kernels();

// Whether `t`'s every dispatch key is a dense CPU or CUDA tensor's, with
// autograd's and autocast's: nothing (a Python subclass, a functorch wrapper,
// a sparse, nested or functional tensor) that could see which op made its cast.
inline bool plain_tensor(const at::Tensor& t) {
  constexpr c10::DispatchKeySet kPlainTensorKeys({c10::DispatchKey::CPU, c10::DispatchKey::CUDA,
                                                  c10::DispatchKey::ADInplaceOrView, c10::DispatchKey::AutogradCPU,
                                                  c10::DispatchKey::AutogradCUDA, c10::DispatchKey::AutocastCPU,
                                                  c10::DispatchKey::AutocastCUDA});
  return (t.key_set().raw_repr() & ~kPlainTensorKeys.raw_repr()) == 0;
}

// Whether nothing on this thread sees which ops make a cast, beyond the
// RecordFunction callbacks cast_without_dispatch serves: aten::to.dtype as
// natively (read_to_dtype_kernels) and no dispatch key included beyond the
// defaults (the JIT tracer, Python dispatch modes, functorch's transforms and
// the Python dispatcher each include theirs while on; so does inference mode,
// by removing one). Asked once per op.
bool thread_sees_no_cast_ops();
// The same from the thread's included dispatch keys, read by the caller for the op.
bool thread_sees_no_cast_ops(c10::DispatchKeySet included);

// t.to(target) for a plain tensor of another dtype that the cast cache would
// not keep, on a thread that sees no cast ops: the RecordFunction draw
// aten::to's dispatch takes, then at::_to_copy; where the draw has callbacks
// to run, they run around to's composite kernel as the dispatcher runs them.
at::Tensor cast_without_dispatch(const at::Tensor& t, c10::ScalarType target);

}  // namespace castscope
