// What castscope's kernels and observers record into: the event log (rings
// and op names), the location table, the cast-cache watch and the
// torch.compile capture state, owned by one
// object. The agent uses the process's recording state; a C++ test makes its own and
// registers kernels against it (DispatchRegistry), so it reads back exactly
// the records its ops made.
#pragma once

#include <atomic>
#include <cstdint>

#include "agent/src/context/cast_cache_watch.h"
#include "agent/src/context/compile_capture.h"
#include "agent/src/record/event_log.h"
#include "agent/src/record/location_table.h"

namespace castscope {

struct RecordingState {
  EventLog events;
  LocationTable locations;
  CastCacheWatch cast_cache;
  CompileCapture compile;  // torch.compile tracing (compile_capture.h)
  std::atomic<uint64_t> steps{0};  // optimizer steps seen (the agent's iteration count)
};

// A cache sample taken now, for the calling thread's ring (so it stays in
// order with that thread's casts).
Record cache_sample_record(RecordingState& runtime, SampleTrigger trigger);

// The process's recording state, made on first use and never destroyed: threads that
// exit after static destruction, and kernels still in flight at detach, reach it.
RecordingState& process_recording_state();

}  // namespace castscope
