// Casts made by castscope's Python wrappers of module and function overlays
// (agent/python/castscope/callable_overlays.py, docs/overlays.md). The
// wrappers cast with Tensor.to() themselves, outside the dispatcher; each
// decision is recorded here as a cast event in the caller's context (its
// Python line, mode and phase), the overlay's name standing in for the op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/src/context/runtime.h"
#include "agent/src/record/cast_record.h"

namespace castscope {

struct CallableOverlayCast {
  uint32_t op_id = 0;  // from EventLog::intern_op("module::torchvision.ops.RoIPool")
  CastPolicy policy = CastPolicy::kUnspecified;
  DeviceKind device = DeviceKind::kUnspecified;
  DType src = DType::kUnspecified;
  DType dst = DType::kUnspecified;
  CastOutcome outcome = CastOutcome::kUnspecified;
  Role role = Role::kUnspecified;
  uint16_t arg_index = 0;
  int16_t list_index = -1;
  std::vector<int64_t> shape;
  uint64_t bytes = 0;
};

// Records one decision, unless recording is off. Never throws: a failure is
// counted as an internal error.
void record_callable_overlay_cast(Runtime& runtime, const CallableOverlayCast& cast) noexcept;

}  // namespace castscope
