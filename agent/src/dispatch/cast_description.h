// A cast decision castscope records outside its autocast kernel: the Python
// wrappers of callable overlays (callable_overlay_casts.h) and the casts of
// compiled graphs (compiled_graph_runs.h). Everything but the context.
#pragma once

#include <cstdint>
#include <vector>

#include "agent/src/dispatch/dispatch.h"
#include "agent/src/record/cast_record.h"

namespace castscope {

struct CastDescription {
  uint32_t op_id = 0;  // the op (or overlay) that decided it, from EventLog::intern_op
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

// Its cast record in `context`, by `thread` (not cacheable: no cast cache
// saw it). The caller records it.
Record described_cast_record(EventLog& log, uint32_t thread, const CastDescription& cast, const OpContext& context);

}  // namespace castscope
