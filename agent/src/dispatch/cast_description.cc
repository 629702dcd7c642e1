#include "agent/src/dispatch/cast_description.h"

#include <algorithm>

namespace castscope {

Record described_cast_record(EventLog& log, uint32_t thread, const CastDescription& cast, const OpContext& context) {
  Record r = new_cast_record(log, cast.op_id, thread, cast.policy, cast.device, context);
  r.cast.src = cast.src;
  r.cast.dst = cast.dst;
  r.cast.outcome = cast.outcome;
  r.cast.role = cast.role;
  r.cast.arg_index = cast.arg_index;
  r.cast.list_index = cast.list_index;
  r.cast.ndim = static_cast<uint8_t>(std::min<size_t>(cast.shape.size(), 255));
  for (size_t d = 0; d < cast.shape.size() && d < static_cast<size_t>(kMaxShapeDims); ++d) r.cast.shape[d] = cast.shape[d];
  r.cast.bytes = cast.bytes;
  return r;
}

}  // namespace castscope
