// Registers castscope's autocast kernel on the autocast dispatch keys for
// every op a policy names, overriding the native wrappers; destroying the
// registry restores them.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/src/context/recording_state.h"
#include "agent/src/policy/policy.h"
#include "agent/src/record/cast_record.h"

namespace torch {
class Library;
}
namespace c10 {
class RegistrationHandleRAII;
}

namespace castscope {

struct AutocastDevice;

// Whether kernels record events. Kernels keep casting (they own autocast
// while registered) when this is false.
extern std::atomic<bool> g_record_events;

// Depth of castscope autocast kernels on this thread. Inside one, autocast
// reads as disabled (the kernel excludes its key, as native wrappers do);
// the trace observer must not take that for the user's own disable.
extern thread_local int t_autocast_kernel_depth;
struct InsideAutocastKernel {
  InsideAutocastKernel() { ++t_autocast_kernel_depth; }
  ~InsideAutocastKernel() { --t_autocast_kernel_depth; }
  InsideAutocastKernel(const InsideAutocastKernel&) = delete;
  InsideAutocastKernel& operator=(const InsideAutocastKernel&) = delete;
};

// Returns the LocationTable id of the innermost user Python frame of the
// calling thread (0 when there is none). Installed only in Python processes,
// by the separate frame-reader library, so the agent never links CPython.
using LocationReader = uint32_t (*)();
extern std::atomic<LocationReader> g_python_location_reader;
// While torch.compile traces: the user's line of the FX node being traced
// (0 when none). Installed with the Python reader.
extern std::atomic<LocationReader> g_tracing_location_reader;

// Where and in which mode the current op runs. TorchScript (scripted or
// traced graphs) gives its own source range; otherwise the innermost user
// Python frame, when a Python frame reader is installed.
struct OpContext {
  ExecutionMode mode = ExecutionMode::kEager;
  Phase phase = Phase::kForward;
  uint32_t location = 0;
};
// TorchScript locations are interned in `locations`.
OpContext current_op_context(LocationTable& locations);
// An op record's autocast state and context: the region's lower-precision
// dtype on `device`, mode, phase, location, the devices with autocast on.
void describe_op_context(OpFields& op, c10::DeviceType device, const OpContext& context);
// The same with the region's lower-precision dtype already read as well.
void describe_op_context(OpFields& op, c10::ScalarType region_dtype, const OpContext& context);

DType to_dtype(c10::ScalarType type);

// A cast record with its identity and context filled in (not cacheable, no
// list element); the caller adds the decision. `reserved_seq`: a sequence
// number taken earlier from next_seq(), 0 for a new one. `ts_ns`: the time
// of the op the cast belongs to, 0 to read the clock.
Record new_cast_record(EventLog& log, uint32_t op_id, uint32_t thread, CastPolicy policy, DeviceKind device,
                       const OpContext& context, uint64_t reserved_seq = 0, uint64_t ts_ns = 0);

// The kernels record into `runtime`, which must outlive the registry and
// every call of its kernels (the agent's is the process runtime).
class DispatchRegistry {
 public:
  explicit DispatchRegistry(RecordingState& runtime);
  ~DispatchRegistry();
  DispatchRegistry(const DispatchRegistry&) = delete;
  DispatchRegistry& operator=(const DispatchRegistry&) = delete;

  // Registers every entry except keep_native. Returns errors (one per op that
  // could not be registered); those ops keep their native kernel.
  std::vector<std::string> register_policies(const PolicySet& policies);
  size_t registered_ops() const { return registered_; }
  // Of those, the ops whose kernel is called unboxed (dispatch.cc, unboxed_kernel).
  size_t registered_unboxed_ops() const { return registered_unboxed_; }

 private:
  bool register_unboxed(const std::string& op, const PolicyEntry& entry, const AutocastDevice& device, uint32_t op_id);

  RecordingState& runtime_;
  std::vector<std::unique_ptr<torch::Library>> libraries_;
  std::vector<std::unique_ptr<c10::RegistrationHandleRAII>> unboxed_;
  size_t registered_ = 0;
  size_t registered_unboxed_ = 0;
};

}  // namespace castscope
