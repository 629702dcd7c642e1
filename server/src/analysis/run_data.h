// One run's stored events, aggregated in one pass per table: what reports
// and analyzers work from. Events of an agent are a range of the composite
// key, so a run is read without scanning other runs.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "castscope/v1/events.pb.h"
#include "common/numerics/no_magnitude.h"
#include "server/src/status.h"
#include "server/src/store/row_codec.h"
#include "server/src/store/sqlite_store.h"

namespace castscope::collector {

struct SiteRef {
  std::string file;
  uint32_t line = 0;
  std::string function;
  std::string op;
  std::string arg;
  bool inside_disabled_autocast = false;  // scripted code inside `autocast(enabled=False)`
  // A scripted line run while torch.jit.trace recorded: the traced Python
  // line that called into TorchScript (its location's second stack frame).
  std::string called_from_file = {};
  uint32_t called_from_line = 0;
  std::string called_from_function = {};
  auto key() const { return std::tie(file, line, op, arg); }
};

// Whether a cast was made by autocast (its kernel, the compiled graphs, the
// callable overlays; every row of a store before makers), not elsewhere
// (CastEvent.maker).
inline bool autocast_decision(v1::CastMaker maker) {
  return maker == v1::CAST_MAKER_UNSPECIFIED || maker == v1::CAST_MAKER_AUTOCAST;
}
// The same for a decision: autocast's, with its policy. A conversion an op
// made of its input for the dtype argument autocast set (maker AUTOCAST,
// policy UNSPECIFIED) is autocast's, and one of the conversions, not a site.
inline bool autocast_decision(v1::CastMaker maker, v1::CastPolicy policy) {
  return autocast_decision(maker) && policy != v1::CAST_POLICY_UNSPECIFIED;
}

// The float8 scaling of a site's conversions to float8 (CastEvent.float8),
// as powers of two: the extremes over its conversions. kNoMagnitude (a zero
// amax) counts apart, in zero_amax_casts.
struct Float8Span {
  uint64_t scaled = 0;           // conversions whose scaling the maker passed
  uint64_t zero_amax_casts = 0;  // of them, ones with a zero amax (the whole tensor or a row)
  int32_t scale_log2_min = INT32_MAX, scale_log2_max = INT32_MIN;
  int32_t amax_log2_min = INT32_MAX, amax_log2_max = INT32_MIN;  // over the nonzero amaxes
};

// Every cast decision of one kind at one site.
struct SiteRow {
  SiteRef site;
  v1::ExecutionMode mode = v1::EXECUTION_MODE_UNSPECIFIED;
  v1::Role role = v1::ROLE_UNSPECIFIED;
  v1::CastPolicy policy = v1::CAST_POLICY_UNSPECIFIED;
  v1::DType src = v1::DTYPE_UNSPECIFIED;
  v1::DType dst = v1::DTYPE_UNSPECIFIED;
  v1::CastOutcome outcome = v1::CAST_OUTCOME_UNSPECIFIED;
  v1::DeviceType device = v1::DEVICE_TYPE_UNSPECIFIED;
  v1::CastMaker maker = v1::CAST_MAKER_UNSPECIFIED;  // UNSPECIFIED (a store before makers) or AUTOCAST: autocast's decisions
  uint64_t count = 0;
  uint64_t bytes = 0;         // outcome CAST: every decision's source bytes, converted or served from the cache
  uint64_t served_bytes = 0;  // of those, served by the cast cache (hits and stale hits): nothing converted
  uint64_t hits = 0;
  uint64_t misses = 0;
  uint64_t stale_hits = 0;
  int64_t max_version_gap = 0;  // source_version - cached_version on stale hits
  uint64_t first_seq = 0;
  uint64_t backward = 0;  // decisions made while the autograd engine ran
  uint64_t round_trips = 0;       // casts undoing an explicit cast (CastEvent.round_trip)
  uint64_t round_trip_bytes = 0;  // their source bytes
  Float8Span float8;              // conversions to float8 with their maker's scale
  std::set<int32_t> ranks;        // of the processes that made these decisions (RANK; -1 unset)
  size_t last_agent = SIZE_MAX;   // loading: the agent whose rank was added last
};

// The precision map's row of one nn.Module or one of its parameters
// (CastEvent.module / .parameter): the dtypes its casts came from and went
// to, by what made them, and the bytes each maker converted. Events mode
// only (aggregate mode's counters have no module).
struct PrecisionRow {
  std::string module;     // qualified name from the root ("<ClassName>": a root)
  std::string parameter;  // empty: the module's own row (casts of its activations and inputs)
  std::set<v1::DType> stored;        // a parameter's dtype: its conversions' source
  std::set<v1::DType> computed;      // autocast's decisions: the dtype each op computed in
  std::set<v1::DType> communicated;  // FSDP's conversions: the dtype gathered or reduced in
  std::set<v1::DType> cast_to;       // every conversion's target
  std::map<std::string, uint64_t> bytes_by_maker;  // source bytes converted, by maker_label (cache hits and relabels convert none)
  uint64_t conversions = 0;
};

// Calls of one op at one line (site.arg empty), and the ranks that made them.
struct SiteOpCalls {
  SiteRef site;
  uint64_t calls = 0;
  uint64_t first_seq = 0;
  std::set<int32_t> ranks;
  size_t last_agent = SIZE_MAX;  // loading: the agent whose rank was added last
};

struct OpRow {
  std::string op;
  v1::CastPolicy policy = v1::CAST_POLICY_UNSPECIFIED;
  uint64_t calls = 0;
  uint64_t errors = 0;
  uint64_t cpu_time_ns = 0;
  std::map<v1::DType, uint64_t> output_dtypes;
};

// Ops that ran through an autocast kernel while the autograd engine ran, and
// compiled backward graphs (compiled::backward) run with autocast on.
struct BackwardOpRow : SiteOpCalls {};

// Ops the op probe recorded (OpEvent.probe_reason), by line, op and reason.
struct ProbeOpRow : SiteOpCalls {
  v1::ProbeReason reason = v1::PROBE_REASON_UNSPECIFIED;
  v1::DeviceType device = v1::DEVICE_TYPE_UNSPECIFIED;
  std::set<v1::DType> input_dtypes;
  std::set<v1::DType> output_dtypes;
};

// What one line and op computed in under one execution mode, from op
// events: castscope's kernels (autocast ops, every call) and the op probe's
// PROBE_REASON_DTYPES records (every outermost op, in probe windows only).
// Forward ops only. mode-mismatch and compile-mismatch compare them.
// `autocast`: autocast was on for the op's device; `autocast_dtype`: the
// region's lower-precision dtype.
struct SiteDtypeRow {
  SiteRef site;  // arg empty
  v1::ExecutionMode mode = v1::EXECUTION_MODE_UNSPECIFIED;
  bool autocast = false;
  v1::DType autocast_dtype = v1::DTYPE_UNSPECIFIED;
  std::set<v1::DType> output_dtypes;
  uint64_t first_seq = 0;
  bool probe_only = true;  // seen only by the op probe
  std::set<int32_t> ranks;
  size_t last_agent = SIZE_MAX;
};

// One CacheSample (events.proto), whatever its trigger.
struct CacheSampleRow {
  std::string agent_id;
  uint64_t iteration = 0;  // optimizer steps seen when it was taken
  uint64_t live_casts = 0;
  uint64_t live_bytes = 0;
  v1::CacheSample::Trigger trigger = v1::CacheSample::TRIGGER_UNSPECIFIED;
  uint64_t seq = 0;
  uint64_t orphaned_casts = 0, orphaned_bytes = 0;
  uint64_t cache_hits = 0, released_casts = 0;  // running totals
};

// GPU time (docs/gpu.md) at one source line and op: the kernels launched by
// its casts (joined through KernelEvent.launch_seq to the cast rows) and by
// the op itself (to the op rows).
struct GpuSiteRow {
  SiteRef site;  // arg empty
  uint64_t cast_ns = 0, compute_ns = 0;
  uint64_t cast_kernels = 0, compute_kernels = 0;
};

// GEMM precision (docs/gpu.md, "GEMM precision"), exact: the matmuls of the
// ops at one line and op as cuBLASLt's logger described them (OpEvent.gemm),
// one row per description.
struct GemmExactRow {
  SiteRef site;  // arg empty
  v1::GemmCompute compute = v1::GEMM_COMPUTE_UNSPECIFIED;
  v1::DType a_type = v1::DTYPE_UNSPECIFIED, b_type = v1::DTYPE_UNSPECIFIED, d_type = v1::DTYPE_UNSPECIFIED;
  uint64_t ops = 0;      // op calls with this description
  uint64_t matmuls = 0;  // their matmuls (GemmDescription.calls, each saturating at 255)
  uint64_t mixed = 0;    // op calls whose later matmuls had another compute or A type
};

// GEMM precision read from kernel names (castscope::gpu::classify_kernel), a
// heuristic: GEMM kernels of one precision reading, at one line and op (the
// op that launched them) or outside autocast ops (site empty).
struct GemmKernelRow {
  SiteRef site;  // arg empty
  std::string inputs, accumulate, confidence;  // classify_kernel's words
  bool tensor_cores = false;
  uint64_t kernels = 0, gpu_ns = 0;
  std::string example;  // the row's busiest kernel name
  std::string why;      // classify_kernel's reading of it
};

// Numerics windows (docs/numerics.md): the counts of one site across the
// run's windows. Casts: site.arg names the argument; ops: arg empty.
struct NumericsSiteRow {
  SiteRef site;
  v1::NumericsSummary::Kind kind = v1::NumericsSummary::KIND_UNSPECIFIED;
  v1::DType src = v1::DTYPE_UNSPECIFIED, dst = v1::DTYPE_UNSPECIFIED;
  v1::ExecutionMode mode = v1::EXECUTION_MODE_UNSPECIFIED;
  v1::Phase phase = v1::PHASE_UNSPECIFIED;
  v1::DeviceType device = v1::DEVICE_TYPE_UNSPECIFIED;
  uint64_t windows = 0;  // summaries folded (one per window and thread)
  uint64_t tensors = 0, values = 0, overflowed = 0, underflowed = 0, nonfinite = 0, nan = 0;
  uint64_t saturated = 0;               // casts to float8: values clipped to the format's largest
  int32_t max_abs_log2 = kNoMagnitude;  // none
  std::set<int32_t> ranks;
  size_t last_agent = SIZE_MAX;
};

// The first value castscope saw turn non-finite in one process: the cast
// (overflow) or op (inf/NaN from finite inputs) with the smallest seq.
struct FirstNonfinite {
  std::string agent_id;
  int32_t rank = -1;
  uint64_t seq = 0;
  uint64_t iteration = 0;  // optimizer steps when its window first checked a value
  SiteRef site;
  v1::NumericsSummary::Kind kind = v1::NumericsSummary::KIND_UNSPECIFIED;
};

// One GradScaler.update() (NumericsSummary KIND_SCALER_UPDATE).
struct ScalerUpdateRow {
  std::string agent_id;
  int32_t rank = -1;
  uint64_t seq = 0;
  uint64_t iteration = 0;  // optimizer steps seen
  uint64_t updates = 0;    // the scaler's updates so far
  double scale = 0;
  bool found_inf = false;
  SiteRef site;  // the line that called update()
};

// An agent of the run as the store keeps it (row_codec.h: the one agent row
// every reader uses).
using AgentRow = StoredAgent;

struct RunData {
  std::string run_id;
  uint64_t first_seen_unix_ns = 0, last_seen_unix_ns = 0;
  std::vector<AgentRow> agents;
  bool aggregate = false;  // some agent ran in aggregate mode: findings that need event order are not available
  std::vector<SiteRow> sites;  // autocast's run-time cast decisions: every mode but COMPILING
  // Every other conversion (explicit casts, autograd's gradient conversions;
  // CastEvent.maker), kept apart so that autocast's findings read autocast's
  // decisions alone; one row per site, maker, dtypes, role and mode.
  std::vector<SiteRow> conversions;
  std::vector<PrecisionRow> precision_map;  // by module, then parameter (the module's own row first)
  uint64_t optimizer_steps = 0;  // the most any process's cache samples saw (0: none seen)
  std::vector<OpRow> ops;      // autocast ops run: neither COMPILING nor COMPILED records
  // torch.compile (docs/events.md): the decisions autocast made while a graph
  // was traced (COMPILING casts, FakeTensor arguments, nothing converted),
  // kept apart so that they never count as casts or feed run-time findings;
  // one row per site, kind and phase (`backward` is 0 or `count`).
  std::vector<SiteRow> compile_decisions;
  uint64_t compiled_graph_runs = 0;  // COMPILED op events: runs of compiled::* graphs
  std::vector<BackwardOpRow> backward_ops;
  std::vector<ProbeOpRow> probe_ops;
  std::vector<SiteDtypeRow> site_dtypes;
  // Ops seen with autocast off while torch.jit.trace recorded (the agent's
  // trace observer): file, line, op.
  std::set<std::tuple<std::string, uint32_t, std::string>> traced_with_autocast_off;
  std::vector<CacheSampleRow> cache_samples;  // every trigger; agent by agent, each in seq (time) order
  uint64_t max_live_casts = 0, max_live_bytes = 0;
  std::vector<GpuSiteRow> gpu_sites;
  uint64_t gpu_cast_ns = 0, gpu_compute_ns = 0, gpu_unattributed_ns = 0;
  uint64_t gpu_unjoined_ns = 0;  // launched by a cast or op the store does not have
  std::vector<GemmExactRow> gemm_exact;
  std::vector<GemmKernelRow> gemm_kernels;      // launched by autocast ops
  std::vector<GemmKernelRow> gemm_unattributed; // launched outside autocast ops (site empty)
  std::vector<NumericsSiteRow> numerics_sites;
  std::vector<FirstNonfinite> first_nonfinite;  // one per process that saw one
  std::vector<ScalerUpdateRow> scaler_updates;  // agent by agent, each in seq (time) order
};

// Reads `run_id` from an open store; NOT_FOUND when no such run. Events are
// read in chunks, each its own read transaction; `between_reads`, when set,
// runs between them (holding no snapshot), so a reader beside a live
// collector can let its WAL checkpoints through.
// With `rank`, only the processes of that rank (RANK): NOT_FOUND when the
// run has none. `progress`, when set, is told after each chunk how many cast
// and op rows are read, of how many.
using ReadProgress = std::function<void(uint64_t rows_read, uint64_t rows_total)>;
Status load_run_data(Database& db, const std::string& run_id, RunData& out,
                     const std::function<void()>& between_reads = nullptr,
                     std::optional<int32_t> rank = std::nullopt, const ReadProgress& progress = nullptr);

}  // namespace castscope::collector
