// A trace format: told about one agent at a time, then that agent's events
// in the order RunEventCursor gives them (export_run.cc drives both formats
// in one pass over the store). A writer streams to its file as it goes and
// keeps only what it must to close what is open (ops on each thread's stack,
// bounded by their nesting), so memory does not grow with the run.
#pragma once

#include <cstdint>

#include "server/src/export/run_events.h"
#include "server/src/status.h"

namespace castscope::collector {

// What a writer wrote, for the command's summary and the tests.
struct TraceCounts {
  uint64_t processes = 0, threads = 0, streams = 0;
  uint64_t op_slices = 0, cast_instants = 0, counter_samples = 0, kernel_slices = 0;
  uint64_t cast_flows = 0, launch_flows = 0;
  // GradScaler: scale samples (one per update) and skipped steps; numerics
  // windows that found a problem.
  uint64_t scaler_samples = 0, skipped_steps = 0, numerics_instants = 0;
  // Casts whose op was no longer open when they came (so no flow to it).
  uint64_t casts_without_op = 0;
};

class TraceWriter {
 public:
  virtual ~TraceWriter() = default;
  virtual Status begin_agent(size_t index, const ExportAgent& agent) = 0;
  virtual Status add(const ExportEvent& event) = 0;
  virtual Status end_agent() = 0;
  // Completes the file and renames it into place.
  virtual Status finish() = 0;
  virtual const TraceCounts& counts() const = 0;
};

}  // namespace castscope::collector
