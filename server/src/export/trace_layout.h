// What the Perfetto and the Chrome trace of a run share, so both show the
// same processes, threads and names:
//
//   process   one per agent: its pid (another number when two agents of the
//             run share one: other hosts, or a reused pid), named
//             "rank R · host · pid P", or "COMMAND · host · pid P" without a
//             rank
//   thread    one per castscope thread index of the agent ("castscope thread
//             N"), for its ops and casts
//   stream    one per (CUDA device, stream) of the agent ("GPU D stream S"),
//             for its kernels
//
// castscope records a small thread index, not the OS tid, so threads and
// streams get synthetic tids, unique in the trace and above Linux's largest
// pid (2^22) so that no viewer takes one for a process's main thread.
// Flow ids are unique in the trace too: the agent's index, what the flow is
// (a cast to its op, a launch to its kernel) and the seq of the event it
// starts from or goes to.
#pragma once

#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>

#include "castscope/v1/events.names.h"
#include "castscope/v1/events.pb.h"
#include "server/src/export/run_events.h"
#include "server/src/store/row_id.h"

namespace castscope::collector {

class TraceLayout {
 public:
  static constexpr uint32_t kSyntheticIdBase = uint32_t{1} << 22;

  struct Process {
    uint32_t pid = 0;
    std::string name;
  };

  // Agents in order, each once.
  const Process& begin_agent(size_t agent_index, const ExportAgent& agent);
  const Process& process() const { return process_; }
  size_t agent_index() const { return agent_index_; }

  // The tid of a thread or stream of the current agent; `first`: not seen before.
  uint32_t thread_tid(uint32_t thread, bool& first);
  uint32_t stream_tid(uint32_t device, uint32_t stream, bool& first);

  // Flow from a cast to its op; from a launching cast or op to a kernel.
  uint64_t cast_flow_id(uint64_t cast_seq) const { return flow_id(1, cast_seq); }
  uint64_t launch_flow_id(uint64_t kernel_seq) const { return flow_id(2, kernel_seq); }

  static std::string thread_name(uint32_t thread) { return "castscope thread " + std::to_string(thread); }
  static std::string stream_name(uint32_t device, uint32_t stream) {
    return "GPU " + std::to_string(device) + " stream " + std::to_string(stream);
  }

 private:
  uint64_t flow_id(uint64_t kind, uint64_t seq) const {
    // The seq in the row id's seq bits (row_id.h), the kind (2 bits) and agent above.
    return (static_cast<uint64_t>(agent_index_ + 1) << (kRowSeqBits + 2)) | (kind << kRowSeqBits) | (seq & kMaxRowSeq);
  }
  uint32_t allocate_id() { return kSyntheticIdBase + next_synthetic_++; }

  Process process_;
  size_t agent_index_ = 0;
  uint32_t next_synthetic_ = 0;
  std::set<uint32_t> pids_;
  std::map<uint32_t, uint32_t> threads_;                          // of the current agent
  std::map<std::pair<uint32_t, uint32_t>, uint32_t> streams_;     // (device, stream), of the current agent
};

// Short names of castscope's enums ("bfloat16", "lower_precision_fp",
// "stale_hit"), from the generated table (castscope/v1/events.names.h). No
// allocation. A value the schema does not define reads "unknown" here (the
// reports and the viewer say "unspecified"): traces have said so from the start.
template <typename Enum>
  requires requires(Enum value) { v1::names::short_name(value); }
std::string_view short_name(Enum value) {
  const std::string_view name = v1::names::short_name(value);
  return name.empty() ? std::string_view("unknown") : name;
}

// "file:line", or "" without a location.
std::string location_text(const ExportLocation* location);
// "[16, 4, 16]", "...]" when the agent truncated it.
std::string shape_text(const ExportEvent& cast);
// The name a cast instant gets: "cast float32→bfloat16", or "no cast
// (already_target)" for a decision that cast nothing.
std::string cast_event_name(const ExportEvent& cast);
// "weight", "tensors[2]".
std::string arg_text(const ExportEvent& cast);
// The name a numerics window's instant gets: "cast overflow float32→float16",
// "NaN cast float32→float16", "cast underflow float32→float16" (the worst of
// its problems), or "non-finite output float16" for an op's outputs.
std::string numerics_event_name(const ExportEvent& numerics);
// Its problems in words, as the viewer says them, "; " between two: "3 of 32
// values became inf casting float32->float16 (self of aten::mm at file:line)".
std::string numerics_summary(const ExportEvent& numerics);
// A GradScaler update's instant when its step was skipped.
inline constexpr const char* kSkippedStepName = "GradScaler step skipped";
// The counter track of GradScaler's scale, one per process.
inline constexpr const char* kScaleTrackName = "GradScaler scale";

}  // namespace castscope::collector
