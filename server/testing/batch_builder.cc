#include "server/testing/batch_builder.h"

#include <cstdio>
#include <cstdlib>

#include "common/numerics/no_magnitude.h"

namespace castscope::collector::testing {

const google::protobuf::FieldDescriptor& event_member(const google::protobuf::Descriptor& message) {
  const google::protobuf::Descriptor& event = *v1::Event::descriptor();
  for (int i = 0; i < event.field_count(); ++i)
    if (event.field(i)->message_type() == &message) return *event.field(i);
  std::fprintf(stderr, "castscope.v1.Event has no field of type %s\n", message.full_name().c_str());
  std::abort();
}

v1::Batch batch_head(const v1::specs::AgentIdentity& agent, uint64_t sequence) {
  v1::Batch batch;
  batch.set_protocol_version(v1::ProtocolVersion_MAX);
  *batch.mutable_agent() = to_message(agent);
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

void add_location(v1::Batch& batch, uint32_t id, const v1::specs::SourceLocation& spec) {
  v1::InternedLocation& entry = *batch.add_locations();
  entry.set_id(id);
  *entry.mutable_location() = to_message(spec);
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
  add<v1::specs::OpEvent>(batch, {.seq = seq++, .ts_ns = 1000, .policy = v1::CAST_POLICY_LOWER_PRECISION_FP,
                                  .device_type = v1::DEVICE_TYPE_CUDA,
                                  .input_dtypes = {v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT16},
                                  .output_dtype = v1::DTYPE_FLOAT16, .cpu_duration_ns = 555,
                                  .outcome = v1::OP_OUTCOME_OK, .autocast_dtype = v1::DTYPE_FLOAT16,
                                  .mode = v1::EXECUTION_MODE_EAGER, .phase = v1::PHASE_FORWARD,
                                  .autocast_enabled = {v1::DEVICE_TYPE_CUDA}, .autocast_nesting = 1, .op_id = 1,
                                  .location_id = 1, .probe_reason = v1::PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST});
  for (int i = 0; i < casts; ++i) {
    add<v1::specs::CastEvent>(batch, {.seq = seq++, .ts_ns = 1000 + static_cast<uint64_t>(i), .thread = 2,
                                      .arg_index = 1, .list_index = -1, .policy = v1::CAST_POLICY_LOWER_PRECISION_FP,
                                      .src_dtype = v1::DTYPE_FLOAT32, .dst_dtype = v1::DTYPE_FLOAT16,
                                      .outcome = v1::CAST_OUTCOME_CAST,
                                      .shape = {16, 4, 16},  // 1024 fp32 elements: 4096 bytes
                                      .shape_truncated = i == 1, .bytes = 4096, .device_type = v1::DEVICE_TYPE_CUDA,
                                      .op_seq = first_seq, .role = v1::ROLE_WEIGHT,
                                      .cache = v1::CACHE_OUTCOME_STALE_HIT, .source_version = 9, .cached_version = -3,
                                      .mode = v1::EXECUTION_MODE_EAGER, .phase = v1::PHASE_BACKWARD, .op_id = 1,
                                      .arg_name_id = 2, .location_id = i == 2 ? 0u : 1u, .round_trip = i == 1});
  }
  add<v1::specs::CacheSample>(batch, {.seq = seq++, .ts_ns = 2000, .trigger = v1::CacheSample::TRIGGER_ITERATION,
                                      .iteration = 3, .live_casts = 4, .live_bytes = 5});
  batch.add_events()->mutable_stats()->set_internal_errors(2);
  return batch;
}

namespace {
// Batch `sequence` of the export tests' agent (agent-a of run "run"), which
// recorded `recorded` events so far: `strings` from id 1, and location 1 at
// /src/model.py:42 in forward.
v1::Batch export_agent_batch(uint64_t sequence, uint64_t recorded, std::initializer_list<const char*> strings) {
  v1::Batch batch = batch_head({.run_id = "run", .agent_id = "agent-a", .pid = 4321, .rank = 0, .world_size = 1,
                                .hostname = "node1", .command = "python train.py"},
                               sequence);
  batch.set_events_recorded_total(recorded);
  add_strings(batch, 1, strings);
  add_location(batch, 1,
               {.kind = v1::SourceLocation::KIND_PYTHON, .file = "/src/model.py", .line = 42, .function = "forward"});
  return batch;
}
}  // namespace

v1::Batch export_run_batch() {
  v1::Batch batch = export_agent_batch(1, 10, {"aten::linear", "aten::mm", "input", "weight", "self",
                                               "void copy_kernel<float>", "sm90_gemm_bf16", "memset"});
  auto op = [&](uint64_t seq, uint64_t ts, uint64_t duration, uint32_t name) {
    add<v1::specs::OpEvent>(batch, {.seq = seq, .ts_ns = ts, .thread = 1,
                                    .policy = v1::CAST_POLICY_LOWER_PRECISION_FP, .device_type = v1::DEVICE_TYPE_CPU,
                                    .output_dtype = v1::DTYPE_BFLOAT16, .cpu_duration_ns = duration,
                                    .outcome = v1::OP_OUTCOME_OK, .mode = v1::EXECUTION_MODE_EAGER,
                                    .phase = v1::PHASE_FORWARD, .op_id = name, .location_id = 1});
  };
  auto cast = [&](uint64_t seq, uint64_t ts, uint64_t op_seq, uint32_t op_name, uint32_t arg, v1::DType src,
                  v1::CastOutcome outcome, v1::CacheOutcome cache) {
    add<v1::specs::CastEvent>(batch, {.seq = seq, .ts_ns = ts, .thread = 1, .list_index = -1,
                                      .policy = v1::CAST_POLICY_LOWER_PRECISION_FP, .src_dtype = src,
                                      .dst_dtype = v1::DTYPE_BFLOAT16, .outcome = outcome, .shape = {16, 32},
                                      .bytes = 2048, .device_type = v1::DEVICE_TYPE_CPU, .op_seq = op_seq,
                                      .role = v1::ROLE_WEIGHT, .cache = cache, .mode = v1::EXECUTION_MODE_EAGER,
                                      .phase = v1::PHASE_FORWARD, .op_id = op_name, .arg_name_id = arg,
                                      .location_id = 1});
  };
  auto kernel = [&](uint64_t seq, uint64_t ts, uint64_t duration, uint32_t stream, v1::LaunchedBy by,
                    uint64_t launch_seq, uint32_t name, v1::GpuActivity activity) {
    add<v1::specs::KernelEvent>(batch, {.seq = seq, .ts_ns = ts, .duration_ns = duration, .activity = activity,
                                        .device = 0, .stream = stream, .launched_by = by, .launch_seq = launch_seq,
                                        .bytes = activity == v1::GPU_ACTIVITY_MEMSET ? 512u : 0u,
                                        .correlation_id = static_cast<uint32_t>(seq), .name_id = name});
  };
  op(1, 1000, 500, 1);
  cast(2, 1100, 1, 1, 3, v1::DTYPE_FLOAT32, v1::CAST_OUTCOME_CAST, v1::CACHE_OUTCOME_NOT_CACHEABLE);
  cast(3, 1200, 1, 1, 4, v1::DTYPE_FLOAT32, v1::CAST_OUTCOME_CAST, v1::CACHE_OUTCOME_HIT);
  op(4, 2000, 100, 2);
  cast(5, 2010, 4, 2, 5, v1::DTYPE_BFLOAT16, v1::CAST_OUTCOME_ALREADY_TARGET, v1::CACHE_OUTCOME_NOT_CACHEABLE);
  add<v1::specs::CacheSample>(batch, {.seq = 6, .ts_ns = 2500, .trigger = v1::CacheSample::TRIGGER_ITERATION,
                                      .iteration = 1, .live_casts = 3, .live_bytes = 4096});
  kernel(7, 1300, 50, 7, v1::LAUNCHED_BY_CAST, 2, 6, v1::GPU_ACTIVITY_KERNEL);
  kernel(8, 1400, 200, 7, v1::LAUNCHED_BY_OP, 1, 7, v1::GPU_ACTIVITY_KERNEL);
  kernel(9, 900, 10, 7, v1::LAUNCHED_BY_NONE, 0, 8, v1::GPU_ACTIVITY_MEMSET);
  kernel(10, 3000, 20, 9, v1::LAUNCHED_BY_CAST, 99, 6, v1::GPU_ACTIVITY_KERNEL);
  return batch;
}

v1::Batch export_numerics_batch() {
  v1::Batch batch = export_agent_batch(2, 17, {"aten::linear", "aten::mm", "input", "weight"});
  auto update = [&](uint64_t seq, uint64_t ts, double scale, bool found_inf, uint64_t updates) {
    add<v1::specs::NumericsSummary>(batch, {.seq = seq, .first_ts_ns = ts, .last_ts_ns = ts,
                                            .kind = v1::NumericsSummary::KIND_SCALER_UPDATE, .thread = 1,
                                            .location_id = 1, .iteration = updates, .tensors = updates,
                                            .max_abs_log2 = kNoMagnitude, .scale = scale, .found_inf = found_inf});
  };
  auto cast_window = [&](uint64_t seq, uint32_t arg, uint64_t overflowed, int32_t magnitude) {
    add<v1::specs::NumericsSummary>(batch, {.seq = seq, .first_ts_ns = 1100, .last_ts_ns = 2900,
                                            .kind = v1::NumericsSummary::KIND_CAST, .thread = 1, .op_id = 1,
                                            .arg_name_id = arg, .location_id = 1, .arg_index = 0,
                                            .device_type = v1::DEVICE_TYPE_CPU, .src_dtype = v1::DTYPE_FLOAT32,
                                            .dst_dtype = v1::DTYPE_FLOAT16, .mode = v1::EXECUTION_MODE_EAGER,
                                            .phase = v1::PHASE_FORWARD, .iteration = 1, .tensors = 2, .values = 32,
                                            .overflowed = overflowed, .max_abs_log2 = magnitude});
  };
  update(11, 2600, 256, false, 1);
  update(12, 2700, 256, false, 2);
  update(13, 2800, 128, true, 3);
  cast_window(14, 3, 3, 16);
  add<v1::specs::NumericsSummary>(batch, {.seq = 15, .first_ts_ns = 1000, .last_ts_ns = 2900,
                                          .kind = v1::NumericsSummary::KIND_OP_OUTPUT, .thread = 1, .op_id = 2,
                                          .location_id = 1, .device_type = v1::DEVICE_TYPE_CPU,
                                          .src_dtype = v1::DTYPE_FLOAT16, .mode = v1::EXECUTION_MODE_EAGER,
                                          .phase = v1::PHASE_FORWARD, .iteration = 1, .tensors = 2, .values = 64,
                                          .nonfinite = 5, .max_abs_log2 = 15, .first_nonfinite_seq = 4});
  cast_window(16, 4, 0, -3);
  update(17, 2950, 128, false, 4);
  return batch;
}

}  // namespace castscope::collector::testing
