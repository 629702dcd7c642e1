// Mode and source location of an op run by the TorchScript interpreter.
//
// Scripted code carries its compiled source: the innermost interpreter frame's
// range gives file:line. Traced graphs carry the tracer's synthetic source:
// the Python stack at trace time, "file(line): function" per line, innermost
// first; castscope reports its first user frame (record/user_code.h: the
// user's line recorded at trace time). Results are cached per (source, offset), so only
// the first call at a site parses anything.
#pragma once

#include <cstdint>
#include <string>

#include "agent/src/record/cast_record.h"
#include "agent/src/record/location_table.h"

namespace castscope {

// Forgets every resolved site: the user-code rule's directories changed (at start).
void forget_resolved_jit_sites();

struct JitContext {
  ExecutionMode mode = ExecutionMode::kEager;
  uint32_t location = 0;
  bool has_source = false;  // false: no frame carried a source range (JIT-inserted ops)
};

// False when the calling thread is not running TorchScript. Locations are
// interned in `locations`.
bool current_jit_context(LocationTable& locations, JitContext& out);

}  // namespace castscope
