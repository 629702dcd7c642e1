// Events of a batch as readers see them: interned ids replaced by their
// strings and locations, tagged with run and agent (castscope.v1.StoredEvent,
// the same shape the store's queries return). Agent stats are not events of
// the store (they update the agent's counters) and are left out.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "castscope/v1/transport.pb.h"

namespace castscope::collector {

// `newest_casts`: only the batch's last casts, at most that many, and no
// other event (a live view's sample of a batch, at a fraction of the cost).
void resolve_batch_events(const castscope::v1::Batch& batch, std::vector<castscope::v1::StoredEvent>& out,
                          size_t newest_casts = SIZE_MAX);

}  // namespace castscope::collector
