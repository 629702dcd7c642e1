// One run's stored events, agent by agent, for the trace writers: ops, casts,
// cache samples and numerics (GradScaler updates, and the numerics windows
// that found a problem) in the agent's sequence order (which is the order they
// started in: an op takes its seq and timestamp before its casts; a numerics
// window takes its seq when it closes, so it comes after the events of its
// window, its ts_ns at its first check), with the
// agent's GPU kernels merged in by start time (never before the cast or op
// that launched them). Each launching cast or op comes with the seqs of the
// kernels it launched, so a writer can draw a flow from it to each of them.
//
// Memory stays bounded whatever the run's size: every table is read through
// a SQLite cursor that steps one row at a time over the agent's range of the
// composite key (no secondary index is needed, none exists); kernels are read
// twice, ordered by start and by launching seq, through SQLite's sorter,
// which spills to temporary files rather than growing. Rows are read through
// the store's row codec (row_codec.h); strings and source locations through
// its resolver, whose cache is dropped between agents when it grows large.
// Each agent is read in one read transaction, so its kernels and the casts
// and ops that launched them come from one snapshot; under WAL this works
// beside a collector that is still writing.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <unordered_set>
#include <vector>

#include "castscope/v1/events.pb.h"
#include "common/numerics/no_magnitude.h"
#include "server/src/status.h"
#include "server/src/store/row_codec.h"
#include "server/src/store/sqlite_store.h"

namespace castscope::collector {

// The store's agent and location rows (row_codec.h), as the writers see them.
using ExportAgent = StoredAgent;
using ExportLocation = StoredLocation;

// One event. Views and spans stay valid until the next call of next().
struct ExportEvent {
  enum class Kind : uint8_t { kOp, kCast, kCacheSample, kKernel, kNumerics };
  Kind kind = Kind::kOp;
  uint64_t seq = 0;
  uint64_t ts_ns = 0;  // CLOCK_MONOTONIC ns of the agent's host
  uint32_t thread = 0;  // op, cast, numerics: castscope's thread index
  std::string_view name;  // op, cast, numerics: the op; kernel: the kernel as CUPTI names it
  const ExportLocation* location = nullptr;  // op, cast, numerics; null: none recorded
  v1::CastPolicy policy = v1::CAST_POLICY_UNSPECIFIED;  // op, cast
  v1::DeviceType device_type = v1::DEVICE_TYPE_UNSPECIFIED;
  v1::ExecutionMode mode = v1::EXECUTION_MODE_UNSPECIFIED;
  v1::Phase phase = v1::PHASE_UNSPECIFIED;
  // Op.
  uint64_t duration_ns = 0;  // op: cpu_duration_ns (casts and the op); kernel: on the GPU
  v1::DType output_dtype = v1::DTYPE_UNSPECIFIED;
  v1::OpOutcome op_outcome = v1::OP_OUTCOME_UNSPECIFIED;
  v1::ProbeReason probe_reason = v1::PROBE_REASON_UNSPECIFIED;
  // Cast (numerics: the window's cast, src_dtype and dst_dtype too; an op's: its output in src_dtype).
  std::string_view arg_name;
  int32_t list_index = -1;
  v1::DType src_dtype = v1::DTYPE_UNSPECIFIED, dst_dtype = v1::DTYPE_UNSPECIFIED;
  v1::CastOutcome outcome = v1::CAST_OUTCOME_UNSPECIFIED;
  v1::Role role = v1::ROLE_UNSPECIFIED;
  v1::CastMaker maker = v1::CAST_MAKER_UNSPECIFIED;  // UNSPECIFIED or AUTOCAST: autocast's decision
  std::string_view module, parameter;  // the precision map's keys (CastEvent.module, .parameter); empty: none
  v1::CacheOutcome cache = v1::CACHE_OUTCOME_UNSPECIFIED;
  uint64_t bytes = 0;  // cast: source bytes; kernel: memcpy/memset bytes
  uint64_t op_seq = 0;
  std::span<const int64_t> shape;
  bool shape_truncated = false;
  // Cache sample (numerics: iteration, optimizer steps seen).
  v1::CacheSample::Trigger trigger = v1::CacheSample::TRIGGER_UNSPECIFIED;
  uint64_t iteration = 0, live_casts = 0, live_bytes = 0;
  // Numerics: a GradScaler update (KIND_SCALER_UPDATE: scale, found_inf,
  // tensors = updates so far), or a window's counts at one site that found a
  // problem (a cast that overflowed, underflowed or met NaN; an op whose
  // outputs went non-finite from finite inputs), over [ts_ns, last_ts_ns].
  v1::NumericsSummary::Kind numerics_kind = v1::NumericsSummary::KIND_UNSPECIFIED;
  uint64_t last_ts_ns = 0;
  uint64_t tensors = 0, values = 0, overflowed = 0, underflowed = 0, nonfinite = 0, nan = 0;
  int32_t max_abs_log2 = kNoMagnitude;  // none finite and nonzero
  uint64_t first_nonfinite_seq = 0;
  double scale = 0;
  bool found_inf = false;
  // Kernel.
  uint32_t gpu_device = 0, stream = 0, correlation_id = 0;
  v1::GpuActivity activity = v1::GPU_ACTIVITY_UNSPECIFIED;
  v1::LaunchedBy launched_by = v1::LAUNCHED_BY_UNSPECIFIED;
  uint64_t launch_seq = 0;  // 0: launched outside castscope's ops
  // Its launching cast or op came before it, listing it in `launched`.
  bool launch_joined = false;
  // Cast, op: seqs of the kernels it launched (at most kMaxLaunchedKernels).
  std::span<const uint64_t> launched;
};

// A run's events one at a time, agent by agent, in each agent's seq order
// (kernels merged in by time), as the trace writers take them.
class RunEventCursor {
 public:
  static constexpr size_t kMaxLaunchedKernels = 1024;

  // Opens the store at `db_path` read-only and finds `run_id`: NOT_FOUND
  // (naming the run and the file) when it is not there.
  static Status open(const std::string& db_path, const std::string& run_id, std::unique_ptr<RunEventCursor>& out);
  ~RunEventCursor();

  const std::string& run_id() const { return run_id_; }
  const std::string& db_path() const { return db_.path(); }
  // In the order they were first seen.
  const std::vector<ExportAgent>& agents() const { return agents_; }

  // Starts reading agents()[index] (ending the previous agent's read).
  Status start_agent(size_t index);
  // The agent's next event; false at its end, or on an error (`error` set).
  bool next(ExportEvent& event, Status& error);

 private:
  template <typename Row, const auto& kColumns>
  struct Cursor;
  struct Cursors;
  RunEventCursor();
  Status load_agents(const std::string& run_id);
  Status end_agent();
  bool fill_main(Status& error);  // reads the next op, cast, sample or numerics row into main_
  // fill_main's readers, one per table.
  Status read_cast(const StoredCast& row, ExportEvent& e);
  Status read_op(const StoredOp& row, ExportEvent& e);
  void read_sample(const StoredCacheSample& row, ExportEvent& e);
  Status read_numerics(const StoredNumerics& row, ExportEvent& e);
  template <typename Event>
  Status read_op_site(const Event& event, int64_t op, int64_t location, v1::LaunchedBy by, ExportEvent& e);
  bool fill_kernel(Status& error);
  Status collect_launched(uint64_t seq, v1::LaunchedBy by);

  Database db_;
  std::string run_id_;
  std::vector<ExportAgent> agents_;
  bool in_transaction_ = false;
  bool has_numerics_ = false;  // the store has the numerics table (schema 15)
  std::unique_ptr<Cursors> cursors_;
  ExportEvent main_, kernel_;
  bool main_ready_ = false, kernel_ready_ = false;
  std::vector<int64_t> main_shape_;
  std::vector<uint64_t> launched_;
  // Kernels a yielded cast or op listed, not yet yielded themselves (kernels
  // in flight only).
  std::unordered_set<uint64_t> awaited_kernels_;
  StoreResolver resolver_;
};

}  // namespace castscope::collector
