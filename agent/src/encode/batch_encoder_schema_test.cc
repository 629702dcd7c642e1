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
#include "castscope/v1/transport.pb.h"

namespace castscope {
namespace {

namespace gpb = google::protobuf;

// Fields of Batch (and below) that BatchEncoder never writes.
const std::set<std::string> kNotInBatches = {
    // In a batch, names and locations travel once, in Batch.strings and
    // Batch.locations; events carry op_id, arg_name_id and location_id.
    "castscope.v1.CastEvent.op",
    "castscope.v1.CastEvent.arg_name",
    "castscope.v1.CastEvent.location",
    "castscope.v1.OpEvent.op",
    "castscope.v1.OpEvent.location",
    "castscope.v1.KernelEvent.name",
    "castscope.v1.CastCounts.op",
    "castscope.v1.CastCounts.arg_name",
    "castscope.v1.CastCounts.location",
    "castscope.v1.OpCounts.op",
    "castscope.v1.OpCounts.location",
};

// Fields of Event (and below) that the JSON-lines writer never writes.
const std::set<std::string> kNotInJsonLines = {
    // The ids of interned strings and locations exist only in batches; a line
    // carries the names and the location itself.
    "castscope.v1.CastEvent.op_id",
    "castscope.v1.CastEvent.arg_name_id",
    "castscope.v1.CastEvent.location_id",
    "castscope.v1.OpEvent.op_id",
    "castscope.v1.OpEvent.location_id",
    "castscope.v1.KernelEvent.name_id",
    "castscope.v1.CastCounts.op_id",
    "castscope.v1.CastCounts.arg_name_id",
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
  Record r{};
  r.seq = 100;
  r.ts_ns = 1001;
  r.op_id = 5;
  r.thread = 4;
  r.kind = RecordKind::kOp;
  r.policy = CastPolicy::kPromote;
  r.device = DeviceKind::kXpu;
  r.op.cpu_duration_ns = 1500;
  r.op.location = kLocationId;
  r.op.num_inputs = 3;
  r.op.input_dtypes[0] = DType::kBfloat16;
  r.op.input_dtypes[1] = DType::kFloat64;
  r.op.input_dtypes[2] = DType::kInt8;
  r.op.output = DType::kComplex64;
  r.op.autocast_dtype = DType::kFloat16;
  r.op.ok = false;
  r.op.mode = ExecutionMode::kScriptWhileTracing;
  r.op.phase = Phase::kForward;
  r.op.autocast_enabled = (1u << static_cast<int>(DeviceKind::kCpu)) | (1u << static_cast<int>(DeviceKind::kMps));
  r.op.autocast_nesting = 3;
  r.op.probe = ProbeReason::kFullPrecisionUnderAutocast;
  r.op.gemm_compute = GemmCompute::k32FFastTf32;
  r.op.gemm_a = DType::kFloat32;
  r.op.gemm_b = DType::kFloat32;
  r.op.gemm_d = DType::kBfloat16;
  r.op.gemm_calls = 2;
  r.op.gemm_mixed = true;
  return r;
}

Record cast_record() {
  Record r{};
  r.seq = 101;
  r.ts_ns = 1002;
  r.op_id = 5;
  r.thread = 4;
  r.kind = RecordKind::kCast;
  r.policy = CastPolicy::kFp32SetOptDtype;
  r.device = DeviceKind::kCuda;
  r.cast.op_seq = 100;
  r.cast.bytes = 4096;
  const int64_t shape[kMaxShapeDims] = {2, 3, 5, 7, 11, 13};
  for (int i = 0; i < kMaxShapeDims; ++i) r.cast.shape[i] = shape[i];
  r.cast.ndim = kMaxShapeDims + 3;  // truncated
  r.cast.source_version = 19;
  r.cast.cached_version = 17;
  r.cast.location = kLocationId;
  r.cast.arg_index = 1;
  r.cast.list_index = 2;
  r.cast.src = DType::kFloat32;
  r.cast.dst = DType::kBfloat16;
  r.cast.outcome = CastOutcome::kDtypeArgSet;
  r.cast.role = Role::kActivation;
  r.cast.cache = CacheOutcome::kStaleHit;
  r.cast.mode = ExecutionMode::kTraced;
  r.cast.phase = Phase::kBackward;
  r.cast.round_trip = true;
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
  Record r{};
  r.seq = seq;
  r.ts_ns = c.first_ts_ns;
  r.kind = folded.kind == RecordKind::kCast ? RecordKind::kCastCounts : RecordKind::kOpCounts;
  r.op_id = folded.op_id;
  r.thread = folded.thread;
  r.policy = folded.policy;
  r.device = folded.device;
  r.counts = c;
  return r;
}

Record cache_sample_record() {
  Record r{};
  r.seq = 102;
  r.ts_ns = 1003;
  r.kind = RecordKind::kCacheSample;
  r.sample.trigger = SampleTrigger::kInterval;
  r.sample.iteration = 7;
  r.sample.live_casts = 8;
  r.sample.live_bytes = 9000;
  r.sample.orphaned_casts = 3;
  r.sample.orphaned_bytes = 3000;
  r.sample.cache_hits = 40;
  r.sample.released_casts = 12;
  return r;
}

Record kernel_record() {
  Record r{};
  r.seq = 103;
  r.ts_ns = 1005;
  r.kind = RecordKind::kKernel;
  r.op_id = 9;  // the kernel's interned name: ops and kernel names share the event log's table
  r.device = DeviceKind::kCuda;
  r.kernel.duration_ns = 2000;
  r.kernel.launch_seq = 101;
  r.kernel.bytes = 4096;
  r.kernel.correlation_id = 77;
  r.kernel.stream = 7;
  r.kernel.device = 1;
  r.kernel.activity = GpuActivity::kMemcpy;
  r.kernel.launched_by = LaunchedBy::kCast;
  return r;
}

const OpMeta kMemcpy{"memcpy DtoD", {}};

const EventLogStats kStats{13, 2, 1, 5, {"overlay.json:3: entry \"mylib.Pool\": mylib has no attribute Pool"}};
constexpr uint64_t kStatsTs = 1004;

AgentIdentity agent_identity() {
  AgentIdentity id;
  id.run_id = "run-1";
  id.agent_id = "host-42-1000";
  id.pid = 42;
  id.rank = 3;
  id.local_rank = 1;
  id.world_size = 8;
  id.hostname = "host";
  id.torch_version = "2.14.1";
  id.command = "python train.py";
  id.policy_hash = "sha1:0123456789abcdef0123456789abcdef01234567";
  id.castscope_version = "0.1.0";
  id.aggregate = true;
  id.policy_files = {"base.json", "overlay.json"};
  return id;
}

// ---- What the agent should produce, written with libprotobuf's setters.

v1::SourceLocation expected_location() {
  v1::SourceLocation where;
  where.set_kind(v1::SourceLocation::KIND_TORCHSCRIPT);
  where.set_file("model.py");
  where.set_line(12);
  where.set_function("Net.forward");
  where.add_stack("model.py:12 Net.forward");
  where.add_stack("train.py:3 <module>");
  where.set_inside_disabled_autocast(true);
  where.set_source_text("h = torch.mm(a, b)");
  where.add_also_consumed_at("model.py:14");
  where.add_also_consumed_at("model.py:15");
  return where;
}

// Events as a batch carries them: names and the location by id.
v1::Event expected_op() {
  v1::Event event;
  v1::OpEvent& op = *event.mutable_op();
  op.set_seq(100);
  op.set_ts_ns(1001);
  op.set_thread(4);
  op.set_policy(v1::CAST_POLICY_PROMOTE);
  op.set_device_type(v1::DEVICE_TYPE_XPU);
  op.add_input_dtypes(v1::DTYPE_BFLOAT16);
  op.add_input_dtypes(v1::DTYPE_FLOAT64);
  op.add_input_dtypes(v1::DTYPE_INT8);
  op.set_output_dtype(v1::DTYPE_COMPLEX64);
  op.set_cpu_duration_ns(1500);
  op.set_outcome(v1::OP_OUTCOME_ERROR);
  op.set_autocast_dtype(v1::DTYPE_FLOAT16);
  op.set_mode(v1::EXECUTION_MODE_SCRIPT_WHILE_TRACING);
  op.set_phase(v1::PHASE_FORWARD);
  op.add_autocast_enabled(v1::DEVICE_TYPE_CPU);
  op.add_autocast_enabled(v1::DEVICE_TYPE_MPS);
  op.set_autocast_nesting(3);
  op.set_op_id(1);
  op.set_location_id(kLocationId);
  op.set_probe_reason(v1::PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST);
  v1::GemmDescription& gemm = *op.mutable_gemm();
  gemm.set_compute(v1::GEMM_COMPUTE_32F_FAST_TF32);
  gemm.set_a_type(v1::DTYPE_FLOAT32);
  gemm.set_b_type(v1::DTYPE_FLOAT32);
  gemm.set_d_type(v1::DTYPE_BFLOAT16);
  gemm.set_calls(2);
  gemm.set_mixed(true);
  return event;
}

v1::Event expected_cast() {
  v1::Event event;
  v1::CastEvent& cast = *event.mutable_cast();
  cast.set_seq(101);
  cast.set_ts_ns(1002);
  cast.set_thread(4);
  cast.set_arg_index(1);
  cast.set_list_index(2);
  cast.set_policy(v1::CAST_POLICY_FP32_SET_OPT_DTYPE);
  cast.set_src_dtype(v1::DTYPE_FLOAT32);
  cast.set_dst_dtype(v1::DTYPE_BFLOAT16);
  cast.set_outcome(v1::CAST_OUTCOME_DTYPE_ARG_SET);
  for (int64_t dim : {2, 3, 5, 7, 11, 13}) cast.add_shape(dim);
  cast.set_shape_truncated(true);
  cast.set_bytes(4096);
  cast.set_device_type(v1::DEVICE_TYPE_CUDA);
  cast.set_op_seq(100);
  cast.set_role(v1::ROLE_ACTIVATION);
  cast.set_cache(v1::CACHE_OUTCOME_STALE_HIT);
  cast.set_source_version(19);
  cast.set_cached_version(17);
  cast.set_mode(v1::EXECUTION_MODE_TRACED);
  cast.set_phase(v1::PHASE_BACKWARD);
  cast.set_op_id(1);
  cast.set_arg_name_id(2);
  cast.set_location_id(kLocationId);
  cast.set_round_trip(true);
  return event;
}

v1::Event expected_cache_sample() {
  v1::Event event;
  v1::CacheSample& sample = *event.mutable_cache_sample();
  sample.set_seq(102);
  sample.set_ts_ns(1003);
  sample.set_trigger(v1::CacheSample::TRIGGER_INTERVAL);
  sample.set_iteration(7);
  sample.set_live_casts(8);
  sample.set_live_bytes(9000);
  sample.set_orphaned_casts(3);
  sample.set_orphaned_bytes(3000);
  sample.set_cache_hits(40);
  sample.set_released_casts(12);
  return event;
}

v1::Event expected_kernel() {
  v1::Event event;
  v1::KernelEvent& kernel = *event.mutable_kernel();
  kernel.set_seq(103);
  kernel.set_ts_ns(1005);
  kernel.set_duration_ns(2000);
  kernel.set_activity(v1::GPU_ACTIVITY_MEMCPY);
  kernel.set_name("memcpy DtoD");
  kernel.set_device(1);
  kernel.set_stream(7);
  kernel.set_launched_by(v1::LAUNCHED_BY_CAST);
  kernel.set_launch_seq(101);
  kernel.set_bytes(4096);
  kernel.set_correlation_id(77);
  return event;
}

v1::Event expected_cast_counts() {
  v1::Event event;
  v1::CastCounts& c = *event.mutable_cast_counts();
  c.set_seq(104);
  c.set_first_ts_ns(1010);
  c.set_last_ts_ns(1020);
  c.set_thread(4);
  c.set_op_id(1);
  c.set_arg_name_id(2);
  c.set_location_id(kLocationId);
  c.set_arg_index(1);
  c.set_policy(v1::CAST_POLICY_FP32_SET_OPT_DTYPE);
  c.set_device_type(v1::DEVICE_TYPE_CUDA);
  c.set_src_dtype(v1::DTYPE_FLOAT32);
  c.set_dst_dtype(v1::DTYPE_BFLOAT16);
  c.set_outcome(v1::CAST_OUTCOME_DTYPE_ARG_SET);
  c.set_role(v1::ROLE_ACTIVATION);
  c.set_cache(v1::CACHE_OUTCOME_STALE_HIT);
  c.set_mode(v1::EXECUTION_MODE_TRACED);
  c.set_phase(v1::PHASE_BACKWARD);
  c.set_count(6);
  c.set_bytes(24576);
  c.set_iteration(3);
  c.set_max_version_gap(5);
  c.set_round_trips(2);
  return event;
}

v1::Event expected_op_counts() {
  v1::Event event;
  v1::OpCounts& o = *event.mutable_op_counts();
  o.set_seq(105);
  o.set_first_ts_ns(1010);
  o.set_last_ts_ns(1020);
  o.set_thread(4);
  o.set_op_id(1);
  o.set_location_id(kLocationId);
  o.set_policy(v1::CAST_POLICY_PROMOTE);
  o.set_device_type(v1::DEVICE_TYPE_XPU);
  o.set_mode(v1::EXECUTION_MODE_SCRIPT_WHILE_TRACING);
  o.set_phase(v1::PHASE_FORWARD);
  o.set_output_dtype(v1::DTYPE_COMPLEX64);
  o.set_autocast_dtype(v1::DTYPE_FLOAT16);
  o.add_autocast_enabled(v1::DEVICE_TYPE_CPU);
  o.add_autocast_enabled(v1::DEVICE_TYPE_MPS);
  o.set_probe_reason(v1::PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST);
  o.set_calls(6);
  o.set_errors(2);
  o.set_cpu_duration_ns(9000);
  o.set_iteration(3);
  return event;
}

v1::Event expected_stats() {
  v1::Event event;
  v1::AgentStats& stats = *event.mutable_stats();
  stats.set_schema_version(v1::SchemaVersion_MAX);
  stats.set_events_recorded(13);
  stats.set_events_dropped(2);
  stats.set_internal_errors(1);
  stats.set_pid(42);
  stats.set_torch_version("2.14.1");
  stats.set_ts_ns(kStatsTs);
  stats.set_rank(3);
  stats.set_local_rank(1);
  stats.set_world_size(8);
  stats.set_gpu_timing("on");
  stats.set_gpu_records_dropped(5);
  stats.add_overlay_errors("overlay.json:3: entry \"mylib.Pool\": mylib has no attribute Pool");
  return event;
}

v1::Batch expected_batch() {
  v1::Batch batch;
  batch.set_protocol_version(v1::ProtocolVersion_MAX);
  v1::AgentIdentity& agent = *batch.mutable_agent();
  agent.set_run_id("run-1");
  agent.set_agent_id("host-42-1000");
  agent.set_pid(42);
  agent.set_rank(3);
  agent.set_local_rank(1);
  agent.set_world_size(8);
  agent.set_hostname("host");
  agent.set_torch_version("2.14.1");
  agent.set_command("python train.py");
  agent.set_policy_hash("sha1:0123456789abcdef0123456789abcdef01234567");
  agent.set_castscope_version("0.1.0");
  agent.set_aggregate(true);
  agent.add_policy_files("base.json");
  agent.add_policy_files("overlay.json");
  batch.set_sequence(4);
  batch.set_events_dropped_total(2);
  batch.set_events_recorded_total(13);
  v1::InternedString* op_name = batch.add_strings();
  op_name->set_id(1);
  op_name->set_text("aten::conv2d");
  v1::InternedString* arg_name = batch.add_strings();
  arg_name->set_id(2);
  arg_name->set_text("weight");
  v1::InternedLocation* where = batch.add_locations();
  where->set_id(kLocationId);
  *where->mutable_location() = expected_location();
  v1::InternedString* kernel_name = batch.add_strings();
  kernel_name->set_id(3);
  kernel_name->set_text("memcpy DtoD");
  *batch.add_events() = expected_op();
  *batch.add_events() = expected_cast();
  *batch.add_events() = expected_cache_sample();
  v1::Event kernel = expected_kernel();
  kernel.mutable_kernel()->clear_name();
  kernel.mutable_kernel()->set_name_id(3);
  *batch.add_events() = kernel;
  *batch.add_events() = expected_cast_counts();
  *batch.add_events() = expected_op_counts();
  *batch.add_events() = expected_stats();
  batch.set_final(true);
  return batch;
}

// The same event as a JSON line carries it: names and the location inline.
v1::Event resolved(v1::Event event) {
  if (event.has_op()) {
    event.mutable_op()->set_op(kConv.name);
    event.mutable_op()->clear_op_id();
    *event.mutable_op()->mutable_location() = expected_location();
    event.mutable_op()->clear_location_id();
  }
  if (event.has_cast()) {
    event.mutable_cast()->set_op(kConv.name);
    event.mutable_cast()->clear_op_id();
    event.mutable_cast()->set_arg_name(kConv.arg_names[1]);
    event.mutable_cast()->clear_arg_name_id();
    *event.mutable_cast()->mutable_location() = expected_location();
    event.mutable_cast()->clear_location_id();
  }
  if (event.has_cast_counts()) {
    event.mutable_cast_counts()->set_op(kConv.name);
    event.mutable_cast_counts()->clear_op_id();
    event.mutable_cast_counts()->set_arg_name(kConv.arg_names[1]);
    event.mutable_cast_counts()->clear_arg_name_id();
    *event.mutable_cast_counts()->mutable_location() = expected_location();
    event.mutable_cast_counts()->clear_location_id();
  }
  if (event.has_op_counts()) {
    event.mutable_op_counts()->set_op(kConv.name);
    event.mutable_op_counts()->clear_op_id();
    *event.mutable_op_counts()->mutable_location() = expected_location();
    event.mutable_op_counts()->clear_location_id();
  }
  return event;
}

TEST(BatchEncoderSchema, EveryFieldOfEveryEventKindIsWritten) {
  BatchEncoder encoder(agent_identity());
  encoder.add(op_record(), kConv, kLocationId, location());
  encoder.add(cast_record(), kConv, kLocationId, location());
  encoder.add(cache_sample_record(), OpMeta{}, 0, Location{});
  encoder.add(kernel_record(), kMemcpy, 0, Location{});  // not in batches: skipped
  encoder.add(counts_record(cast_record(), 104), kConv, kLocationId, location());
  encoder.add(counts_record(op_record(), 105), kConv, kLocationId, location());
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
      record_to_json(cache_sample_record(), OpMeta{}, Location{}),
      record_to_json(kernel_record(), kMemcpy, Location{}),
      record_to_json(counts_record(cast_record(), 104), kConv, location()),
      record_to_json(counts_record(op_record(), 105), kConv, location()),
      stats_to_json(kStats, ProcessIdentity{42, 3, 1, 8}, "2.14.1", kStatsTs, "on"),
  };
  const std::vector<v1::Event> expected = {resolved(expected_op()), resolved(expected_cast()),
                                           expected_cache_sample(), expected_kernel(),
                                           resolved(expected_cast_counts()), resolved(expected_op_counts()),
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
