// The export's reader: one agent's events in seq order, kernels merged in by
// start time, each launching cast or op with the kernels it launched.
#include "server/src/export/run_events.h"

#include <gtest/gtest.h>

#include <vector>

#include "server/testing/older_stores.h"
#include "server/testing/test_batches.h"

namespace castscope::collector {
namespace {

using Kind = ExportEvent::Kind;

struct Seen {
  Kind kind;
  uint64_t seq;
  std::vector<uint64_t> launched;
  bool joined;
};

TEST(RunEventCursor, OpsCastsAndSamplesInSeqOrderWithKernelsByStartTime) {
  const std::string db = testing::store_export_run("export-reader");
  std::unique_ptr<RunEventCursor> reader;
  ASSERT_TRUE(RunEventCursor::open(db, "run", reader).ok());
  ASSERT_EQ(reader->agents().size(), 1u);
  const ExportAgent& agent = reader->agents()[0];
  EXPECT_EQ(agent.agent_id, "agent-a");
  EXPECT_EQ(agent.pid, 4321u);
  EXPECT_EQ(agent.rank, 0);
  EXPECT_EQ(agent.hostname, "node1");
  EXPECT_EQ(agent.command, "python train.py");
  EXPECT_EQ(agent.kernels, 4u);

  ASSERT_TRUE(reader->start_agent(0).ok());
  std::vector<Seen> seen;
  ExportEvent e;
  Status error;
  while (reader->next(e, error)) {
    seen.push_back({e.kind, e.seq, {e.launched.begin(), e.launched.end()}, e.launch_joined});
    if (e.seq == 1) {
      EXPECT_EQ(e.name, "aten::linear");
      EXPECT_EQ(e.duration_ns, 500u);
      EXPECT_EQ(e.thread, 1u);
      ASSERT_NE(e.location, nullptr);
      EXPECT_EQ(e.location->file, "/src/model.py");
      EXPECT_EQ(e.location->line, 42u);
      EXPECT_EQ(e.output_dtype, v1::DTYPE_BFLOAT16);
    }
    if (e.seq == 3) {
      EXPECT_EQ(e.arg_name, "weight");
      EXPECT_EQ(e.cache, v1::CACHE_OUTCOME_HIT);
      EXPECT_EQ(e.op_seq, 1u);
      EXPECT_EQ(std::vector<int64_t>(e.shape.begin(), e.shape.end()), (std::vector<int64_t>{16, 32}));
    }
    if (e.seq == 6) {
      EXPECT_EQ(e.live_bytes, 4096u);
      EXPECT_EQ(e.live_casts, 3u);
    }
    if (e.seq == 9) {
      EXPECT_EQ(e.name, "memset");
      EXPECT_EQ(e.activity, v1::GPU_ACTIVITY_MEMSET);
      EXPECT_EQ(e.bytes, 512u);
      EXPECT_EQ(e.stream, 7u);
    }
  }
  ASSERT_TRUE(error.ok()) << error.message();
  const std::vector<Seen> expected = {
      {Kind::kKernel, 9, {}, false},  // started before anything else
      {Kind::kOp, 1, {8}, false},     {Kind::kCast, 2, {7}, false},  {Kind::kCast, 3, {}, false},
      {Kind::kKernel, 7, {}, true},   {Kind::kKernel, 8, {}, true},  {Kind::kOp, 4, {}, false},
      {Kind::kCast, 5, {}, false},    {Kind::kCacheSample, 6, {}, false},
      {Kind::kKernel, 10, {}, false},  // its launcher (seq 99) is not in the store
  };
  ASSERT_EQ(seen.size(), expected.size());
  for (size_t i = 0; i < seen.size(); ++i) {
    EXPECT_EQ(seen[i].kind, expected[i].kind) << i;
    EXPECT_EQ(seen[i].seq, expected[i].seq) << i;
    EXPECT_EQ(seen[i].launched, expected[i].launched) << i;
    EXPECT_EQ(seen[i].joined, expected[i].joined) << i;
  }
  // A second pass over the same agent gives the same events.
  ASSERT_TRUE(reader->start_agent(0).ok());
  size_t again = 0;
  while (reader->next(e, error)) ++again;
  EXPECT_EQ(again, expected.size());
}

// Numerics in seq order with the rest: GradScaler's updates, and the windows
// that found a problem (a clean window is left out), each at its first check.
TEST(RunEventCursor, ScalerUpdatesAndNumericsProblemsComeInSeqOrder) {
  const std::string db = testing::store_export_run_with_numerics("export-reader-numerics");
  std::unique_ptr<RunEventCursor> reader;
  ASSERT_TRUE(RunEventCursor::open(db, "run", reader).ok());
  ASSERT_TRUE(reader->start_agent(0).ok());
  std::vector<uint64_t> numerics;
  uint64_t last_seq = 0;
  ExportEvent e;
  Status error;
  while (reader->next(e, error)) {
    if (e.kind != Kind::kKernel) {
      EXPECT_GT(e.seq, last_seq);
      last_seq = e.seq;
    }
    if (e.kind != Kind::kNumerics) continue;
    numerics.push_back(e.seq);
    EXPECT_EQ(e.thread, 1u);
    ASSERT_NE(e.location, nullptr);
    EXPECT_EQ(e.location->line, 42u);
    if (e.seq == 13) {
      EXPECT_EQ(e.numerics_kind, v1::NumericsSummary::KIND_SCALER_UPDATE);
      EXPECT_TRUE(e.found_inf);
      EXPECT_EQ(e.scale, 128.0);
      EXPECT_EQ(e.tensors, 3u);
      EXPECT_EQ(e.ts_ns, 2800u);
    }
    if (e.seq == 14) {
      EXPECT_EQ(e.numerics_kind, v1::NumericsSummary::KIND_CAST);
      EXPECT_EQ(e.name, "aten::linear");
      EXPECT_EQ(e.arg_name, "input");
      EXPECT_EQ(e.ts_ns, 1100u);
      EXPECT_EQ(e.last_ts_ns, 2900u);
      EXPECT_EQ(e.overflowed, 3u);
      EXPECT_EQ(e.values, 32u);
      EXPECT_EQ(e.max_abs_log2, 16);
      EXPECT_EQ(e.src_dtype, v1::DTYPE_FLOAT32);
      EXPECT_EQ(e.dst_dtype, v1::DTYPE_FLOAT16);
    }
    if (e.seq == 15) {
      EXPECT_EQ(e.numerics_kind, v1::NumericsSummary::KIND_OP_OUTPUT);
      EXPECT_EQ(e.name, "aten::mm");
      EXPECT_EQ(e.nonfinite, 5u);
      EXPECT_EQ(e.first_nonfinite_seq, 4u);
    }
  }
  ASSERT_TRUE(error.ok()) << error.message();
  EXPECT_EQ(numerics, (std::vector<uint64_t>{11, 12, 13, 14, 15, 17}));  // 16 found nothing
}

// A store of schema 14 has no numerics table: read as it is, its events export as before.
TEST(RunEventCursor, AStoreWithoutTheNumericsTableReadsItsOtherEvents) {
  const std::string db = testing::store_export_run("export-reader-version-14");
  const Status downgraded = testing::downgrade_store(db, 14);
  ASSERT_TRUE(downgraded.ok()) << downgraded.message();
  std::unique_ptr<RunEventCursor> reader;
  const Status opened = RunEventCursor::open(db, "run", reader);
  ASSERT_TRUE(opened.ok()) << opened.message();
  ASSERT_TRUE(reader->start_agent(0).ok());
  size_t events = 0;
  ExportEvent e;
  Status error;
  while (reader->next(e, error)) ++events;
  ASSERT_TRUE(error.ok()) << error.message();
  EXPECT_EQ(events, 10u);
}

TEST(RunEventCursor, UnknownRunAndMissingStoreAreNotFoundAndNamed) {
  const std::string db = testing::store_export_run("export-reader-unknown");
  std::unique_ptr<RunEventCursor> reader;
  Status s = RunEventCursor::open(db, "nope", reader);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("no run \"nope\" in " + db), std::string::npos) << s.message();
  s = RunEventCursor::open(db + ".missing", "run", reader);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find(db + ".missing"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace castscope::collector
