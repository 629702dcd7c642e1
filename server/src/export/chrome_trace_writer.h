// A run as a Chrome trace (JSON: {"displayTimeUnit": "ns", "traceEvents":
// [...]}), the format chrome://tracing, Perfetto's UI and most trace tools
// read. Written one event at a time (nlohmann/json per event), never as one
// document in memory; docs/export.md has the mapping.
//
//   "M"  process_name per agent, thread_name per castscope thread and GPU stream
//   "X"  ops on their thread (dur: cpu_duration_ns); kernels on their stream
//   "i"  casts, thread-scoped ("s": "t"), inside their op's slice
//   "C"  cache samples: "cast cache" with live_bytes and live_casts;
//        GradScaler updates: "GradScaler scale" with scale
//   "i"  numerics, thread-scoped: a skipped step ("GradScaler step skipped"),
//        a numerics window that found a problem (its counts in args)
//   "s"/"f" a launch flow from the op (or the op of the cast) that launched
//        a kernel to the kernel: "s" at the op's start, "f" ("bp": "e") at
//        the kernel's, each bound to the slice enclosing it
//
// Timestamps are microseconds with the nanoseconds as a fraction, from the
// store's CLOCK_MONOTONIC ns (the Perfetto trace of the same run has the same
// times). Flows in this format bind to slices, never to instants, so a
// cast's link to its op is where its instant sits: inside the op's slice;
// the Perfetto trace has a flow per cast.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include <nlohmann/json.hpp>

#include "server/src/export/trace_file.h"
#include "server/src/export/trace_layout.h"
#include "server/src/export/trace_writer.h"

namespace castscope::collector {

class ChromeTraceWriter final : public TraceWriter {
 public:
  // Creates `path`'s temporary file and writes the header; `run_id` goes in
  // "otherData". Errors name the file.
  static Status open(const std::string& path, const std::string& run_id, std::unique_ptr<ChromeTraceWriter>& out);
  ~ChromeTraceWriter() override;

  Status begin_agent(size_t index, const ExportAgent& agent) override;
  Status add(const ExportEvent& event) override;
  Status end_agent() override { return {}; }
  Status finish() override;
  const TraceCounts& counts() const override { return counts_; }

 private:
  ChromeTraceWriter() = default;
  Status write(const nlohmann::json& event);
  // write(), then ++count: how many of each event the trace holds.
  Status write_counted(const nlohmann::json& event, uint64_t& count);
  // The tid of a thread or stream; its thread_name the first time.
  Status thread_tid(uint32_t thread, uint32_t& tid);
  Status stream_tid(uint32_t device, uint32_t stream, uint32_t& tid);
  Status launch_flows(const ExportEvent& launcher, uint32_t tid);
  Status add_numerics(const ExportEvent& numerics);
  Status add_scaler_update(const ExportEvent& update);

  TraceFile file_;
  TraceLayout layout_;
  TraceCounts counts_;
  bool first_event_ = true;
  std::map<uint32_t, std::pair<uint64_t, uint64_t>> last_op_;  // thread -> (seq, ts) of its latest op
  std::optional<double> last_scale_;  // the agent's GradScaler scale after its last update
};

}  // namespace castscope::collector
