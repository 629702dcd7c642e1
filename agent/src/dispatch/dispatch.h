// Registers castscope's autocast kernel on the autocast dispatch keys for
// every op a policy names, overriding the native wrappers, and the kernels
// that record every other conversion (explicit_casts.h); destroying the
// registry restores them.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agent/src/context/op_context.h"
#include "agent/src/context/recording_state.h"
#include "agent/src/dispatch/explicit_casts.h"
#include "agent/src/dispatch/native_cast_order.h"
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
  // `explicit_casts`: also the kernels that record every other conversion (explicit_casts.h).
  std::vector<std::string> register_policies(const PolicySet& policies, bool explicit_casts = true);
  size_t registered_ops() const { return registered_; }
  // Of those, the ops whose kernel is called unboxed (dispatch.cc, unboxed_kernel; unboxed_autocast_kernel.h).
  size_t registered_unboxed_ops() const { return registered_unboxed_; }
  // The order its kernels cast an op's arguments in: native autocast's, as
  // register_policies read it before replacing the native kernels.
  const NativeCastOrder& cast_order() const { return cast_order_; }

 private:
  bool register_unboxed(const std::string& op, const PolicyEntry& entry, const AutocastDevice& device, uint32_t op_id);

  RecordingState& runtime_;
  std::vector<std::unique_ptr<torch::Library>> libraries_;
  std::vector<std::unique_ptr<c10::RegistrationHandleRAII>> unboxed_;
  std::unique_ptr<ExplicitCastHooks> explicit_casts_;  // every conversion autocast's kernels do not make
  size_t registered_ = 0;
  size_t registered_unboxed_ = 0;
  NativeCastOrder cast_order_;
};

}  // namespace castscope
