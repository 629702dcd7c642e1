// A run as a Perfetto trace (protobuf; proto/perfetto/perfetto_trace_subset.proto
// has the messages, docs/export.md the mapping). Per agent, one packet
// sequence (trusted_packet_sequence_id = agent index + 1) whose first packet
// clears its incremental state and interns the categories and annotation
// names; op, cast and kernel names are interned as they first appear.
//
//   process track      ProcessDescriptor (pid, "rank R · host · pid P", command)
//   thread tracks      ThreadDescriptor per castscope thread: ops as slices
//                      (TYPE_SLICE_BEGIN/END), casts as TYPE_INSTANT inside
//                      them, a flow from each cast to its op's slice (the
//                      cast starts it, the op's end terminates it)
//   counter tracks     live cast-cache bytes and entries (cache samples);
//                      GradScaler's scale (one value per update, double)
//   numerics           on the thread tracks: a skipped step (GradScaler) or
//                      a numerics window that found a problem, as instants
//                      with their counts as annotations
//   GPU stream tracks  one per (device, stream) under the process: kernels,
//                      memcpys and memsets as slices, each linked by a flow
//                      to the cast or op that launched it (the same id in
//                      both events' flow_ids)
//
// Timestamps are the store's CLOCK_MONOTONIC ns, written as they are, with no
// clock id: Perfetto reads them on its default trace clock (boot time), which
// CLOCK_MONOTONIC follows except across a suspend.
//
// A TrackEvent has no duration field, so an op is a BEGIN at its start and an
// END at start + cpu_duration_ns. Each thread keeps a stack of open ops; an
// END is written once events have moved past it (or at the agent's end), so
// the file stays in time order for every thread and the END can terminate
// the flows of all its casts. A nested op that would outlive its parent is
// cut at the parent's end, so slices always nest.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "perfetto/perfetto_trace_subset.pb.h"
#include "server/src/export/trace_file.h"
#include "server/src/export/trace_layout.h"
#include "server/src/export/trace_writer.h"

namespace google::protobuf::io {
class FileOutputStream;
class CodedOutputStream;
}  // namespace google::protobuf::io

namespace castscope::collector {

class PerfettoTraceWriter final : public TraceWriter {
 public:
  // Creates `path`'s temporary file; errors name the file.
  static Status open(const std::string& path, std::unique_ptr<PerfettoTraceWriter>& out);
  ~PerfettoTraceWriter() override;

  Status begin_agent(size_t index, const ExportAgent& agent) override;
  Status add(const ExportEvent& event) override;
  Status end_agent() override;
  Status finish() override;
  const TraceCounts& counts() const override { return counts_; }

 private:
  struct OpenOp {
    uint64_t seq = 0;
    uint64_t end_ns = 0;
    std::vector<uint64_t> cast_flows;  // ended by this op's END
  };
  struct ThreadTrack {
    uint64_t uuid = 0;
    std::vector<OpenOp> stack;  // entries past `depth` are kept for their capacity
    size_t depth = 0;
  };
  struct StringHash {
    using is_transparent = void;
    size_t operator()(std::string_view s) const { return std::hash<std::string_view>()(s); }
  };

  PerfettoTraceWriter() = default;
  // Starts the next packet (cleared, on the agent's sequence).
  castscope::perfetto::TracePacket& packet(uint64_t ts_ns);
  // A new packet holding a track event of `type` on `track`.
  castscope::perfetto::TrackEvent& track_event(uint64_t ts_ns, castscope::perfetto::TrackEvent::Type type,
                                               uint64_t track);
  Status write_packet();
  Status add_op(const ExportEvent& op);
  Status add_cast(const ExportEvent& cast);
  Status add_cache_sample(const ExportEvent& sample);
  Status add_kernel(const ExportEvent& kernel);
  Status add_numerics(const ExportEvent& numerics);
  Status add_scaler_update(const ExportEvent& update);
  // Writes the END of every open op that ended before `ts_ns` (at `ts_ns`
  // too when `inclusive`), on every thread.
  Status close_ops_before(uint64_t ts_ns, bool inclusive);
  Status close_top(ThreadTrack& thread);
  Status thread_track(uint32_t thread, ThreadTrack*& out);
  Status stream_track(uint32_t device, uint32_t stream, uint64_t& uuid);
  uint64_t name_iid(std::string_view name);  // interns it into the current packet when new
  void annotate(castscope::perfetto::TrackEvent& event, int name, std::string_view value);
  void annotate(castscope::perfetto::TrackEvent& event, int name, uint64_t value);
  void annotate_int(castscope::perfetto::TrackEvent& event, int name, int64_t value);
  void annotate_double(castscope::perfetto::TrackEvent& event, int name, double value);

  TraceFile file_;
  std::unique_ptr<google::protobuf::io::FileOutputStream> stream_;
  std::unique_ptr<google::protobuf::io::CodedOutputStream> coded_;
  castscope::perfetto::TracePacket packet_;
  TraceLayout layout_;
  TraceCounts counts_;
  uint32_t sequence_id_ = 0;
  uint64_t agent_uuid_base_ = 0;
  bool has_counters_ = false;
  bool has_scale_track_ = false;     // the agent's GradScaler counter track is written
  std::optional<double> last_scale_;  // the agent's scale after its last update
  std::map<uint32_t, ThreadTrack> threads_;
  std::map<std::pair<uint32_t, uint32_t>, uint64_t> streams_;
  std::unordered_map<std::string, uint64_t, StringHash, std::equal_to<>> names_;  // of the sequence
  std::unordered_map<int, uint64_t> cast_names_;  // (src, dst, outcome) -> iid
  uint64_t next_name_iid_ = 1;
};

}  // namespace castscope::collector
