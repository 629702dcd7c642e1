// What the autocast kernels (dispatch/) and the op observers (observers/)
// both read about the op running now: whether to record at all, whether a
// castscope kernel is on the stack, which Python line and execution mode it
// runs in, and the autocast state an op record carries. Here, below both, so
// neither library needs the other for it.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/core/impl/LocalDispatchKeySet.h>

#include <atomic>
#include <cstdint>

#include "agent/src/record/cast_record.h"
#include "agent/src/record/location_table.h"
#include "agent/src/record/thread_block.h"

namespace castscope {

// Whether kernels and observers record events. Kernels keep casting (they
// own autocast while registered) when this is false.
extern std::atomic<bool> g_record_events;

// Depth of castscope autocast kernels on this thread (ThreadBlock's
// autocast_kernel_depth). Inside one, autocast reads as disabled (the kernel
// excludes its key, as native wrappers do); the observers must not take that
// for the user's own disable.
inline bool inside_autocast_kernel() { return this_thread_block().autocast_kernel_depth > 0; }
struct InsideAutocastKernel {
  explicit InsideAutocastKernel(ThreadBlock& thread) : thread_(thread) { ++thread_.autocast_kernel_depth; }
  ~InsideAutocastKernel() { --thread_.autocast_kernel_depth; }
  InsideAutocastKernel(const InsideAutocastKernel&) = delete;
  InsideAutocastKernel& operator=(const InsideAutocastKernel&) = delete;

 private:
  ThreadBlock& thread_;
};

// Depth of the Python package's torch.jit.trace bracket on this thread
// (ThreadBlock's trace_recording_depth, kept by observers/trace_observer.h).
// Inside a scripted function the trace calls, the tracer's own state reads as
// off; this still says a trace records.
inline bool trace_recording_on_this_thread() { return this_thread_block().trace_recording_depth > 0; }

// Returns the LocationTable id of the innermost user Python frame of the
// calling thread (0 when there is none). Installed only in Python processes,
// by the separate frame-reader library, so the agent never links CPython.
using LocationReader = uint32_t (*)();
extern std::atomic<LocationReader> g_python_location_reader;
// While torch.compile traces: the user's line of the FX node being traced
// (0 when none). Installed with the Python reader.
extern std::atomic<LocationReader> g_tracing_location_reader;
// In a backward with no user frame on its thread: the user's line of the
// Python thread waiting in the engine (castscope_agent_set_backward_caller_reader).
extern std::atomic<LocationReader> g_backward_caller_reader;
// The Python reader for the autocast kernels: the same answer, the reader
// keeping its per-thread state in the thread block (ThreadBlock's
// python_frames) instead of a thread_local of its own (a __tls_get_addr
// call per op). Installed with the other; preferred where both are.
using ThreadLocationReader = uint32_t (*)(void** thread_state);
extern std::atomic<ThreadLocationReader> g_python_thread_location_reader;

// Where and in which mode the current op runs. TorchScript (scripted or
// traced graphs) gives its own source range; otherwise the innermost user
// Python frame, when a Python frame reader is installed.
struct OpContext {
  ExecutionMode mode = ExecutionMode::kEager;
  Phase phase = Phase::kForward;
  uint32_t location = 0;
  // The innermost nn.Module (record/module_scopes.h); in a backward, the
  // module the running node's forward was made in. 0: none.
  uint32_t module = 0;
};
// TorchScript locations are interned in `locations`.
OpContext current_op_context(LocationTable& locations);
// The same from the thread's dispatch keys, read once by the caller for the
// op (c10's one thread-local block: thread_dispatch_keys()). They answer
// "can a dispatch mode or the JIT tracer be on?" for the common op, where
// neither is: both keep their key included while they are on (torch's
// TorchDispatchModeTLS and tracer::setTracingState), so their own
// thread-local state is read only when it is. A backward task and
// TorchScript have no key: the graph task's getter and
// torch::jit::in_torchscript_runtime() (a bool; the call stack only when
// it is true) are still called.
OpContext current_op_context(LocationTable& locations, const c10::impl::LocalDispatchKeySet& keys,
                             ThreadBlock& thread);
inline c10::impl::LocalDispatchKeySet thread_dispatch_keys() { return c10::impl::tls_local_dispatch_key_set(); }
// An op record's autocast state and context: the region's lower-precision
// dtype on `device`, mode, phase, location, the devices with autocast on.
void describe_op_context(OpFields& op, c10::DeviceType device, const OpContext& context);
// The same with the region's lower-precision dtype and the thread's dispatch
// keys (autocast is on for a device whose key is not excluded) already read;
// `thread` remembers what the last excluded keys said.
void describe_op_context(OpFields& op, c10::ScalarType region_dtype, const OpContext& context,
                         const c10::impl::LocalDispatchKeySet& keys, ThreadBlock& thread);

// Inline: every record of an op calls it for each dtype it carries.
inline DType to_dtype(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Float: return DType::kFloat32;
    case c10::ScalarType::Half: return DType::kFloat16;
    case c10::ScalarType::BFloat16: return DType::kBfloat16;
    case c10::ScalarType::Double: return DType::kFloat64;
    case c10::ScalarType::Long: return DType::kInt64;
    case c10::ScalarType::Int: return DType::kInt32;
    case c10::ScalarType::Short: return DType::kInt16;
    case c10::ScalarType::Char: return DType::kInt8;
    case c10::ScalarType::Byte: return DType::kUint8;
    case c10::ScalarType::Bool: return DType::kBool;
    case c10::ScalarType::ComplexFloat: return DType::kComplex64;
    case c10::ScalarType::ComplexDouble: return DType::kComplex128;
    case c10::ScalarType::Float8_e4m3fn: return DType::kFloat8E4M3Fn;
    case c10::ScalarType::Float8_e5m2: return DType::kFloat8E5M2;
    case c10::ScalarType::Float8_e4m3fnuz: return DType::kFloat8E4M3Fnuz;
    case c10::ScalarType::Float8_e5m2fnuz: return DType::kFloat8E5M2Fnuz;
    case c10::ScalarType::Float8_e8m0fnu: return DType::kFloat8E8M0Fnu;
    default: return DType::kOther;
  }
}

}  // namespace castscope
