// Runs of torch.compile's compiled graphs (docs/compile.md). AOTAutograd runs
// them with autocast off, so no autocast kernel sees their casts: the Python
// side (castscope/compile_capture.py) reads each forward, backward or
// inference graph's autocast casts once, registers them here, and reports
// every run; each run records one `compiled::KIND` op (mode COMPILED, the
// autocast state of the moment) and the graph's casts at the user's lines.
#pragma once

#include <cstdint>
#include <deque>
#include <mutex>
#include <string>
#include <vector>

#include "agent/src/context/recording_state.h"
#include "agent/src/dispatch/cast_description.h"
#include "agent/src/record/cast_record.h"

namespace castscope {

struct CompiledCast {
  CastDescription cast;  // op_id: the autocast op that decided it ("aten::linear"); outcome CAST
  uint32_t location = 0;  // the user's line; 0: the run's calling line
  // The pass autocast decided it in: a backward cast the partitioner moved
  // into the forward graph stays a backward cast.
  Phase phase = Phase::kForward;
};

struct CompiledGraph {
  uint32_t op_id = 0;  // "compiled::forward", "compiled::backward" or "compiled::inference"
  Phase phase = Phase::kForward;
  std::vector<CompiledCast> casts;
};

class CompiledGraphs {
 public:
  // Its id (from 1).
  uint32_t add(CompiledGraph graph);
  // nullptr for an unknown id. Graphs are never removed: the pointer stays valid.
  const CompiledGraph* find(uint32_t id) const;

 private:
  mutable std::mutex mutex_;
  std::deque<CompiledGraph> graphs_;
};

// Records one run of `graph`. `calling_location`: the location to give the
// run and casts without a line of their own; 0 reads the calling Python line.
// Returns the location used. Never throws: failures count as internal errors.
uint32_t record_compiled_graph_run(RecordingState& runtime, const CompiledGraph& graph, uint32_t calling_location) noexcept;

}  // namespace castscope
