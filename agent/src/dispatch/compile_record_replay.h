// torch.compile capture with AOTAutogradCache on (docs/compile.md): a graph
// served from the cache skips AOTAutograd's trace, so the COMPILING records
// that trace logs (the backward's decisions among them, which
// compile-mismatch reads) would be missing from a run with a warm cache.
// While AOTAutograd traces, the compile capture keeps every COMPILING record
// it logs (CompileCapture::keep_logged); the Python side stores them as this
// JSON beside the cache entry and, at a cache hit, hands them back to be
// logged again, deduplicated per compile as the trace's own are.
//
// A record travels as its bytes (hex) with what is interned in this process
// named: its op (and the op's argument names) and its location. The bytes
// are this agent build's layout: the Python side keys what it stores by the
// agent library's hash, so another build never reads them.
#pragma once

#include <string>
#include <vector>

#include "agent/src/context/recording_state.h"

namespace castscope {

// [{"record": hex, "op": name, "arg_names": [...], "location": {"kind",
//   "file", "line", "function", "stack"}}, ...], in the order logged.
std::string compile_records_json(const std::vector<Record>& records, const EventLog& events,
                                 const LocationTable& locations);

// Logs `json`'s records again as the calling thread's: new seqs and times,
// ops and locations interned here, an op record only when it is the first of
// its kind in this compile (compile_record_key), its casts with it. Returns
// the records logged; -1 with `error` naming the entry and field when the
// text is not what compile_records_json writes (nothing logged then).
int replay_compile_records(const std::string& json, RecordingState& runtime, std::string& error);

}  // namespace castscope
