// The agent's hand-written encoders against the whole schema. Records with
// every field set to a non-default value go through BatchEncoder and the
// JSON-lines writer, are decoded with libprotobuf, and compared with a message
// the test builds with the generated setters. Then a walk over the
// descriptors checks that every field of every message the agent produces
// was written: a field added to the .proto that an encoder forgets fails here
// until it is encoded, or listed below with the reason the agent never
// writes it.
#include <gtest/gtest.h>

#include <google/protobuf/descriptor.h>
#include <google/protobuf/util/json_util.h>
#include <google/protobuf/util/message_differencer.h>

#include <set>
#include <string>
#include <vector>

#include "agent/src/encode/batch_encoder.h"
#include "agent/src/encode/jsonl_writer.h"
#include "agent/src/record/module_scopes.h"
#include "agent/testing/records.h"
#include "castscope/v1/transport.pb.h"
#include "server/testing/batch_builder.h"

namespace castscope {
namespace {

namespace gpb = google::protobuf;
// What the agent should produce is written with the collector tests' builders.
namespace fixtures = castscope::collector::testing;

// Fields of Batch (and below) that BatchEncoder never writes.
const std::set<std::string> kNotInBatches = {
    // In a batch, names and locations travel once, in Batch.strings and
    // Batch.locations; events carry op_id, arg_name_id and location_id.
    "castscope.v1.CastEvent.op",
    "castscope.v1.CastEvent.arg_name",
    "castscope.v1.CastEvent.location",
    "castscope.v1.CastEvent.module",
    "castscope.v1.CastEvent.parameter",
    "castscope.v1.OpEvent.op",
    "castscope.v1.OpEvent.location",
    "castscope.v1.KernelEvent.name",
    "castscope.v1.CastCounts.op",
    "castscope.v1.CastCounts.arg_name",
    "castscope.v1.CastCounts.location",
    "castscope.v1.OpCounts.op",
    "castscope.v1.OpCounts.location",
    "castscope.v1.NumericsSummary.op",
    "castscope.v1.NumericsSummary.arg_name",
    "castscope.v1.NumericsSummary.location",
};

// Fields of Event (and below) that the JSON-lines writer never writes.
const std::set<std::string> kNotInJsonLines = {
    // The ids of interned strings and locations exist only in batches; a line
    // carries the names and the location itself.
    "castscope.v1.CastEvent.op_id",
    "castscope.v1.CastEvent.arg_name_id",
    "castscope.v1.CastEvent.location_id",
    "castscope.v1.CastEvent.module_id",
    "castscope.v1.CastEvent.parameter_id",
    "castscope.v1.OpEvent.op_id",
    "castscope.v1.OpEvent.location_id",
    "castscope.v1.KernelEvent.name_id",
    "castscope.v1.CastCounts.op_id",
    "castscope.v1.CastCounts.arg_name_id",
    "castscope.v1.NumericsSummary.op_id",
    "castscope.v1.NumericsSummary.arg_name_id",
    "castscope.v1.NumericsSummary.location_id",
    "castscope.v1.CastCounts.location_id",
    "castscope.v1.OpCounts.op_id",
    "castscope.v1.OpCounts.location_id",
};

// Every field reachable from `root` through message fields, minus `skip`.
void reachable_fields(const gpb::Descriptor* message, const std::set<std::string>& skip,
                      std::set<const gpb::Descriptor*>& visited, std::set<std::string>& out) {
  if (!visited.insert(message).second) return;
  for (int i = 0; i < message->field_count(); ++i) {
    const gpb::FieldDescriptor* field = message->field(i);
    if (skip.count(field->full_name())) continue;
    out.insert(field->full_name());
    if (field->message_type() != nullptr) reachable_fields(field->message_type(), skip, visited, out);
  }
}

std::set<std::string> reachable_fields(const gpb::Descriptor* root, const std::set<std::string>& skip) {
  std::set<const gpb::Descriptor*> visited;
  std::set<std::string> out;
  reachable_fields(root, skip, visited, out);
  return out;
}

// Fields present in `message` and below: set to a non-default value (proto3
// scalars), present (messages, oneof members) or non-empty (repeated).
void present_fields(const gpb::Message& message, std::set<std::string>& out) {
  const gpb::Reflection* reflection = message.GetReflection();
  std::vector<const gpb::FieldDescriptor*> fields;
  reflection->ListFields(message, &fields);
  for (const gpb::FieldDescriptor* field : fields) {
    out.insert(field->full_name());
    if (field->cpp_type() != gpb::FieldDescriptor::CPPTYPE_MESSAGE) continue;
    if (field->is_repeated()) {
      for (int i = 0; i < reflection->FieldSize(message, field); ++i)
        present_fields(reflection->GetRepeatedMessage(message, field, i), out);
    } else {
      present_fields(reflection->GetMessage(message, field), out);
    }
  }
}

void expect_every_field_written(const std::set<std::string>& present, const gpb::Descriptor* root,
                                const std::set<std::string>& never_written, const std::string& writer) {
  for (const std::string& field : reachable_fields(root, never_written))
    EXPECT_TRUE(present.count(field)) << writer << " does not write " << field
                                      << " (encode it, or add it to the allow-list with the reason)";
  // The allow-lists stay true: a field the agent starts writing leaves them.
  for (const std::string& field : never_written)
    EXPECT_FALSE(present.count(field)) << writer << " writes " << field << ", which its allow-list says it never does";
}

void expect_equal(const gpb::Message& expected, const gpb::Message& actual) {
  gpb::util::MessageDifferencer differencer;
  std::string report;
  differencer.ReportDifferencesToString(&report);
  EXPECT_TRUE(differencer.Compare(expected, actual)) << report;
}

// ---- The inputs: every field non-default, and values distinct enough that a
// ---- swapped field number shows.

const OpMeta kConv{"aten::conv2d", {"input", "weight"}};
constexpr uint32_t kLocationId = 9;

Location location() {
  return Location{LocationKind::kTorchscript, "model.py",
                  12,  // line
                  "Net.forward", "model.py:12 Net.forward\ntrain.py:3 <module>",
                  true,  // inside_disabled_autocast
                  "h = torch.mm(a, b)",
                  "model.py:14\nmodel.py:15"};  // also_consumed_at
}

Record op_record() {
  Record r = testing::record_head(RecordKind::kOp, 100, 1001, 4, 5, CastPolicy::kPromote, DeviceKind::kXpu);
  r.op = {.cpu_duration_ns = 1500, .location = kLocationId,
          .input_dtypes = {DType::kBfloat16, DType::kFloat64, DType::kInt8}, .num_inputs = 3,
          .output = DType::kComplex64, .autocast_dtype = DType::kFloat16, .ok = false,
          .mode = ExecutionMode::kScriptWhileTracing, .phase = Phase::kForward,
          .autocast_enabled = (1u << static_cast<int>(DeviceKind::kCpu)) | (1u << static_cast<int>(DeviceKind::kMps)),
          .autocast_nesting = 3, .probe = ProbeReason::kFullPrecisionUnderAutocast,
          .gemm_compute = GemmCompute::k32FFastTf32, .gemm_a = DType::kFloat32, .gemm_b = DType::kFloat32,
          .gemm_d = DType::kBfloat16, .gemm_calls = 2, .gemm_mixed = true};
  return r;
}

Record cast_record() {
  Record r =
      testing::record_head(RecordKind::kCast, 101, 1002, 4, 5, CastPolicy::kFp32SetOptDtype, DeviceKind::kCuda);
  r.cast = {.op_seq = 100, .bytes = 4096, .shape = {2, 3, 5, 7, 11, 13}, .source_version = 19, .cached_version = 17,
            .location = kLocationId, .arg_index = 1, .list_index = 2, .src = DType::kFloat32, .dst = DType::kBfloat16,
            .outcome = CastOutcome::kDtypeArgSet,
            .ndim = kMaxShapeDims + 3,  // truncated
            .role = Role::kActivation, .cache = CacheOutcome::kStaleHit, .mode = ExecutionMode::kTraced,
            .phase = Phase::kBackward, .round_trip = true, .maker = CastMaker::kExplicit, .float8_scaled = false,
            .zero_amax = 0};
  return r;
}

// A conversion to float8 with torchao's scale (float8_scaled): no op_seq, a Float8Scaling.
// A parameter of a module (module_scopes.h), for the float8 cast: its names travel as strings.
const char* const kModule = "layers.0.proj";
uint32_t parameter_scope() {
  static const uint32_t scope = [] {
    static int tensor;  // stands for the parameter's TensorImpl
    ModuleScopes& scopes = module_scopes();
    return scopes.declare_parameter(scopes.declare_module(kModule), "weight", &tensor);
  }();
  return scope;
}

Record float8_cast_record() {
  Record r = testing::record_head(RecordKind::kCast, 106, 1006, 4, 5, CastPolicy::kUnspecified, DeviceKind::kCpu);
  r.scope = parameter_scope();
  r.cast = {.op_seq = 0, .bytes = 64, .shape = {4, 4}, .source_version = 0, .cached_version = 0,
            .location = kLocationId, .arg_index = 1, .list_index = -1,
            .src = DType::kFloat32, .dst = DType::kFloat8E4M3Fn, .outcome = CastOutcome::kCast, .ndim = 2,
            .role = Role::kWeight, .cache = CacheOutcome::kNotCacheable, .mode = ExecutionMode::kEager,
            .phase = Phase::kForward, .round_trip = false, .maker = CastMaker::kTorchao, .float8_scaled = true,
            .zero_amax = 1};
  r.cast.float8_log2[kScaleLog2Min] = 5;
  r.cast.float8_log2[kScaleLog2Max] = 48;
  r.cast.float8_log2[kAmaxLog2Min] = kNoMagnitude;
  r.cast.float8_log2[kAmaxLog2Max] = -3;
  return r;
}

// Aggregate mode's counters: what the event log flushes (event_log.cc counts_record).
Record counts_record(const Record& folded, uint64_t seq) {
  CountFields c{};
  c.key = counter_key(folded);
  c.count = 6;
  c.sum = folded.kind == RecordKind::kCast ? 24576 : 9000;
  c.first_ts_ns = 1010;
  c.last_ts_ns = 1020;
  c.iteration = 3;
  c.extra = 2;
  c.max_version_gap = 5;
  Record r = testing::record_head(folded.kind == RecordKind::kCast ? RecordKind::kCastCounts : RecordKind::kOpCounts,
                                  seq, c.first_ts_ns, folded.thread, folded.op_id, folded.policy, folded.device);
  r.counts = c;
  return r;
}

Record cache_sample_record() {
  Record r = testing::record_head(RecordKind::kCacheSample, 102, 1003);
  r.sample = {.iteration = 7, .live_casts = 8, .live_bytes = 9000, .orphaned_casts = 3, .orphaned_bytes = 3000,
              .cache_hits = 40, .released_casts = 12, .trigger = SampleTrigger::kInterval};
  return r;
}

Record kernel_record() {
  // op_id 9: the kernel's interned name (ops and kernel names share the event log's table).
  Record r = testing::record_head(RecordKind::kKernel, 103, 1005, 0, 9, CastPolicy{}, DeviceKind::kCuda);
  r.kernel = {.duration_ns = 2000, .launch_seq = 101, .bytes = 4096, .correlation_id = 77, .stream = 7, .device = 1,
              .activity = GpuActivity::kMemcpy, .launched_by = LaunchedBy::kCast};
  return r;
}

// A numerics window's casts at one site; and a GradScaler update.
Record numerics_cast_record() {
  Record r = testing::record_head(RecordKind::kNumerics, 106, 1030, 4, 5, CastPolicy{}, DeviceKind::kCuda);
  r.numerics = {.tensors = 4, .values = 400, .overflowed = 7, .underflowed = 9, .nonfinite = 5, .nan = 2,
                .first_nonfinite_seq = 100, .iteration = 3, .last_ts_ns = 1040, .saturated = 3,  // no scale
                .location = kLocationId, .arg_index = 1, .max_abs_log2 = -3, .kind = NumericsKind::kCast,
                .src = DType::kFloat32, .dst = DType::kFloat8E5M2, .mode = ExecutionMode::kTraced,
                .phase = Phase::kBackward, .found_inf = false};
  return r;
}

Record scaler_update_record() {
  Record r = testing::record_head(RecordKind::kNumerics, 107, 1050, 4, 0, CastPolicy{}, DeviceKind::kUnspecified);
  NumericsFields& n = r.numerics;
  n.kind = NumericsKind::kScalerUpdate;
  n.location = kLocationId;
  n.iteration = 3;
  n.last_ts_ns = 1050;
  n.tensors = 12;
  n.scale = 32768.0;
  n.found_inf = true;
  n.max_abs_log2 = kNoMagnitude;
  return r;
}

const OpMeta kMemcpy{"memcpy DtoD", {}};

const EventLogStats kStats{13, 2, 1, 5, {"overlay.json:3: entry \"mylib.Pool\": mylib has no attribute Pool"}};
constexpr uint64_t kStatsTs = 1004;

AgentIdentity agent_identity() {
  return {.run_id = "run-1", .agent_id = "host-42-1000", .pid = 42, .rank = 3, .local_rank = 1, .world_size = 8,
          .hostname = "host", .torch_version = "2.14.1", .command = "python train.py",
          .policy_hash = "sha1:0123456789abcdef0123456789abcdef01234567", .policy_files = {"base.json", "overlay.json"},
          .castscope_version = "0.1.0", .aggregate = true};
}

// ---- What the agent should produce, written with libprotobuf's setters.

v1::SourceLocation expected_location() {
  return fixtures::message<v1::specs::SourceLocation>({.kind = v1::SourceLocation::KIND_TORCHSCRIPT,
                                                       .file = "model.py", .line = 12, .function = "Net.forward",
                                                       .stack = {"model.py:12 Net.forward", "train.py:3 <module>"},
                                                       .inside_disabled_autocast = true,
                                                       .source_text = "h = torch.mm(a, b)",
                                                       .also_consumed_at = {"model.py:14", "model.py:15"}});
}

// Events as a batch carries them: names and the location by id.
v1::Event expected_op() {
  v1::Event event;
  *event.mutable_op() = fixtures::message<v1::specs::OpEvent>(
      {.seq = 100, .ts_ns = 1001, .thread = 4, .policy = v1::CAST_POLICY_PROMOTE, .device_type = v1::DEVICE_TYPE_XPU,
       .input_dtypes = {v1::DTYPE_BFLOAT16, v1::DTYPE_FLOAT64, v1::DTYPE_INT8}, .output_dtype = v1::DTYPE_COMPLEX64,
       .cpu_duration_ns = 1500, .outcome = v1::OP_OUTCOME_ERROR, .autocast_dtype = v1::DTYPE_FLOAT16,
       .mode = v1::EXECUTION_MODE_SCRIPT_WHILE_TRACING, .phase = v1::PHASE_FORWARD,
       .autocast_enabled = {v1::DEVICE_TYPE_CPU, v1::DEVICE_TYPE_MPS}, .autocast_nesting = 3, .op_id = 1,
       .location_id = kLocationId, .probe_reason = v1::PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST,
       .gemm = v1::specs::GemmDescription{.compute = v1::GEMM_COMPUTE_32F_FAST_TF32, .a_type = v1::DTYPE_FLOAT32,
                                          .b_type = v1::DTYPE_FLOAT32, .d_type = v1::DTYPE_BFLOAT16, .calls = 2,
                                          .mixed = true}});
  return event;
}

v1::Event expected_cast() {
  v1::Event event;
  *event.mutable_cast() = fixtures::message<v1::specs::CastEvent>(
      {.seq = 101, .ts_ns = 1002, .thread = 4, .arg_index = 1, .list_index = 2,
       .policy = v1::CAST_POLICY_FP32_SET_OPT_DTYPE, .src_dtype = v1::DTYPE_FLOAT32, .dst_dtype = v1::DTYPE_BFLOAT16,
       .outcome = v1::CAST_OUTCOME_DTYPE_ARG_SET, .shape = {2, 3, 5, 7, 11, 13}, .shape_truncated = true,
       .bytes = 4096, .device_type = v1::DEVICE_TYPE_CUDA, .op_seq = 100, .role = v1::ROLE_ACTIVATION,
       .cache = v1::CACHE_OUTCOME_STALE_HIT, .source_version = 19, .cached_version = 17,
       .mode = v1::EXECUTION_MODE_TRACED, .phase = v1::PHASE_BACKWARD, .op_id = 1, .arg_name_id = 2,
       .location_id = kLocationId, .round_trip = true, .maker = v1::CAST_MAKER_EXPLICIT});
  return event;
}

v1::Event expected_float8_cast() {
  v1::Event event;
  *event.mutable_cast() = fixtures::message<v1::specs::CastEvent>(
      {.seq = 106, .ts_ns = 1006, .thread = 4, .arg_index = 1, .list_index = -1, .src_dtype = v1::DTYPE_FLOAT32,
       .dst_dtype = v1::DTYPE_FLOAT8_E4M3FN, .outcome = v1::CAST_OUTCOME_CAST, .shape = {4, 4}, .bytes = 64,
       .device_type = v1::DEVICE_TYPE_CPU, .role = v1::ROLE_WEIGHT, .cache = v1::CACHE_OUTCOME_NOT_CACHEABLE,
       .mode = v1::EXECUTION_MODE_EAGER, .phase = v1::PHASE_FORWARD, .op_id = 1, .arg_name_id = 2,
       .location_id = kLocationId, .maker = v1::CAST_MAKER_TORCHAO,
       .float8 = v1::specs::Float8Scaling{.scale_log2_min = 5, .scale_log2_max = 48, .amax_log2_min = kNoMagnitude,
                                          .amax_log2_max = -3, .zero_amax = 1},
       .module_id = 3, .parameter_id = 4});
  return event;
}

v1::Event expected_cache_sample() {
  v1::Event event;
  *event.mutable_cache_sample() = fixtures::message<v1::specs::CacheSample>(
      {.seq = 102, .ts_ns = 1003, .trigger = v1::CacheSample::TRIGGER_INTERVAL, .iteration = 7, .live_casts = 8,
       .live_bytes = 9000, .orphaned_casts = 3, .orphaned_bytes = 3000, .cache_hits = 40, .released_casts = 12});
  return event;
}

v1::Event expected_kernel() {
  v1::Event event;
  *event.mutable_kernel() = fixtures::message<v1::specs::KernelEvent>(
      {.seq = 103, .ts_ns = 1005, .duration_ns = 2000, .activity = v1::GPU_ACTIVITY_MEMCPY, .device = 1, .stream = 7,
       .launched_by = v1::LAUNCHED_BY_CAST, .launch_seq = 101, .bytes = 4096, .correlation_id = 77});
  event.mutable_kernel()->set_name("memcpy DtoD");
  return event;
}

v1::Event expected_cast_counts() {
  v1::Event event;
  *event.mutable_cast_counts() = fixtures::message<v1::specs::CastCounts>(
      {.seq = 104, .first_ts_ns = 1010, .last_ts_ns = 1020, .thread = 4, .op_id = 1, .arg_name_id = 2,
       .location_id = kLocationId, .arg_index = 1, .policy = v1::CAST_POLICY_FP32_SET_OPT_DTYPE,
       .device_type = v1::DEVICE_TYPE_CUDA, .src_dtype = v1::DTYPE_FLOAT32, .dst_dtype = v1::DTYPE_BFLOAT16,
       .outcome = v1::CAST_OUTCOME_DTYPE_ARG_SET, .role = v1::ROLE_ACTIVATION, .cache = v1::CACHE_OUTCOME_STALE_HIT,
       .mode = v1::EXECUTION_MODE_TRACED, .phase = v1::PHASE_BACKWARD, .count = 6, .bytes = 24576, .iteration = 3,
       .max_version_gap = 5, .round_trips = 2, .maker = v1::CAST_MAKER_EXPLICIT});
  return event;
}

v1::Event expected_op_counts() {
  v1::Event event;
  *event.mutable_op_counts() = fixtures::message<v1::specs::OpCounts>(
      {.seq = 105, .first_ts_ns = 1010, .last_ts_ns = 1020, .thread = 4, .op_id = 1, .location_id = kLocationId,
       .policy = v1::CAST_POLICY_PROMOTE, .device_type = v1::DEVICE_TYPE_XPU,
       .mode = v1::EXECUTION_MODE_SCRIPT_WHILE_TRACING, .phase = v1::PHASE_FORWARD,
       .output_dtype = v1::DTYPE_COMPLEX64, .autocast_dtype = v1::DTYPE_FLOAT16,
       .autocast_enabled = {v1::DEVICE_TYPE_CPU, v1::DEVICE_TYPE_MPS},
       .probe_reason = v1::PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST, .calls = 6, .errors = 2,
       .cpu_duration_ns = 9000, .iteration = 3});
  return event;
}

v1::Event expected_numerics_cast() {
  v1::Event event;
  *event.mutable_numerics() = fixtures::message<v1::specs::NumericsSummary>(
      {.seq = 106, .first_ts_ns = 1030, .last_ts_ns = 1040, .kind = v1::NumericsSummary::KIND_CAST, .thread = 4,
       .op_id = 1, .arg_name_id = 2, .location_id = kLocationId, .arg_index = 1, .device_type = v1::DEVICE_TYPE_CUDA,
       .src_dtype = v1::DTYPE_FLOAT32, .dst_dtype = v1::DTYPE_FLOAT8_E5M2, .mode = v1::EXECUTION_MODE_TRACED,
       .phase = v1::PHASE_BACKWARD, .iteration = 3, .tensors = 4, .values = 400, .overflowed = 7, .underflowed = 9,
       .nonfinite = 5, .nan = 2, .max_abs_log2 = -3, .first_nonfinite_seq = 100, .saturated = 3});
  return event;
}

v1::Event expected_scaler_update() {
  v1::Event event;
  *event.mutable_numerics() = fixtures::message<v1::specs::NumericsSummary>(
      {.seq = 107, .first_ts_ns = 1050, .last_ts_ns = 1050, .kind = v1::NumericsSummary::KIND_SCALER_UPDATE,
       .thread = 4, .location_id = kLocationId, .iteration = 3, .tensors = 12, .max_abs_log2 = -32768,
       .scale = 32768.0, .found_inf = true});
  return event;
}

v1::Event expected_stats() {
  v1::Event event;
  *event.mutable_stats() = fixtures::message<v1::specs::AgentStats>(
      {.schema_version = v1::SchemaVersion_MAX, .events_recorded = 13, .events_dropped = 2, .internal_errors = 1,
       .pid = 42, .torch_version = "2.14.1", .ts_ns = kStatsTs, .rank = 3, .local_rank = 1, .world_size = 8,
       .gpu_timing = "on", .gpu_records_dropped = 5,
       .overlay_errors = {"overlay.json:3: entry \"mylib.Pool\": mylib has no attribute Pool"}});
  return event;
}

v1::Batch expected_batch() {
  v1::Batch batch = fixtures::batch_head(
      {.run_id = "run-1", .agent_id = "host-42-1000", .pid = 42, .rank = 3, .local_rank = 1, .world_size = 8,
       .hostname = "host", .torch_version = "2.14.1", .command = "python train.py",
       .policy_hash = "sha1:0123456789abcdef0123456789abcdef01234567", .policy_files = {"base.json", "overlay.json"},
       .castscope_version = "0.1.0", .aggregate = true},
      4);
  batch.set_events_dropped_total(2);
  batch.set_events_recorded_total(13);
  fixtures::add_strings(batch, 1, {"aten::conv2d", "weight"});
  v1::InternedLocation* where = batch.add_locations();
  where->set_id(kLocationId);
  *where->mutable_location() = expected_location();
  fixtures::add_strings(batch, 3, {kModule, "weight", "memcpy DtoD"});
  *batch.add_events() = expected_op();
  *batch.add_events() = expected_cast();
  *batch.add_events() = expected_float8_cast();
  *batch.add_events() = expected_cache_sample();
  v1::Event kernel = expected_kernel();
  kernel.mutable_kernel()->clear_name();
  kernel.mutable_kernel()->set_name_id(5);
  *batch.add_events() = kernel;
  *batch.add_events() = expected_cast_counts();
  *batch.add_events() = expected_op_counts();
  *batch.add_events() = expected_numerics_cast();
  *batch.add_events() = expected_scaler_update();
  *batch.add_events() = expected_stats();
  batch.set_final(true);
  return batch;
}

// The same event as a JSON line carries it: names and the location inline.
// Ops, casts and their counters name the op and the location alike; casts and
// cast counters the argument too.
template <typename Message>
void inline_op_and_location(Message& message) {
  message.set_op(kConv.name);
  message.clear_op_id();
  *message.mutable_location() = expected_location();
  message.clear_location_id();
}

template <typename Message>
void inline_op_argument_and_location(Message& message) {
  inline_op_and_location(message);
  message.set_arg_name(kConv.arg_names[1]);
  message.clear_arg_name_id();
}

v1::Event resolved(v1::Event event) {
  if (event.has_op()) inline_op_and_location(*event.mutable_op());
  if (event.has_cast()) {
    v1::CastEvent& cast = *event.mutable_cast();
    inline_op_argument_and_location(cast);
    if (cast.module_id() != 0) cast.set_module(kModule);
    if (cast.parameter_id() != 0) cast.set_parameter("weight");
    cast.clear_module_id();
    cast.clear_parameter_id();
  }
  if (event.has_cast_counts()) inline_op_argument_and_location(*event.mutable_cast_counts());
  if (event.has_op_counts()) inline_op_and_location(*event.mutable_op_counts());
  if (event.has_numerics()) {
    v1::NumericsSummary& n = *event.mutable_numerics();
    const bool cast = n.kind() == v1::NumericsSummary::KIND_CAST;
    if (cast) n.set_op(kConv.name);
    if (cast) n.set_arg_name(kConv.arg_names[1]);
    n.clear_op_id();
    n.clear_arg_name_id();
    *n.mutable_location() = expected_location();
    n.clear_location_id();
  }
  return event;
}

TEST(BatchEncoderSchema, EveryFieldOfEveryEventKindIsWritten) {
  BatchEncoder encoder(agent_identity());
  encoder.add(op_record(), kConv, kLocationId, location());
  encoder.add(cast_record(), kConv, kLocationId, location());
  encoder.add(float8_cast_record(), kConv, kLocationId, location());
  encoder.add(cache_sample_record(), OpMeta{}, 0, Location{});
  encoder.add(kernel_record(), kMemcpy, 0, Location{});  // not in batches: skipped
  encoder.add(counts_record(cast_record(), 104), kConv, kLocationId, location());
  encoder.add(counts_record(op_record(), 105), kConv, kLocationId, location());
  encoder.add(numerics_cast_record(), kConv, kLocationId, location());
  encoder.add(scaler_update_record(), OpMeta{}, kLocationId, location());
  encoder.add_stats(kStats, kStatsTs, "on");

  v1::Batch batch;
  ASSERT_TRUE(batch.ParseFromString(encoder.finish(4, 13, 2, true)));
  expect_equal(expected_batch(), batch);

  std::set<std::string> present;
  present_fields(batch, present);
  expect_every_field_written(present, v1::Batch::descriptor(), kNotInBatches, "BatchEncoder");
}

TEST(BatchEncoderSchema, EveryFieldOfEveryJsonLineIsWritten) {
  const std::vector<std::string> lines = {
      record_to_json(op_record(), kConv, location()),
      record_to_json(cast_record(), kConv, location()),
      record_to_json(float8_cast_record(), kConv, location()),
      record_to_json(cache_sample_record(), OpMeta{}, Location{}),
      record_to_json(kernel_record(), kMemcpy, Location{}),
      record_to_json(counts_record(cast_record(), 104), kConv, location()),
      record_to_json(counts_record(op_record(), 105), kConv, location()),
      record_to_json(numerics_cast_record(), kConv, location()),
      record_to_json(scaler_update_record(), OpMeta{}, location()),
      stats_to_json(kStats, ProcessIdentity{42, 3, 1, 8}, "2.14.1", kStatsTs, "on"),
  };
  const std::vector<v1::Event> expected = {resolved(expected_op()), resolved(expected_cast()),
                                           resolved(expected_float8_cast()), expected_cache_sample(), expected_kernel(),
                                           resolved(expected_cast_counts()), resolved(expected_op_counts()),
                                           resolved(expected_numerics_cast()), resolved(expected_scaler_update()),
                                           expected_stats()};
  std::set<std::string> present;
  for (size_t i = 0; i < lines.size(); ++i) {
    v1::Event event;
    // Strict: a key the schema does not know fails the parse.
    const auto status = gpb::util::JsonStringToMessage(lines[i], &event);
    ASSERT_TRUE(status.ok()) << lines[i] << "\n" << status.ToString();
    expect_equal(expected[i], event);
    present_fields(event, present);
  }
  expect_every_field_written(present, v1::Event::descriptor(), kNotInJsonLines, "the JSON-lines writer");
}

}  // namespace
}  // namespace castscope
