// The agent's configuration: the JSON object given to castscope_agent_start
// (docs/schema/agent-config.schema.json). Torch-free, so it is parsed and
// tested without libtorch.
#pragma once

#include <cstddef>
#include <cstdint>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "agent/src/schedule/window_schedule.h"
#include "agent/src/record/cast_record.h"

namespace castscope {

// Op probe windows (observers/op_probe.h).
struct ProbeConfig {
  bool enabled = true;
  WindowScheduleConfig schedule;  // probe_steps, probe_every_steps, probe_max_ms, probe_every_ms
  // "ns::name" of the ops a policy casts to lower precision, per device:
  // their in-place and out= variants are what not-autocast looks for.
  std::set<std::pair<DeviceKind, std::string>> lower_precision_ops;
  bool operator==(const ProbeConfig&) const = default;
};

// Numerics windows (numerics/numerics_windows.h): value checks at casts and
// autocast ops' outputs. The same schedule as the op probe's; a GradScaler
// step skipped outside a window opens one until a skipped step is seen in it.
struct NumericsConfig {
  bool enabled = true;
  WindowScheduleConfig schedule;  // numerics_steps, numerics_every_steps, numerics_max_ms, numerics_every_ms
  // After a skip seen outside a window: how many steps the window waits for
  // the next skipped step before it closes.
  uint64_t skip_capture_steps = 200;
  bool operator==(const NumericsConfig&) const = default;
};

// GPU kernel timing with CUPTI (agent/src/gpu, docs/gpu.md).
struct GpuTimingConfig {
  enum class Mode : uint8_t { kAuto, kOn, kOff };
  // auto: on when torch sees a CUDA device; on: try CUPTI whatever torch sees
  // (a stand-in CUPTI in tests) and say why when it fails; off: never.
  Mode mode = Mode::kAuto;
  std::string cupti_library;      // a path; empty: search (docs/gpu.md)
  uint32_t correlation_kind = 5;  // CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2: Kineto keeps CUSTOM0/1
  size_t buffer_bytes = size_t{4} << 20;
  size_t buffer_budget_bytes = size_t{64} << 20;  // all activity buffers together
  // Which autocast ops push their correlation id: CUDA ones, or all (so a
  // stand-in CUPTI on a CPU-only machine sees the same calls as on a GPU).
  bool correlate_all_ops = false;
  WindowScheduleConfig schedule;  // when it collects: gpu_steps, gpu_every_steps, gpu_max_ms, gpu_every_ms
  // GEMM precision from cuBLASLt's logger (cublaslt_logger.h): opt-in, since
  // the logger is process-wide and experimental; independent of `mode`.
  bool cublaslt_logger = false;
  std::string cublaslt_library;  // a path of the loaded cuBLASLt; empty: search
  bool operator==(const GpuTimingConfig&) const = default;
};

struct AgentConfig {
  std::vector<std::string> policy_files;
  std::string events_path;
  bool record_events = true;
  // Every conversion autocast's kernels do not make (dispatch/explicit_casts.h):
  // explicit casts, autograd's, a library's. false: autocast's casts alone.
  bool explicit_casts = true;
  // The precision map's module calls (record/module_scopes.h): the Python
  // package's module hooks bracket them. false: casts name no module.
  bool module_scopes = true;
  // Aggregate mode (docs/aggregate.md): per-site counters instead of
  // per-event cast and op records; `aggregate_max_keys` distinct keys per
  // thread between flushes, events past it counted as dropped.
  bool aggregate = false;
  size_t aggregate_max_keys = 2048;
  size_t ring_records = 1 << 14;
  // 12 rings of 2 MiB plus the agent's fixed ~4.5 MiB stay within the 32 MiB
  // default budget (bench/agent_memory_bench.py); a 13th recording thread's
  // events are dropped and counted.
  size_t max_threads = 12;
  int flush_interval_ms = 50;
  int cache_sample_interval_ms = 1000;
  // Step-free cache samples: one at a miss after this many cacheable casts,
  // hits included (or, once the cache holds more casts than that, after as
  // many as it holds); 0: none. docs/diagnostics.md, cache-growth.
  int cache_sample_every_misses = 16;
  std::string torch_version;  // default: the torch the agent was built against
  std::string internal_path_prefix;  // the torch package dir: frames there are not user code
  // Transport (docs/operations.md): batches go to a spool folder; with a
  // collector, a forwarder process streams them there.
  std::string collector;  // host:port
  std::string spool_dir;  // default with a collector: $TMPDIR/castscope-spool-<uid>
  std::string run_id;     // default: CASTSCOPE_RUN_ID, else made up
  std::string command;
  std::string forwarder_path;
  std::string token_env = "CASTSCOPE_TOKEN";
  std::string tls_ca;
  // Once this process is gone, how long its forwarder keeps trying a
  // collector that is unreachable before it leaves the spool for `castscope load`.
  int give_up_after_s = 60;
  size_t batch_events = 4096;
  uint64_t spool_max_bytes = uint64_t{1} << 30;
  uint64_t spool_segment_bytes = uint64_t{16} << 20;
  // Batches a full spool disk cannot take yet wait in memory up to this
  // (common/spool/spool_backlog.h); 0: dropped at once. Used only while the
  // disk is full, so it is not part of the rings' steady budget above.
  uint64_t spool_backlog_bytes = uint64_t{4} << 20;
  std::string policy_hash;  // computed from the loaded files, not configured
  ProbeConfig probe;        // op probe windows (op_probe.h); its op lists come from the policy
  GpuTimingConfig gpu;
  NumericsConfig numerics;
  // Tests: a key set to its schema default leaves the whole configuration as it was.
  bool operator==(const AgentConfig&) const = default;
};

// Parses and checks a configuration: unknown keys, wrong JSON types and values
// out of range are refused. Returns an error message ("castscope: ...",
// naming the key and what was expected), empty on success.
std::string parse_agent_config(const char* text, AgentConfig& config);

// The keys parse_agent_config accepts (the schema's properties).
std::vector<std::string> agent_config_keys();

}  // namespace castscope
