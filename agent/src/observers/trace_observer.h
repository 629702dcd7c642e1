// While torch.jit.trace records, code inside `autocast(enabled=False)` makes
// no autocast-key call, so castscope's kernel never sees it; yet the traced
// graph keeps no trace of the disable, and under autocast later those ops
// are cast (trace-dropped-autocast). So, only while a trace records on this
// thread, an op observer (a thread-local RecordFunction callback) records
// each op that runs with autocast off, as an OpEvent in trace-recording mode
// with no autocast device enabled. The Python package brackets
// torch.jit.trace with begin/end; other threads and other times pay nothing.
#pragma once

namespace castscope {

// They keep the depth trace_recording_on_this_thread() reads (context/op_context.h).
void begin_trace_recording();  // nests
void end_trace_recording();

}  // namespace castscope
