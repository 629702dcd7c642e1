// The agent writes the protobuf wire format by hand (it cannot link
// libprotobuf); these tests parse its batches with the real generated code.
#include "agent/src/encode/batch_encoder.h"

#include <gtest/gtest.h>

#include "agent/testing/records.h"
#include "castscope/v1/transport.pb.h"

namespace castscope {
namespace {

Record cast_record(uint64_t seq) {
  Record r = testing::fp32_to_bf16_cast(seq, 123456789, 3, 5);
  r.cast.ndim = 9;  // more than kept: truncated
  for (int i = 0; i < kMaxShapeDims; ++i) r.cast.shape[i] = i + 2;
  r.cast.role = Role::kWeight;
  r.cast.cache = CacheOutcome::kStaleHit;
  r.cast.source_version = 4;
  r.cast.cached_version = 2;
  r.cast.round_trip = true;
  r.cast.location = 9;
  r.cast.mode = ExecutionMode::kScript;
  r.cast.phase = Phase::kBackward;
  return r;
}

Record op_record(uint64_t seq) {
  Record r = testing::record_head(RecordKind::kOp, seq, 99, 3, 5, CastPolicy::kLowerPrecisionFp, DeviceKind::kCpu);
  r.op.cpu_duration_ns = 1500;
  r.op.location = 9;
  r.op.num_inputs = 2;
  r.op.input_dtypes[0] = DType::kFloat32;
  r.op.input_dtypes[1] = DType::kBfloat16;
  r.op.output = DType::kBfloat16;
  r.op.autocast_dtype = DType::kBfloat16;
  r.op.ok = false;
  r.op.mode = ExecutionMode::kEager;
  r.op.phase = Phase::kForward;
  r.op.autocast_enabled = (1u << 1) | (1u << 2);
  r.op.autocast_nesting = 2;
  r.op.probe = ProbeReason::kLowPrecisionMeetsFp32;
  return r;
}

AgentIdentity identity() {
  AgentIdentity id;
  id.run_id = "run-1";
  id.agent_id = "host-42-1000";
  id.pid = 42;
  id.rank = 1;
  id.local_rank = -1;
  id.world_size = 2;
  id.hostname = "host";
  id.torch_version = "2.14.1";
  id.command = "python train.py";
  return id;
}

TEST(BatchEncoder, BatchParsesWithEveryField) {
  BatchEncoder encoder(identity());
  const OpMeta mm{"aten::mm", {"self", "mat2"}};
  const Location where{LocationKind::kPython, "train.py", 12, "forward", "train.py:12 forward\nmain.py:3 <module>"};
  encoder.add(op_record(10), mm, 9, where);
  encoder.add(cast_record(11), mm, 9, where);
  encoder.add(cast_record(12), mm, 9, where);
  Record sample{};
  sample.seq = 13;
  sample.kind = RecordKind::kCacheSample;
  sample.sample.trigger = SampleTrigger::kIteration;
  sample.sample.iteration = 7;
  sample.sample.live_casts = 3;
  sample.sample.live_bytes = 1024;
  encoder.add(sample, OpMeta{}, 0, Location{});
  encoder.add_stats(EventLogStats{13, 2, 1, 0, {}}, 555);
  EXPECT_EQ(encoder.events(), 5u);

  v1::Batch batch;
  ASSERT_TRUE(batch.ParseFromString(encoder.finish(4, 13, 2, true)));
  EXPECT_EQ(batch.protocol_version(), static_cast<uint32_t>(v1::ProtocolVersion_MAX));
  EXPECT_EQ(batch.agent().run_id(), "run-1");
  EXPECT_EQ(batch.agent().agent_id(), "host-42-1000");
  EXPECT_EQ(batch.agent().rank(), 1);
  EXPECT_EQ(batch.agent().local_rank(), -1);
  EXPECT_EQ(batch.agent().command(), "python train.py");
  EXPECT_EQ(batch.sequence(), 4u);
  EXPECT_EQ(batch.events_recorded_total(), 13u);
  EXPECT_EQ(batch.events_dropped_total(), 2u);
  EXPECT_TRUE(batch.final());
  // Strings and the location are defined once although used several times.
  ASSERT_EQ(batch.strings_size(), 2);
  ASSERT_EQ(batch.locations_size(), 1);
  EXPECT_EQ(batch.locations(0).id(), 9u);
  EXPECT_EQ(batch.locations(0).location().file(), "train.py");
  EXPECT_EQ(batch.locations(0).location().kind(), v1::SourceLocation::KIND_PYTHON);
  ASSERT_EQ(batch.locations(0).location().stack_size(), 2);
  EXPECT_EQ(batch.locations(0).location().stack(1), "main.py:3 <module>");
  auto text_of = [&](uint32_t id) {
    for (const auto& s : batch.strings())
      if (s.id() == id) return s.text();
    return std::string("<undefined>");
  };
  ASSERT_EQ(batch.events_size(), 5);

  const auto& op = batch.events(0).op();
  EXPECT_EQ(op.seq(), 10u);
  EXPECT_EQ(text_of(op.op_id()), "aten::mm");
  EXPECT_EQ(op.location_id(), 9u);
  EXPECT_EQ(op.outcome(), v1::OP_OUTCOME_ERROR);
  EXPECT_EQ(op.cpu_duration_ns(), 1500u);
  ASSERT_EQ(op.input_dtypes_size(), 2);
  EXPECT_EQ(op.input_dtypes(1), v1::DTYPE_BFLOAT16);
  ASSERT_EQ(op.autocast_enabled_size(), 2);
  EXPECT_EQ(op.autocast_enabled(1), v1::DEVICE_TYPE_CUDA);
  EXPECT_EQ(op.autocast_nesting(), 2u);
  EXPECT_EQ(op.probe_reason(), v1::PROBE_REASON_LOW_PRECISION_MEETS_FP32);

  const auto& cast = batch.events(1).cast();
  EXPECT_EQ(cast.seq(), 11u);
  EXPECT_EQ(cast.op_seq(), 10u);
  EXPECT_EQ(text_of(cast.op_id()), "aten::mm");
  EXPECT_EQ(text_of(cast.arg_name_id()), "mat2");
  EXPECT_EQ(cast.list_index(), -1);
  EXPECT_EQ(cast.src_dtype(), v1::DTYPE_FLOAT32);
  EXPECT_EQ(cast.dst_dtype(), v1::DTYPE_BFLOAT16);
  ASSERT_EQ(cast.shape_size(), kMaxShapeDims);
  EXPECT_EQ(cast.shape(5), 7);
  EXPECT_TRUE(cast.shape_truncated());
  EXPECT_EQ(cast.role(), v1::ROLE_WEIGHT);
  EXPECT_EQ(cast.cache(), v1::CACHE_OUTCOME_STALE_HIT);
  EXPECT_EQ(cast.source_version(), 4);
  EXPECT_EQ(cast.cached_version(), 2);
  EXPECT_TRUE(cast.round_trip());
  EXPECT_EQ(cast.mode(), v1::EXECUTION_MODE_SCRIPT);
  EXPECT_EQ(cast.phase(), v1::PHASE_BACKWARD);
  EXPECT_TRUE(cast.op().empty());  // names travel by id only

  const auto& cache = batch.events(3).cache_sample();
  EXPECT_EQ(cache.trigger(), v1::CacheSample::TRIGGER_ITERATION);
  EXPECT_EQ(cache.live_bytes(), 1024u);
  const auto& stats = batch.events(4).stats();
  EXPECT_EQ(stats.events_recorded(), 13u);
  EXPECT_EQ(stats.events_dropped(), 2u);
  EXPECT_EQ(stats.rank(), 1);
  EXPECT_EQ(stats.local_rank(), -1);
}

TEST(BatchEncoder, NextBatchRedefinesItsOwnStrings) {
  BatchEncoder encoder(identity());
  const OpMeta mm{"aten::mm", {"self", "mat2"}};
  encoder.add(cast_record(1), mm, 0, Location{});
  encoder.finish(1, 1, 0, false);
  encoder.add(cast_record(2), mm, 0, Location{});
  v1::Batch second;
  ASSERT_TRUE(second.ParseFromString(encoder.finish(2, 2, 0, false)));
  ASSERT_EQ(second.events_size(), 1);
  ASSERT_EQ(second.strings_size(), 2);  // op and arg name, again: batches stand alone
  EXPECT_EQ(second.locations_size(), 0);
  EXPECT_EQ(second.events(0).cast().location_id(), 0u);
  EXPECT_FALSE(second.final());
}

TEST(BatchEncoder, TheStatsEventIsNoRecordOfTheLog) {
  BatchEncoder encoder(identity());
  const OpMeta mm{"aten::mm", {"self", "mat2"}};
  encoder.add(cast_record(1), mm, 0, Location{});
  encoder.add(cast_record(2), mm, 0, Location{});
  encoder.add_stats(EventLogStats{2, 0, 0, 0, {}}, 1);
  EXPECT_EQ(encoder.events(), 3u);
  EXPECT_EQ(encoder.record_events(), 2u);  // a lost batch loses two recorded events, not three
  encoder.finish(1, 2, 0, true);
  EXPECT_EQ(encoder.record_events(), 0u);
}

}  // namespace
}  // namespace castscope
