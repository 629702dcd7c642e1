#include "server/testing/batch_builder.h"

namespace castscope::collector::testing {

v1::AgentIdentity agent_identity(const AgentSpec& spec) {
  v1::AgentIdentity agent;
  agent.set_run_id(spec.run_id);
  agent.set_agent_id(spec.agent_id);
  agent.set_pid(spec.pid);
  agent.set_rank(spec.rank);
  agent.set_local_rank(spec.local_rank);
  agent.set_world_size(spec.world_size);
  agent.set_hostname(spec.hostname);
  agent.set_torch_version(spec.torch_version);
  agent.set_command(spec.command);
  agent.set_policy_hash(spec.policy_hash);
  for (const std::string& file : spec.policy_files) agent.add_policy_files(file);
  agent.set_castscope_version(spec.castscope_version);
  agent.set_aggregate(spec.aggregate);
  return agent;
}

v1::SourceLocation source_location(const LocationSpec& spec) {
  v1::SourceLocation where;
  where.set_kind(spec.kind);
  where.set_file(spec.file);
  where.set_line(spec.line);
  where.set_function(spec.function);
  for (const std::string& frame : spec.stack) where.add_stack(frame);
  where.set_inside_disabled_autocast(spec.inside_disabled_autocast);
  where.set_source_text(spec.source_text);
  for (const std::string& line : spec.also_consumed_at) where.add_also_consumed_at(line);
  return where;
}

v1::CastEvent cast_event(const CastSpec& spec) {
  v1::CastEvent cast;
  cast.set_seq(spec.seq);
  cast.set_ts_ns(spec.ts_ns);
  cast.set_thread(spec.thread);
  cast.set_arg_index(spec.arg_index);
  cast.set_list_index(spec.list_index);
  cast.set_policy(spec.policy);
  cast.set_src_dtype(spec.src_dtype);
  cast.set_dst_dtype(spec.dst_dtype);
  cast.set_outcome(spec.outcome);
  for (int64_t dim : spec.shape) cast.add_shape(dim);
  cast.set_shape_truncated(spec.shape_truncated);
  cast.set_bytes(spec.bytes);
  cast.set_device_type(spec.device_type);
  cast.set_op_seq(spec.op_seq);
  cast.set_role(spec.role);
  cast.set_cache(spec.cache);
  cast.set_source_version(spec.source_version);
  cast.set_cached_version(spec.cached_version);
  cast.set_mode(spec.mode);
  cast.set_phase(spec.phase);
  cast.set_op_id(spec.op_id);
  cast.set_arg_name_id(spec.arg_name_id);
  cast.set_location_id(spec.location_id);
  cast.set_round_trip(spec.round_trip);
  return cast;
}

v1::OpEvent op_event(const OpSpec& spec) {
  v1::OpEvent op;
  op.set_seq(spec.seq);
  op.set_ts_ns(spec.ts_ns);
  op.set_thread(spec.thread);
  op.set_policy(spec.policy);
  op.set_device_type(spec.device_type);
  for (v1::DType dtype : spec.input_dtypes) op.add_input_dtypes(dtype);
  op.set_output_dtype(spec.output_dtype);
  op.set_cpu_duration_ns(spec.cpu_duration_ns);
  op.set_outcome(spec.outcome);
  op.set_autocast_dtype(spec.autocast_dtype);
  op.set_mode(spec.mode);
  op.set_phase(spec.phase);
  for (v1::DeviceType device : spec.autocast_enabled) op.add_autocast_enabled(device);
  op.set_autocast_nesting(spec.autocast_nesting);
  op.set_op_id(spec.op_id);
  op.set_location_id(spec.location_id);
  op.set_probe_reason(spec.probe_reason);
  if (spec.gemm) {
    v1::GemmDescription& gemm = *op.mutable_gemm();
    gemm.set_compute(spec.gemm->compute);
    gemm.set_a_type(spec.gemm->a_type);
    gemm.set_b_type(spec.gemm->b_type);
    gemm.set_d_type(spec.gemm->d_type);
    gemm.set_calls(spec.gemm->calls);
    gemm.set_mixed(spec.gemm->mixed);
  }
  return op;
}

v1::KernelEvent kernel_event(const KernelSpec& spec) {
  v1::KernelEvent kernel;
  kernel.set_seq(spec.seq);
  kernel.set_ts_ns(spec.ts_ns);
  kernel.set_duration_ns(spec.duration_ns);
  kernel.set_activity(spec.activity);
  kernel.set_device(spec.device);
  kernel.set_stream(spec.stream);
  kernel.set_launched_by(spec.launched_by);
  kernel.set_launch_seq(spec.launch_seq);
  kernel.set_bytes(spec.bytes);
  kernel.set_correlation_id(spec.correlation_id);
  kernel.set_name_id(spec.name_id);
  return kernel;
}

v1::CacheSample cache_sample(const CacheSampleSpec& spec) {
  v1::CacheSample sample;
  sample.set_seq(spec.seq);
  sample.set_ts_ns(spec.ts_ns);
  sample.set_trigger(spec.trigger);
  sample.set_iteration(spec.iteration);
  sample.set_live_casts(spec.live_casts);
  sample.set_live_bytes(spec.live_bytes);
  sample.set_orphaned_casts(spec.orphaned_casts);
  sample.set_orphaned_bytes(spec.orphaned_bytes);
  sample.set_cache_hits(spec.cache_hits);
  sample.set_released_casts(spec.released_casts);
  return sample;
}

v1::CastCounts cast_counts(const CastCountsSpec& spec) {
  v1::CastCounts counts;
  counts.set_seq(spec.seq);
  counts.set_first_ts_ns(spec.first_ts_ns);
  counts.set_last_ts_ns(spec.last_ts_ns);
  counts.set_thread(spec.thread);
  counts.set_op_id(spec.op_id);
  counts.set_arg_name_id(spec.arg_name_id);
  counts.set_location_id(spec.location_id);
  counts.set_arg_index(spec.arg_index);
  counts.set_policy(spec.policy);
  counts.set_device_type(spec.device_type);
  counts.set_src_dtype(spec.src_dtype);
  counts.set_dst_dtype(spec.dst_dtype);
  counts.set_outcome(spec.outcome);
  counts.set_role(spec.role);
  counts.set_cache(spec.cache);
  counts.set_mode(spec.mode);
  counts.set_phase(spec.phase);
  counts.set_count(spec.count);
  counts.set_bytes(spec.bytes);
  counts.set_iteration(spec.iteration);
  counts.set_max_version_gap(spec.max_version_gap);
  counts.set_round_trips(spec.round_trips);
  return counts;
}

v1::OpCounts op_counts(const OpCountsSpec& spec) {
  v1::OpCounts counts;
  counts.set_seq(spec.seq);
  counts.set_first_ts_ns(spec.first_ts_ns);
  counts.set_last_ts_ns(spec.last_ts_ns);
  counts.set_thread(spec.thread);
  counts.set_op_id(spec.op_id);
  counts.set_location_id(spec.location_id);
  counts.set_policy(spec.policy);
  counts.set_device_type(spec.device_type);
  counts.set_mode(spec.mode);
  counts.set_phase(spec.phase);
  counts.set_output_dtype(spec.output_dtype);
  counts.set_autocast_dtype(spec.autocast_dtype);
  for (v1::DeviceType device : spec.autocast_enabled) counts.add_autocast_enabled(device);
  counts.set_probe_reason(spec.probe_reason);
  counts.set_calls(spec.calls);
  counts.set_errors(spec.errors);
  counts.set_cpu_duration_ns(spec.cpu_duration_ns);
  counts.set_iteration(spec.iteration);
  return counts;
}

v1::NumericsSummary numerics_summary(const NumericsSpec& spec) {
  v1::NumericsSummary n;
  n.set_seq(spec.seq);
  n.set_first_ts_ns(spec.first_ts_ns);
  n.set_last_ts_ns(spec.last_ts_ns);
  n.set_kind(spec.kind);
  n.set_thread(spec.thread);
  n.set_op_id(spec.op_id);
  n.set_arg_name_id(spec.arg_name_id);
  n.set_location_id(spec.location_id);
  n.set_arg_index(spec.arg_index);
  n.set_device_type(spec.device_type);
  n.set_src_dtype(spec.src_dtype);
  n.set_dst_dtype(spec.dst_dtype);
  n.set_mode(spec.mode);
  n.set_phase(spec.phase);
  n.set_iteration(spec.iteration);
  n.set_tensors(spec.tensors);
  n.set_values(spec.values);
  n.set_overflowed(spec.overflowed);
  n.set_underflowed(spec.underflowed);
  n.set_nonfinite(spec.nonfinite);
  n.set_nan(spec.nan);
  n.set_max_abs_log2(spec.max_abs_log2);
  n.set_first_nonfinite_seq(spec.first_nonfinite_seq);
  n.set_scale(spec.scale);
  n.set_found_inf(spec.found_inf);
  return n;
}

v1::Batch batch_head(const AgentSpec& agent, uint64_t sequence) {
  v1::Batch batch;
  batch.set_protocol_version(v1::ProtocolVersion_MAX);
  *batch.mutable_agent() = agent_identity(agent);
  batch.set_sequence(sequence);
  return batch;
}

uint32_t add_strings(v1::Batch& batch, uint32_t first_id, std::initializer_list<const char*> texts) {
  for (const char* text : texts) {
    v1::InternedString& entry = *batch.add_strings();
    entry.set_id(first_id++);
    entry.set_text(text);
  }
  return first_id;
}

void add_location(v1::Batch& batch, uint32_t id, const LocationSpec& spec) {
  v1::InternedLocation& entry = *batch.add_locations();
  entry.set_id(id);
  *entry.mutable_location() = source_location(spec);
}

v1::CastEvent& add_cast(v1::Batch& batch, const CastSpec& spec) {
  v1::CastEvent& cast = *batch.add_events()->mutable_cast();
  cast = cast_event(spec);
  return cast;
}

v1::OpEvent& add_op(v1::Batch& batch, const OpSpec& spec) {
  v1::OpEvent& op = *batch.add_events()->mutable_op();
  op = op_event(spec);
  return op;
}

v1::KernelEvent& add_kernel(v1::Batch& batch, const KernelSpec& spec) {
  v1::KernelEvent& kernel = *batch.add_events()->mutable_kernel();
  kernel = kernel_event(spec);
  return kernel;
}

v1::CacheSample& add_cache_sample(v1::Batch& batch, const CacheSampleSpec& spec) {
  v1::CacheSample& sample = *batch.add_events()->mutable_cache_sample();
  sample = cache_sample(spec);
  return sample;
}

v1::CastCounts& add_cast_counts(v1::Batch& batch, const CastCountsSpec& spec) {
  v1::CastCounts& counts = *batch.add_events()->mutable_cast_counts();
  counts = cast_counts(spec);
  return counts;
}

v1::OpCounts& add_op_counts(v1::Batch& batch, const OpCountsSpec& spec) {
  v1::OpCounts& counts = *batch.add_events()->mutable_op_counts();
  counts = op_counts(spec);
  return counts;
}

v1::NumericsSummary& add_numerics(v1::Batch& batch, const NumericsSpec& spec) {
  v1::NumericsSummary& n = *batch.add_events()->mutable_numerics();
  n = numerics_summary(spec);
  return n;
}

v1::Batch make_batch(const std::string& run_id, const std::string& agent_id, uint64_t sequence, uint64_t first_seq,
                     int casts) {
  v1::Batch batch = batch_head({.run_id = run_id, .agent_id = agent_id, .pid = 1234, .rank = -1, .hostname = "host"},
                               sequence);
  batch.set_events_recorded_total(sequence * 10);
  batch.set_events_dropped_total(sequence);
  add_strings(batch, 1, {"aten::linear", "weight"});
  add_location(batch, 1,
               {.kind = v1::SourceLocation::KIND_PYTHON, .file = "/src/model.py", .line = 42, .function = "forward",
                .stack = {"/src/model.py:42 forward", "/src/train.py:7 <module>"},
                .also_consumed_at = {"/src/model.py:44"}});
  uint64_t seq = first_seq;
  add_op(batch, {.seq = seq++, .ts_ns = 1000, .policy = v1::CAST_POLICY_LOWER_PRECISION_FP,
                 .device_type = v1::DEVICE_TYPE_CUDA, .input_dtypes = {v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT16},
                 .output_dtype = v1::DTYPE_FLOAT16, .cpu_duration_ns = 555, .outcome = v1::OP_OUTCOME_OK,
                 .autocast_dtype = v1::DTYPE_FLOAT16, .mode = v1::EXECUTION_MODE_EAGER, .phase = v1::PHASE_FORWARD,
                 .autocast_enabled = {v1::DEVICE_TYPE_CUDA}, .autocast_nesting = 1, .op_id = 1, .location_id = 1,
                 .probe_reason = v1::PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST});
  for (int i = 0; i < casts; ++i) {
    add_cast(batch, {.seq = seq++, .ts_ns = 1000 + static_cast<uint64_t>(i), .thread = 2, .arg_index = 1,
                     .list_index = -1, .policy = v1::CAST_POLICY_LOWER_PRECISION_FP, .src_dtype = v1::DTYPE_FLOAT32,
                     .dst_dtype = v1::DTYPE_FLOAT16, .outcome = v1::CAST_OUTCOME_CAST,
                     .shape = {16, 4, 16},  // 1024 fp32 elements: 4096 bytes
                     .shape_truncated = i == 1, .bytes = 4096, .device_type = v1::DEVICE_TYPE_CUDA,
                     .op_seq = first_seq, .role = v1::ROLE_WEIGHT, .cache = v1::CACHE_OUTCOME_STALE_HIT,
                     .source_version = 9, .cached_version = -3, .mode = v1::EXECUTION_MODE_EAGER,
                     .phase = v1::PHASE_BACKWARD, .op_id = 1, .arg_name_id = 2, .location_id = i == 2 ? 0u : 1u,
                     .round_trip = i == 1});
  }
  add_cache_sample(batch, {.seq = seq++, .ts_ns = 2000, .trigger = v1::CacheSample::TRIGGER_ITERATION,
                           .iteration = 3, .live_casts = 4, .live_bytes = 5});
  batch.add_events()->mutable_stats()->set_internal_errors(2);
  return batch;
}

v1::Batch export_run_batch() {
  v1::Batch batch = batch_head({.run_id = "run", .agent_id = "agent-a", .pid = 4321, .rank = 0, .world_size = 1,
                                .hostname = "node1", .command = "python train.py"},
                               1);
  batch.set_events_recorded_total(10);
  add_strings(batch, 1, {"aten::linear", "aten::mm", "input", "weight", "self", "void copy_kernel<float>",
                         "sm90_gemm_bf16", "memset"});
  add_location(batch, 1,
               {.kind = v1::SourceLocation::KIND_PYTHON, .file = "/src/model.py", .line = 42, .function = "forward"});
  auto op = [&](uint64_t seq, uint64_t ts, uint64_t duration, uint32_t name) {
    add_op(batch, {.seq = seq, .ts_ns = ts, .thread = 1, .policy = v1::CAST_POLICY_LOWER_PRECISION_FP,
                   .device_type = v1::DEVICE_TYPE_CPU, .output_dtype = v1::DTYPE_BFLOAT16, .cpu_duration_ns = duration,
                   .outcome = v1::OP_OUTCOME_OK, .mode = v1::EXECUTION_MODE_EAGER, .phase = v1::PHASE_FORWARD,
                   .op_id = name, .location_id = 1});
  };
  auto cast = [&](uint64_t seq, uint64_t ts, uint64_t op_seq, uint32_t op_name, uint32_t arg, v1::DType src,
                  v1::CastOutcome outcome, v1::CacheOutcome cache) {
    add_cast(batch, {.seq = seq, .ts_ns = ts, .thread = 1, .list_index = -1,
                     .policy = v1::CAST_POLICY_LOWER_PRECISION_FP, .src_dtype = src, .dst_dtype = v1::DTYPE_BFLOAT16,
                     .outcome = outcome, .shape = {16, 32}, .bytes = 2048, .device_type = v1::DEVICE_TYPE_CPU,
                     .op_seq = op_seq, .role = v1::ROLE_WEIGHT, .cache = cache, .mode = v1::EXECUTION_MODE_EAGER,
                     .phase = v1::PHASE_FORWARD, .op_id = op_name, .arg_name_id = arg, .location_id = 1});
  };
  auto kernel = [&](uint64_t seq, uint64_t ts, uint64_t duration, uint32_t stream, v1::LaunchedBy by,
                    uint64_t launch_seq, uint32_t name, v1::GpuActivity activity) {
    add_kernel(batch, {.seq = seq, .ts_ns = ts, .duration_ns = duration, .activity = activity, .device = 0,
                       .stream = stream, .launched_by = by, .launch_seq = launch_seq,
                       .bytes = activity == v1::GPU_ACTIVITY_MEMSET ? 512u : 0u,
                       .correlation_id = static_cast<uint32_t>(seq), .name_id = name});
  };
  op(1, 1000, 500, 1);
  cast(2, 1100, 1, 1, 3, v1::DTYPE_FLOAT32, v1::CAST_OUTCOME_CAST, v1::CACHE_OUTCOME_NOT_CACHEABLE);
  cast(3, 1200, 1, 1, 4, v1::DTYPE_FLOAT32, v1::CAST_OUTCOME_CAST, v1::CACHE_OUTCOME_HIT);
  op(4, 2000, 100, 2);
  cast(5, 2010, 4, 2, 5, v1::DTYPE_BFLOAT16, v1::CAST_OUTCOME_ALREADY_TARGET, v1::CACHE_OUTCOME_NOT_CACHEABLE);
  add_cache_sample(batch, {.seq = 6, .ts_ns = 2500, .trigger = v1::CacheSample::TRIGGER_ITERATION, .iteration = 1,
                           .live_casts = 3, .live_bytes = 4096});
  kernel(7, 1300, 50, 7, v1::LAUNCHED_BY_CAST, 2, 6, v1::GPU_ACTIVITY_KERNEL);
  kernel(8, 1400, 200, 7, v1::LAUNCHED_BY_OP, 1, 7, v1::GPU_ACTIVITY_KERNEL);
  kernel(9, 900, 10, 7, v1::LAUNCHED_BY_NONE, 0, 8, v1::GPU_ACTIVITY_MEMSET);
  kernel(10, 3000, 20, 9, v1::LAUNCHED_BY_CAST, 99, 6, v1::GPU_ACTIVITY_KERNEL);
  return batch;
}

v1::Batch export_numerics_batch() {
  v1::Batch batch = batch_head({.run_id = "run", .agent_id = "agent-a", .pid = 4321, .rank = 0, .world_size = 1,
                                .hostname = "node1", .command = "python train.py"},
                               2);
  batch.set_events_recorded_total(17);
  add_strings(batch, 1, {"aten::linear", "aten::mm", "input", "weight"});
  add_location(batch, 1,
               {.kind = v1::SourceLocation::KIND_PYTHON, .file = "/src/model.py", .line = 42, .function = "forward"});
  auto update = [&](uint64_t seq, uint64_t ts, double scale, bool found_inf, uint64_t updates) {
    add_numerics(batch, {.seq = seq, .first_ts_ns = ts, .last_ts_ns = ts,
                         .kind = v1::NumericsSummary::KIND_SCALER_UPDATE, .thread = 1, .location_id = 1,
                         .iteration = updates, .tensors = updates, .scale = scale, .found_inf = found_inf});
  };
  auto cast_window = [&](uint64_t seq, uint32_t arg, uint64_t overflowed, int32_t magnitude) {
    add_numerics(batch, {.seq = seq, .first_ts_ns = 1100, .last_ts_ns = 2900, .kind = v1::NumericsSummary::KIND_CAST,
                         .thread = 1, .op_id = 1, .arg_name_id = arg, .location_id = 1, .arg_index = 0,
                         .device_type = v1::DEVICE_TYPE_CPU, .src_dtype = v1::DTYPE_FLOAT32,
                         .dst_dtype = v1::DTYPE_FLOAT16, .mode = v1::EXECUTION_MODE_EAGER,
                         .phase = v1::PHASE_FORWARD, .iteration = 1, .tensors = 2, .values = 32,
                         .overflowed = overflowed, .max_abs_log2 = magnitude});
  };
  update(11, 2600, 256, false, 1);
  update(12, 2700, 256, false, 2);
  update(13, 2800, 128, true, 3);
  cast_window(14, 3, 3, 16);
  add_numerics(batch, {.seq = 15, .first_ts_ns = 1000, .last_ts_ns = 2900, .kind = v1::NumericsSummary::KIND_OP_OUTPUT,
                       .thread = 1, .op_id = 2, .location_id = 1, .device_type = v1::DEVICE_TYPE_CPU,
                       .src_dtype = v1::DTYPE_FLOAT16, .mode = v1::EXECUTION_MODE_EAGER, .phase = v1::PHASE_FORWARD,
                       .iteration = 1, .tensors = 2, .values = 64, .nonfinite = 5, .max_abs_log2 = 15,
                       .first_nonfinite_seq = 4});
  cast_window(16, 4, 0, -3);
  update(17, 2950, 128, false, 4);
  return batch;
}

}  // namespace castscope::collector::testing
