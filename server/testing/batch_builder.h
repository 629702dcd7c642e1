// Builders of castscope.v1 batches for unit tests, fuzzer seeds and benches.
//
// Each *Spec names the fields of one message in .proto order; a field left
// out keeps the proto3 default, so a spec says only what a test cares about:
//
//   add_cast(batch, {.seq = 2, .op_id = 1, .src_dtype = v1::DTYPE_FLOAT32, .dst_dtype = v1::DTYPE_BFLOAT16});
//
// Messages are built with the generated setters, so what a spec builds is
// what a test writing the setters by hand would have built. Every member is
// value-initialized ({}): designated initializers may then leave any out.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>
#include <vector>

#include "castscope/v1/transport.pb.h"

namespace castscope::collector::testing {

namespace v1 = castscope::v1;

// A batch's head: AgentIdentity, sequence and the agent's cumulative counts.
struct AgentSpec {
  std::string run_id{};
  std::string agent_id{};
  uint32_t pid{};
  int32_t rank{};
  int32_t local_rank{};
  int32_t world_size{};
  std::string hostname{};
  std::string torch_version{};
  std::string command{};
  std::string policy_hash{};
  std::vector<std::string> policy_files{};
  std::string castscope_version{};
  bool aggregate{};
};

struct LocationSpec {
  v1::SourceLocation::Kind kind{};
  std::string file{};
  uint32_t line{};
  std::string function{};
  std::vector<std::string> stack{};
  bool inside_disabled_autocast{};
  std::string source_text{};
  std::vector<std::string> also_consumed_at{};
};

struct CastSpec {
  uint64_t seq{};
  uint64_t ts_ns{};
  uint32_t thread{};
  uint32_t arg_index{};
  int32_t list_index{};
  v1::CastPolicy policy{};
  v1::DType src_dtype{};
  v1::DType dst_dtype{};
  v1::CastOutcome outcome{};
  std::vector<int64_t> shape{};
  bool shape_truncated{};
  uint64_t bytes{};
  v1::DeviceType device_type{};
  uint64_t op_seq{};
  v1::Role role{};
  v1::CacheOutcome cache{};
  int64_t source_version{};
  int64_t cached_version{};
  v1::ExecutionMode mode{};
  v1::Phase phase{};
  uint32_t op_id{};
  uint32_t arg_name_id{};
  uint32_t location_id{};
  bool round_trip{};
};

struct GemmSpec {
  v1::GemmCompute compute{};
  v1::DType a_type{};
  v1::DType b_type{};
  v1::DType d_type{};
  uint32_t calls{};
  bool mixed{};
};

struct OpSpec {
  uint64_t seq{};
  uint64_t ts_ns{};
  uint32_t thread{};
  v1::CastPolicy policy{};
  v1::DeviceType device_type{};
  std::vector<v1::DType> input_dtypes{};
  v1::DType output_dtype{};
  uint64_t cpu_duration_ns{};
  v1::OpOutcome outcome{};
  v1::DType autocast_dtype{};
  v1::ExecutionMode mode{};
  v1::Phase phase{};
  std::vector<v1::DeviceType> autocast_enabled{};
  uint32_t autocast_nesting{};
  uint32_t op_id{};
  uint32_t location_id{};
  v1::ProbeReason probe_reason{};
  std::optional<GemmSpec> gemm{};
};

struct KernelSpec {
  uint64_t seq{};
  uint64_t ts_ns{};
  uint64_t duration_ns{};
  v1::GpuActivity activity{};
  uint32_t device{};
  uint32_t stream{};
  v1::LaunchedBy launched_by{};
  uint64_t launch_seq{};
  uint64_t bytes{};
  uint32_t correlation_id{};
  uint32_t name_id{};
};

struct CacheSampleSpec {
  uint64_t seq{};
  uint64_t ts_ns{};
  v1::CacheSample::Trigger trigger{};
  uint64_t iteration{};
  uint64_t live_casts{};
  uint64_t live_bytes{};
  uint64_t orphaned_casts{};
  uint64_t orphaned_bytes{};
  uint64_t cache_hits{};
  uint64_t released_casts{};
};

struct CastCountsSpec {
  uint64_t seq{};
  uint64_t first_ts_ns{};
  uint64_t last_ts_ns{};
  uint32_t thread{};
  uint32_t op_id{};
  uint32_t arg_name_id{};
  uint32_t location_id{};
  uint32_t arg_index{};
  v1::CastPolicy policy{};
  v1::DeviceType device_type{};
  v1::DType src_dtype{};
  v1::DType dst_dtype{};
  v1::CastOutcome outcome{};
  v1::Role role{};
  v1::CacheOutcome cache{};
  v1::ExecutionMode mode{};
  v1::Phase phase{};
  uint64_t count{};
  uint64_t bytes{};
  uint64_t iteration{};
  int64_t max_version_gap{};
  uint64_t round_trips{};
};

struct OpCountsSpec {
  uint64_t seq{};
  uint64_t first_ts_ns{};
  uint64_t last_ts_ns{};
  uint32_t thread{};
  uint32_t op_id{};
  uint32_t location_id{};
  v1::CastPolicy policy{};
  v1::DeviceType device_type{};
  v1::ExecutionMode mode{};
  v1::Phase phase{};
  v1::DType output_dtype{};
  v1::DType autocast_dtype{};
  std::vector<v1::DeviceType> autocast_enabled{};
  v1::ProbeReason probe_reason{};
  uint64_t calls{};
  uint64_t errors{};
  uint64_t cpu_duration_ns{};
  uint64_t iteration{};
};

struct NumericsSpec {
  uint64_t seq{};
  uint64_t first_ts_ns{};
  uint64_t last_ts_ns{};
  v1::NumericsSummary::Kind kind{};
  uint32_t thread{};
  uint32_t op_id{};
  uint32_t arg_name_id{};
  uint32_t location_id{};
  uint32_t arg_index{};
  v1::DeviceType device_type{};
  v1::DType src_dtype{};
  v1::DType dst_dtype{};
  v1::ExecutionMode mode{};
  v1::Phase phase{};
  uint64_t iteration{};
  uint64_t tensors{};
  uint64_t values{};
  uint64_t overflowed{};
  uint64_t underflowed{};
  uint64_t nonfinite{};
  uint64_t nan{};
  int32_t max_abs_log2{-32768};  // NUMERICS_NO_MAGNITUDE
  uint64_t first_nonfinite_seq{};
  double scale{};
  bool found_inf{};
};

// Messages from specs.
v1::AgentIdentity agent_identity(const AgentSpec& spec);
v1::SourceLocation source_location(const LocationSpec& spec);
v1::CastEvent cast_event(const CastSpec& spec);
v1::OpEvent op_event(const OpSpec& spec);
v1::KernelEvent kernel_event(const KernelSpec& spec);
v1::CacheSample cache_sample(const CacheSampleSpec& spec);
v1::CastCounts cast_counts(const CastCountsSpec& spec);
v1::OpCounts op_counts(const OpCountsSpec& spec);
v1::NumericsSummary numerics_summary(const NumericsSpec& spec);

// A new batch of the current protocol with its head set.
v1::Batch batch_head(const AgentSpec& agent, uint64_t sequence);

// Interns `texts` with ids first_id, first_id + 1, ...; returns the next free id.
uint32_t add_strings(v1::Batch& batch, uint32_t first_id, std::initializer_list<const char*> texts);
void add_location(v1::Batch& batch, uint32_t id, const LocationSpec& spec);

// Appends one event to the batch and returns it.
v1::CastEvent& add_cast(v1::Batch& batch, const CastSpec& spec);
v1::OpEvent& add_op(v1::Batch& batch, const OpSpec& spec);
v1::KernelEvent& add_kernel(v1::Batch& batch, const KernelSpec& spec);
v1::CacheSample& add_cache_sample(v1::Batch& batch, const CacheSampleSpec& spec);
v1::CastCounts& add_cast_counts(v1::Batch& batch, const CastCountsSpec& spec);
v1::OpCounts& add_op_counts(v1::Batch& batch, const OpCountsSpec& spec);
v1::NumericsSummary& add_numerics(v1::Batch& batch, const NumericsSpec& spec);

// The collector tests' batch: `casts` cast events (seq from first_seq after
// one op), one cache sample and the agent's stats, with two interned strings
// ("aten::linear", "weight") and one location (/src/model.py:42).
v1::Batch make_batch(const std::string& run_id, const std::string& agent_id, uint64_t sequence,
                     uint64_t first_seq = 1, int casts = 3);

// A small run for the export tests: one agent (rank 0, pid 4321, host
// "node1"), one thread, two ops with their casts, a cache sample and four GPU
// activities, one of each kind of launch:
//
//   seq  ts     what
//   1    1000   op aten::linear (500 ns, thread 1) ─ launched kernel 8
//   2    1100   cast input fp32→bf16 (op 1)        ─ launched kernel 7
//   3    1200   cast weight fp32→bf16 (op 1), cache hit
//   4    2000   op aten::mm (100 ns)
//   5    2010   cast self already bf16 (op 4)
//   6    2500   cache sample: 3 casts, 4096 bytes
//   7    1300   kernel copy (50 ns, GPU 0 stream 7), launched by cast 2
//   8    1400   kernel gemm (200 ns, stream 7), launched by op 1
//   9    900    memset (10 ns, stream 7), launched outside castscope's ops
//   10   3000   kernel (20 ns, stream 9), launched by cast 99: not stored
v1::Batch export_run_batch();

// The export run's second batch: numerics windows and GradScaler updates of
// the same agent (thread 1, /src/model.py:42):
//
//   seq  ts          what
//   11   2600        scaler update: scale 256, 1 update
//   12   2700        scaler update: scale 256, 2 updates (no change)
//   13   2800        scaler update: step skipped, scale 128, 3 updates
//   14   1100-2900   cast window: input of aten::linear fp32→fp16, 3 of 32 values overflowed
//   15   1000-2900   op window: aten::mm's outputs, 5 of 64 non-finite, first at op 4
//   16   1100-2900   cast window: weight of aten::linear, nothing wrong
//   17   2950        scaler update: scale 128, 4 updates
v1::Batch export_numerics_batch();

}  // namespace castscope::collector::testing
