// Casts made by castscope's Python wrappers of module and function overlays
// (agent/python/castscope/callable_overlays.py, docs/overlays.md). The
// wrappers cast with Tensor.to() themselves, outside the dispatcher; each
// decision is recorded here as a cast event in the caller's context (its
// Python line, mode and phase), the overlay's name standing in for the op.
#pragma once

#include "agent/src/context/recording_state.h"
#include "agent/src/dispatch/cast_description.h"

namespace castscope {

// Records one decision, unless recording is off. Never throws: a failure is
// counted as an internal error.
void record_callable_overlay_cast(RecordingState& runtime, const CastDescription& cast) noexcept;

}  // namespace castscope
