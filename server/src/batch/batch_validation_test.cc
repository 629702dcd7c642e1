#include "server/src/batch/batch_validation.h"

#include <gtest/gtest.h>

#include <limits>

#include "server/src/batch/event_limits.h"
#include "server/testing/test_batches.h"

namespace castscope::collector {
namespace {

using testing::make_batch;

Status validate(const v1::Batch& batch, const BatchLimits& limits = {}) { return validate_batch(batch, limits); }

TEST(BatchValidation, AcceptsAWellFormedBatch) {
  const Status status = validate(make_batch("run", "agent", 1));
  EXPECT_TRUE(status.ok()) << status.message();
}

TEST(BatchValidation, RejectsAnotherProtocolVersion) {
  v1::Batch batch = make_batch("run", "agent", 1);
  batch.set_protocol_version(2);
  const Status status = validate(batch);
  EXPECT_EQ(status.code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(status.message(), "batch has protocol version 2, this collector speaks 1");
}

TEST(BatchValidation, RejectsMissingOrUnprintableIdentity) {
  v1::Batch batch = make_batch("", "agent", 1);
  EXPECT_EQ(validate(batch).message(), "agent.run_id is empty");
  batch = make_batch("run", "", 1);
  EXPECT_EQ(validate(batch).message(), "agent.agent_id is empty");
  batch = make_batch("run", "bad\nagent", 1);
  EXPECT_EQ(validate(batch).message(), "agent.agent_id has a control character (0x0a) at byte 3");
  batch = make_batch(std::string(257, 'r'), "agent", 1);
  EXPECT_EQ(validate(batch).message(), "agent.run_id has 257 bytes, the limit is 256");
}

TEST(BatchValidation, RejectsSequenceZero) {
  const Status status = validate(make_batch("run", "agent", 0));
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "batch sequence is 0; sequences start at 1");
}

// A kernel launched by the batch's first op (make_batch's seq 1), named by string 1.
v1::Batch with_kernel(v1::LaunchedBy by, uint64_t launch_seq, uint32_t name_id = 1) {
  v1::Batch batch = make_batch("run", "agent", 1);
  testing::add<v1::specs::KernelEvent>(batch, {.seq = 1000, .ts_ns = 5, .duration_ns = 2000,
                                               .activity = v1::GPU_ACTIVITY_KERNEL, .launched_by = by,
                                               .launch_seq = launch_seq, .name_id = name_id});
  return batch;
}

TEST(BatchValidation, KernelEventsNameTheirLaunchOnlyWhenTheyHaveOne) {
  const int last = make_batch("run", "agent", 1).events_size();
  const std::string kernel = "events[" + std::to_string(last) + "] (kernel seq 1000): ";
  EXPECT_TRUE(validate(with_kernel(v1::LAUNCHED_BY_OP, 1)).ok());
  EXPECT_TRUE(validate(with_kernel(v1::LAUNCHED_BY_NONE, 0)).ok());
  EXPECT_EQ(validate(with_kernel(v1::LAUNCHED_BY_CAST, 0)).message(),
            kernel + "launch_seq 0 does not go with launched_by LAUNCHED_BY_CAST");
  EXPECT_EQ(validate(with_kernel(v1::LAUNCHED_BY_NONE, 7)).message(),
            kernel + "launch_seq 7 does not go with launched_by LAUNCHED_BY_NONE");
  EXPECT_EQ(validate(with_kernel(v1::LAUNCHED_BY_OP, 1, 99)).message(),
            kernel + "name_id 99 is not defined in this batch's strings");
  EXPECT_EQ(validate(with_kernel(v1::LAUNCHED_BY_OP, 1, 0)).message(), kernel + "name_id is 0 (unset)");
  v1::Batch batch = with_kernel(v1::LAUNCHED_BY_OP, 1);
  batch.mutable_events(last)->mutable_kernel()->set_name("inline");
  EXPECT_NE(validate(batch).message().find(kernel), std::string::npos);
  batch = with_kernel(v1::LAUNCHED_BY_OP, 1);
  batch.mutable_events(last)->mutable_kernel()->set_launched_by(static_cast<v1::LaunchedBy>(64));
  EXPECT_EQ(validate(batch).message(), kernel + "launched_by 64 out of range (0..63)");
}

TEST(BatchValidation, RejectsUndefinedReferences) {
  v1::Batch batch = make_batch("run", "agent", 1);
  batch.mutable_events(1)->mutable_cast()->set_op_id(9);
  EXPECT_EQ(validate(batch).message(), "events[1] (cast seq 2): op_id 9 is not defined in this batch's strings");
  batch = make_batch("run", "agent", 1);
  batch.mutable_events(2)->mutable_cast()->set_arg_name_id(5);
  EXPECT_EQ(validate(batch).message(), "events[2] (cast seq 3): arg_name_id 5 is not defined in this batch's strings");
  batch = make_batch("run", "agent", 1);
  batch.mutable_events(1)->mutable_cast()->set_module_id(77);
  EXPECT_EQ(validate(batch).message(), "events[1] (cast seq 2): module_id 77 is not defined in this batch's strings");
  batch = make_batch("run", "agent", 1);
  batch.mutable_events(1)->mutable_cast()->set_parameter_id(78);
  EXPECT_EQ(validate(batch).message(), "events[1] (cast seq 2): parameter_id 78 is not defined in this batch's strings");
  batch = make_batch("run", "agent", 1);
  batch.mutable_events(1)->mutable_cast()->set_module("layers.0");  // a batch carries ids, never inline names
  EXPECT_NE(validate(batch).message().find("events[1] (cast seq 2)"), std::string::npos);
  batch = make_batch("run", "agent", 1);
  batch.mutable_events(0)->mutable_op()->set_location_id(3);
  EXPECT_EQ(validate(batch).message(), "events[0] (op seq 1): location_id 3 is not defined in this batch's locations");
  batch = make_batch("run", "agent", 1);
  batch.mutable_events(0)->mutable_op()->set_op_id(0);
  EXPECT_EQ(validate(batch).message(), "events[0] (op seq 1): op_id is 0 (unset)");
}

TEST(BatchValidation, RejectsCastSlotFieldsTheStoreCannotPack) {
  v1::Batch batch = make_batch("run", "agent", 1);
  v1::CastEvent& cast = *batch.mutable_events(1)->mutable_cast();
  cast.set_thread(kSlotThreadLimit - 1);
  cast.set_arg_index(kSlotArgIndexLimit - 1);
  cast.set_list_index(kSlotListIndexLimit - 1);
  EXPECT_TRUE(validate(batch).ok());
  for (int field = 0; field < 4; ++field) {
    batch = make_batch("run", "agent", 1);
    v1::CastEvent& bad = *batch.mutable_events(1)->mutable_cast();
    if (field == 0) bad.set_thread(kSlotThreadLimit);
    if (field == 1) bad.set_arg_index(kSlotArgIndexLimit);
    if (field == 2) bad.set_list_index(kSlotListIndexLimit);
    if (field == 3) bad.set_list_index(-2);
    const Status status = validate(batch);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << "field " << field;
    EXPECT_NE(status.message().find("events[1] (cast seq 2): thread"), std::string::npos) << status.message();
  }
}

// An agent reads shapes and sizes off real tensors: a negative dim or a byte
// count near 2^64 was stored and printed as it came.
TEST(BatchValidation, RejectsFloat8ScalingTheStoreCannotPack) {
  v1::Batch batch = make_batch("run", "agent", 1);
  v1::Float8Scaling& ok = *batch.mutable_events(1)->mutable_cast()->mutable_float8();
  ok.set_scale_log2_min(-32768);  // NUMERICS_NO_MAGNITUDE
  ok.set_scale_log2_max(32767);
  ok.set_zero_amax(65535);
  EXPECT_TRUE(validate(batch).ok()) << validate(batch).message();
  for (int field = 0; field < 3; ++field) {
    batch = make_batch("run", "agent", 1);
    v1::Float8Scaling& bad = *batch.mutable_events(1)->mutable_cast()->mutable_float8();
    if (field == 0) bad.set_amax_log2_min(-32769);
    if (field == 1) bad.set_amax_log2_max(32768);
    if (field == 2) bad.set_zero_amax(65536);
    const Status status = validate(batch);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << "field " << field;
    EXPECT_NE(status.message().find("events[1] (cast seq 2): float8."), std::string::npos) << status.message();
  }
}

TEST(BatchValidation, RejectsShapesAndByteCountsNoTensorHas) {
  auto message = [](auto&& change) {
    v1::Batch batch = make_batch("run", "agent", 1);
    change(*batch.mutable_events(1)->mutable_cast());
    const Status status = validate(batch);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
    return status.message();
  };
  EXPECT_EQ(message([](v1::CastEvent& c) { c.set_shape(1, -5); }),
            "events[1] (cast seq 2): shape[1] -5 out of range (0 <= dim < 2^48)");
  EXPECT_EQ(message([](v1::CastEvent& c) { c.set_shape(0, int64_t{1} << 48); }),
            "events[1] (cast seq 2): shape[0] 281474976710656 out of range (0 <= dim < 2^48)");
  EXPECT_EQ(message([](v1::CastEvent& c) { c.set_bytes(UINT64_MAX - 3); }),
            "events[1] (cast seq 2): bytes 18446744073709551612 out of range (bytes < 2^56)");
  EXPECT_EQ(message([](v1::CastEvent& c) { c.set_bytes(1000); }),
            "events[1] (cast seq 2): bytes 1000 does not fit its shape of 1024 elements (expected 1024 to 16384 bytes)");
  EXPECT_EQ(message([](v1::CastEvent& c) { c.set_shape(1, 0); }),  // no elements, yet 4096 bytes
            "events[1] (cast seq 2): bytes 4096 does not fit its shape of 0 elements (expected 0 to 0 bytes)");
  EXPECT_EQ(message([](v1::CastEvent& c) {
              for (int i = 0; i < 6; ++i) c.add_shape(1);
            }),
            "events[1] (cast seq 2): shape has 9 dims, the limit is 8 (send the first ones and shape_truncated)");
  // Large dims multiply past 2^64 without wrapping round to a plausible count.
  EXPECT_EQ(message([](v1::CastEvent& c) {
              c.clear_shape();
              for (int i = 0; i < 3; ++i) c.add_shape((int64_t{1} << 48) - 1);
            }).rfind("events[1] (cast seq 2): bytes 4096 does not fit its shape of ", 0),
            0u);

  v1::Batch batch = make_batch("run", "agent", 1);
  batch.mutable_events(4)->mutable_cache_sample()->set_live_bytes(uint64_t{1} << 63);
  EXPECT_EQ(validate(batch).message(),
            "events[4] (cache_sample seq 5): live_bytes 9223372036854775808 out of range (live_bytes < 2^56)");
  batch = make_batch("run", "agent", 1);
  v1::CacheSample& sample = *batch.mutable_events(4)->mutable_cache_sample();
  sample.set_live_casts(2);
  sample.set_live_bytes(100);
  sample.set_orphaned_casts(3);
  sample.set_orphaned_bytes(100);
  EXPECT_EQ(validate(batch).message(),
            "events[4] (cache_sample seq 5): orphaned 3 casts, 100 bytes exceed the live 2 casts, 100 bytes");
  sample.set_orphaned_casts(2);
  sample.set_cache_hits(uint64_t{1} << 60);
  EXPECT_EQ(validate(batch).message(),
            "events[4] (cache_sample seq 5): cache_hits 1152921504606846976 out of range (< 2^56)");
}

TEST(BatchValidation, AcceptsShapesRealTensorsHave) {
  v1::Batch batch = make_batch("run", "agent", 1);
  v1::CastEvent& scalar = *batch.mutable_events(1)->mutable_cast();  // a 0-dim fp64 tensor
  scalar.clear_shape();
  scalar.set_shape_truncated(false);
  scalar.set_bytes(8);
  v1::CastEvent& symbolic = *batch.mutable_events(2)->mutable_cast();  // symbolic sizes: nothing known
  symbolic.clear_shape();
  symbolic.set_shape_truncated(false);
  symbolic.set_bytes(0);
  v1::CastEvent& big = *batch.mutable_events(3)->mutable_cast();  // 7 dims, 6 sent: no element count to check
  big.clear_shape();
  for (int i = 0; i < 6; ++i) big.add_shape(int64_t{1} << 20);
  big.set_shape_truncated(true);
  big.set_bytes(12345);
  const Status status = validate(batch);
  EXPECT_TRUE(status.ok()) << status.message();
}

TEST(BatchValidation, RejectsRepeatedOrZeroInternedIds) {
  v1::Batch batch = make_batch("run", "agent", 1);
  batch.mutable_strings(1)->set_id(1);
  EXPECT_EQ(validate(batch).message(), "strings[1]: id 1 is defined twice");
  batch = make_batch("run", "agent", 1);
  batch.mutable_locations(0)->set_id(0);
  EXPECT_EQ(validate(batch).message(), "locations[0]: id 0 is reserved (ids start at 1)");
  // Sparse ids take the sorted index; duplicates are still found.
  batch = make_batch("run", "agent", 1);
  batch.mutable_strings(0)->set_id(4000000000u);
  batch.mutable_strings(1)->set_id(4000000000u);
  EXPECT_EQ(validate(batch).message(), "strings[1]: id 4000000000 is defined twice");
}

TEST(BatchValidation, SparseIdsResolve) {
  v1::Batch batch = make_batch("run", "agent", 1);
  batch.mutable_strings(1)->set_id(3000000000u);
  for (auto& event : *batch.mutable_events())
    if (event.has_cast()) event.mutable_cast()->set_arg_name_id(3000000000u);
  const Status status = validate(batch);
  EXPECT_TRUE(status.ok()) << status.message();
}

TEST(BatchValidation, RejectsInlineStringsEventsWithoutKindAndHugeSeq) {
  v1::Batch batch = make_batch("run", "agent", 1);
  batch.mutable_events(1)->mutable_cast()->set_op("aten::mm");
  EXPECT_EQ(validate(batch).message(),
            "events[1] (cast seq 2): inline op/arg_name/location in a batch; send them as interned ids");
  batch = make_batch("run", "agent", 1);
  batch.add_events();
  EXPECT_EQ(validate(batch).message(), "events[6] has no kind set");
  batch = make_batch("run", "agent", 1);
  batch.mutable_events(4)->mutable_cache_sample()->set_seq(uint64_t{1} << 40);
  EXPECT_EQ(validate(batch).message(), "events[4] (cache_sample seq 1099511627776): seq is over the limit 1099511627775");
}

TEST(BatchValidation, RejectsOutOfRangeEnumsAndTooManyEvents) {
  v1::Batch batch = make_batch("run", "agent", 1);
  batch.mutable_events(1)->mutable_cast()->set_src_dtype(static_cast<v1::DType>(64));
  EXPECT_EQ(validate(batch).message(), "events[1] (cast seq 2): src_dtype 64 out of range (0..63)");
  batch = make_batch("run", "agent", 1);
  for (int i = 0; i < 9; ++i) batch.mutable_events(0)->mutable_op()->add_input_dtypes(v1::DTYPE_FLOAT32);
  EXPECT_EQ(validate(batch).message(), "events[0] (op seq 1): 11 input_dtypes, the limit is 8");
  BatchLimits limits;
  limits.max_events = 2;
  EXPECT_EQ(validate(make_batch("run", "agent", 1), limits).message(), "batch has 6 events, the limit is 2");
}

// OpEvent.gemm is packed a byte per field (event_limits.h).
TEST(BatchValidation, RejectsGemmFieldsTheStoreCannotPack) {
  v1::Batch batch = make_batch("run", "agent", 1);
  v1::GemmDescription& gemm = *batch.mutable_events(0)->mutable_op()->mutable_gemm();
  gemm.set_compute(v1::GEMM_COMPUTE_32F_FAST_TF32);
  gemm.set_a_type(v1::DTYPE_FLOAT32);
  gemm.set_calls(255);
  gemm.set_mixed(true);
  EXPECT_TRUE(validate(batch).ok());
  gemm.set_compute(static_cast<v1::GemmCompute>(256));
  EXPECT_EQ(validate(batch).message(), "events[0] (op seq 1): gemm.compute 256 out of range (0..255)");
  gemm.set_compute(static_cast<v1::GemmCompute>(-1));
  EXPECT_EQ(validate(batch).message(), "events[0] (op seq 1): gemm.compute -1 out of range (0..255)");
  gemm.set_compute(v1::GEMM_COMPUTE_32F);
  gemm.set_d_type(static_cast<v1::DType>(300));
  EXPECT_EQ(validate(batch).message(), "events[0] (op seq 1): gemm.d_type 300 out of range (0..255)");
  gemm.set_d_type(v1::DTYPE_FLOAT32);
  gemm.set_calls(256);  // the agent saturates at 255
  EXPECT_EQ(validate(batch).message(), "events[0] (op seq 1): gemm.calls 256 out of range (0..255)");
}

// A numerics summary as an agent sends it: counts consistent, names by id.
v1::NumericsSummary& add_numerics(v1::Batch& batch) {
  v1::NumericsSummary& n = *batch.add_events()->mutable_numerics();
  n.set_seq(1000);
  n.set_first_ts_ns(10);
  n.set_last_ts_ns(20);
  n.set_kind(v1::NumericsSummary::KIND_CAST);
  n.set_op_id(batch.strings(0).id());
  n.set_tensors(2);
  n.set_values(64);
  n.set_overflowed(6);
  n.set_nonfinite(1);
  n.set_nan(1);
  n.set_max_abs_log2(16);
  return n;
}

TEST(BatchValidation, NumericsSummariesAreCheckedForConsistentCounts) {
  v1::Batch batch = make_batch("run", "agent", 1);
  const int index = batch.events_size();
  add_numerics(batch);
  EXPECT_TRUE(validate(batch).ok()) << validate(batch).message();
  const std::string name = "events[" + std::to_string(index) + "] (numerics seq 1000): ";

  v1::NumericsSummary* n = batch.mutable_events(index)->mutable_numerics();
  n->set_overflowed(65);  // more than the values checked
  EXPECT_EQ(validate(batch).message(),
            name + "counts or timestamps out of range (tensors, values < 2^56; overflowed, underflowed, saturated, "
                   "nonfinite <= values; nan <= nonfinite; first_ts_ns <= last_ts_ns)");
  n->set_overflowed(6);
  n->set_saturated(65);  // more clipped than checked
  EXPECT_FALSE(validate(batch).ok());
  n->set_saturated(0);
  n->set_nan(2);  // more NaN than non-finite values
  EXPECT_FALSE(validate(batch).ok());
  n->set_nan(1);
  n->set_kind(v1::NumericsSummary::KIND_UNSPECIFIED);
  EXPECT_EQ(validate(batch).message(), name + "kind is unset");
  n->set_kind(v1::NumericsSummary::KIND_CAST);
  n->set_op_id(0);
  EXPECT_EQ(validate(batch).message(), name + "op_id is 0 (unset)");
  n->set_op_id(batch.strings(0).id());
  n->set_max_abs_log2(40000);
  EXPECT_EQ(validate(batch).message(), name + "max_abs_log2 40000 out of range");
  n->set_max_abs_log2(16);
  n->set_location_id(999);
  EXPECT_EQ(validate(batch).message(), name + "location_id 999 is not defined in this batch's locations");
  n->set_location_id(0);

  // A GradScaler update names no op, and its scale is a finite number.
  n->set_kind(v1::NumericsSummary::KIND_SCALER_UPDATE);
  n->set_op_id(0);
  n->set_scale(65536.0);
  EXPECT_TRUE(validate(batch).ok()) << validate(batch).message();
  n->set_scale(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(validate(batch).message(), name + "scale is not a finite number >= 0");
  n->set_scale(-1);
  EXPECT_FALSE(validate(batch).ok());
}

TEST(BatchValidation, DecodeRejectsGarbage) {
  DecodedBatch decoded;
  const Status status = decode_batch("\xff\xff\xff", BatchLimits(), decoded);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(), "not a valid castscope.v1.Batch (3 bytes)");
  EXPECT_FALSE(decoded);
}

TEST(BatchValidation, DecodeKeepsTheBatchInItsArena) {
  DecodedBatch decoded;
  ASSERT_TRUE(decode_batch(make_batch("run", "agent", 5).SerializeAsString(), BatchLimits(), decoded).ok());
  EXPECT_EQ(decoded.batch().sequence(), 5u);
  EXPECT_GT(decoded.bytes(), 0u);
}

TEST(BatchValidation, DecodeCountsTheTimelinesEventsAndItsNewestTime) {
  v1::Batch batch = testing::export_run_batch();  // ten events with times, the newest at 3000
  batch.add_events()->mutable_stats()->set_ts_ns(9000);  // agent stats: flushed later, not drawn
  DecodedBatch decoded;
  ASSERT_TRUE(decode_batch(batch.SerializeAsString(), BatchLimits(), decoded).ok());
  EXPECT_EQ(decoded.timeline().events, 10u);
  EXPECT_EQ(decoded.timeline().max_ts_ns, 3000u);
  BatchTimeline numerics;
  ASSERT_TRUE(validate_batch(testing::export_numerics_batch(), BatchLimits(), &numerics).ok());
  EXPECT_EQ(numerics.events, 7u);
  EXPECT_EQ(numerics.max_ts_ns, 2950u);  // windows and scaler updates at their first time
}

}  // namespace
}  // namespace castscope::collector
