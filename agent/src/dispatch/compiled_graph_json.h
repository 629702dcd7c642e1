// The JSON the Python side of torch.compile capture exchanges with the agent
// (agent.h, castscope_compile_decisions and castscope_compiled_graph):
// decisions kept while tracing, out; a compiled graph's casts, in. Input is
// checked field by field; an error names the field and the cast.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "agent/src/context/compile_capture.h"
#include "agent/src/dispatch/compiled_graph_runs.h"
#include "agent/src/record/event_log.h"
#include "agent/src/record/location_table.h"

namespace castscope {

// [{"op", "arg_index", "list_index", "policy", "device", "role", "src", "dst",
//   "shape", "bytes", "phase", "file", "line", "function"}, ...]; enums as
// their proto values, file "" and line 0 when the decision has no line.
std::string compile_decisions_json(const std::vector<CompileDecision>& decisions, const EventLog& events,
                                   const LocationTable& locations);

// {"kind": "forward" | "backward" | "inference", "casts": [{"op", "arg_index",
//  "list_index", "policy", "device", "role", "src", "dst", "shape", "bytes",
//  and optionally "file", "line", "function", and "phase" (the pass autocast
//  decided the cast in; the graph's by default)}]}. Interns ops and lines.
// nullopt with `error` set when anything is missing or out of range.
std::optional<CompiledGraph> parse_compiled_graph(const std::string& json, EventLog& events, LocationTable& locations,
                                                  std::string& error);

}  // namespace castscope
