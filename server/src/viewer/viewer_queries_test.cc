// The viewer's queries over a store written by the real writer: tiles add up
// to the events, far-out ranges come as buckets, close-in ranges as events.
#include "server/src/viewer/viewer_queries.h"

#include <gtest/gtest.h>

#include "server/testing/older_stores.h"
#include "server/testing/test_batches.h"

namespace castscope::collector::viewer {
namespace {

using nlohmann::json;
using testing::make_batch;

// A store with one run: batch 1 has 6000 casts (over the events limit), batch 2 has 3.
std::string make_store() {
  return testing::stored_run("viewer",
                             {make_batch("run", "agent", 1, 1, 6000), make_batch("run", "agent", 2, 7000, 3)});
}

TEST(ViewerQueries, TracksCountEveryEventOfTheirThread) {
  std::unique_ptr<ViewerQueries> q;
  ASSERT_TRUE(ViewerQueries::open(make_store(), q).ok());
  json tracks;
  ASSERT_TRUE(q->tracks("run", tracks).ok());
  int64_t events = 0;
  for (const json& track : tracks["processes"][0]["tracks"]) events += track["events"].get<int64_t>();
  EXPECT_EQ(events, 6000 + 3 + 2);  // casts and the two ops
  json missing;
  EXPECT_EQ(q->tracks("no-such-run", missing).code(), StatusCode::kNotFound);
}

TEST(ViewerQueries, FarOutBucketsCloseInEvents) {
  std::unique_ptr<ViewerQueries> q;
  ASSERT_TRUE(ViewerQueries::open(make_store(), q).ok());
  json tracks;
  ASSERT_TRUE(q->tracks("run", tracks).ok());
  // The casts are on thread 2 (make_batch), the ops on thread 0.
  std::string cast_track;
  for (const json& track : tracks["processes"][0]["tracks"])
    if (track["thread"] == 2) cast_track = track["track"];
  ASSERT_FALSE(cast_track.empty());
  const int64_t t_max = tracks["t_max"];

  json far;
  ASSERT_TRUE(q->timeline({"run", cast_track, 0, t_max, 100}, far).ok());
  ASSERT_EQ(far["kind"], "buckets");
  int64_t decisions = 0, casts = 0;
  // Columns: entry i of each array is bucket i.
  ASSERT_EQ(far["buckets"]["t"].size(), far["buckets"]["decisions"].size());
  for (const json& n : far["buckets"]["decisions"]) decisions += n.get<int64_t>();
  for (const json& n : far["buckets"]["casts"]) casts += n.get<int64_t>();
  EXPECT_EQ(decisions, 6003);
  EXPECT_EQ(casts, 6003);

  // Every make_batch cast sits within a few µs: a 1 ns slice holds at most one.
  json near;
  ASSERT_TRUE(q->timeline({"run", cast_track, 0, 1, 100}, near).ok());
  EXPECT_EQ(near["kind"], "events");

  json bad;
  EXPECT_EQ(q->timeline({"run", "agent", 0, 10, 100}, bad).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(q->timeline({"run", cast_track, 10, 10, 100}, bad).code(), StatusCode::kInvalidArgument);
}

TEST(ViewerQueries, OneEventInFull) {
  std::unique_ptr<ViewerQueries> q;
  ASSERT_TRUE(ViewerQueries::open(make_store(), q).ok());
  json event;
  ASSERT_TRUE(q->event("run", "agent", 2, event).ok());  // batch 1: seq 1 the op, 2.. the casts
  EXPECT_EQ(event["kind"], "cast");
  EXPECT_EQ(event["op"], "aten::linear");
  EXPECT_EQ(event["location"]["file"], "/src/model.py");
  EXPECT_EQ(event["location"]["line"], 42);
  json op;
  ASSERT_TRUE(q->event("run", "agent", 1, op).ok());
  EXPECT_EQ(op["kind"], "op");
  json none;
  EXPECT_EQ(q->event("run", "agent", 999999, none).code(), StatusCode::kNotFound);
}

// torch.compile: a site's compile-time decisions (mode compiling) get their
// own column, beside the compiled graph's run-time casts, and no part in the
// site's counts.
TEST(ViewerQueries, SitesShowCompileTimeDecisionsApartFromTheCounts) {
  v1::Batch batch = make_batch("run", "agent", 1, 1, 3);  // three casts at /src/model.py:42 and an unlocated one
  int cast = 0;
  for (auto& event : *batch.mutable_events())
    if (event.has_cast())
      event.mutable_cast()->set_mode(cast++ == 0 ? v1::EXECUTION_MODE_COMPILING : v1::EXECUTION_MODE_COMPILED);
  const std::string db = testing::stored_run("viewer-compile", {batch});

  std::unique_ptr<ViewerQueries> q;
  ASSERT_TRUE(ViewerQueries::open(db, q).ok());
  json sites;
  ASSERT_TRUE(q->sites("run", sites).ok());
  const json* model = nullptr;
  for (const json& site : sites["sites"])
    if (site["line"] == 42) model = &site;
  ASSERT_NE(model, nullptr) << sites.dump(2);
  EXPECT_EQ((*model)["by_mode"], (json{{"compiling", {{"float32->float16", 1}}}, {"compiled", {{"float32->float16", 1}}}}))
      << model->dump(2);
  EXPECT_EQ((*model)["total"], 1);  // the compiled run's cast only
  EXPECT_EQ((*model)["mismatch"], false);
}

// GradScaler's scale as its changes and skipped steps; numerics problems
// (an overflowing cast, an op's non-finite outputs) as marks over their
// windows, a clean window left out.
TEST(ViewerQueries, NumericsScaleAndProblemMarks) {
  const std::string db = testing::store_export_run_with_numerics("viewer-numerics");
  std::unique_ptr<ViewerQueries> q;
  ASSERT_TRUE(ViewerQueries::open(db, q).ok());
  json tracks, numerics;
  ASSERT_TRUE(q->tracks("run", tracks).ok());
  const int64_t origin = std::stoll(tracks["origin_ns"].get<std::string>());
  ASSERT_TRUE(q->numerics("run", numerics).ok());
  EXPECT_EQ(numerics["truncated"], false);

  ASSERT_EQ(numerics["scalers"].size(), 1u) << numerics.dump(2);
  const json& scaler = numerics["scalers"][0];
  EXPECT_EQ(scaler["agent_id"], "agent-a");
  EXPECT_EQ(scaler["updates_total"], 4);
  EXPECT_EQ(scaler["skipped_total"], 1);
  EXPECT_EQ(scaler["location"]["line"], 42);
  std::vector<uint64_t> seqs;
  for (const json& p : scaler["points"]) seqs.push_back(p["seq"]);
  EXPECT_EQ(seqs, (std::vector<uint64_t>{11, 13, 17}));  // 12 changed nothing
  const json& skipped = scaler["points"][1];
  EXPECT_EQ(skipped["found_inf"], true);
  EXPECT_EQ(skipped["scale"], 128.0);
  EXPECT_EQ(skipped["updates"], 3);
  EXPECT_EQ(skipped["t"], 2800 - origin);

  ASSERT_EQ(numerics["marks"].size(), 2u) << numerics.dump(2);
  const json& op = numerics["marks"][0];  // earliest first
  EXPECT_EQ(op["kind"], "op_output");
  EXPECT_EQ(op["op"], "aten::mm");
  EXPECT_EQ(op["arg"], "");
  EXPECT_EQ(op["nonfinite"], 5);
  EXPECT_EQ(op["first_nonfinite_seq"], 4);
  EXPECT_EQ(op["t0"], 1000 - origin);
  const json& cast = numerics["marks"][1];
  EXPECT_EQ(cast["kind"], "cast");
  EXPECT_EQ(cast["op"], "aten::linear");
  EXPECT_EQ(cast["arg"], "input");
  EXPECT_EQ(cast["src"], "float32");
  EXPECT_EQ(cast["dst"], "float16");
  EXPECT_EQ(cast["overflowed"], 3);
  EXPECT_EQ(cast["values"], 32);
  EXPECT_EQ(cast["max_abs_log2"], 16);
  EXPECT_EQ(cast["thread"], 1);
  EXPECT_EQ(cast["t1"], 2900 - origin);
  EXPECT_EQ(cast["location"]["file"], "/src/model.py");

  // A store of schema 14 (no numerics table), read as it is, answers empty lists.
  const Status downgraded = testing::downgrade_store(db, 14);
  ASSERT_TRUE(downgraded.ok()) << downgraded.message();
  json old;
  ASSERT_TRUE(ViewerQueries::open(db, q).ok());
  ASSERT_TRUE(q->numerics("run", old).ok());
  EXPECT_EQ(old, (json{{"scalers", json::array()}, {"marks", json::array()}, {"truncated", false}}));

  // A run without numerics answers empty lists; an unknown run is not found.
  json none;
  ASSERT_TRUE(ViewerQueries::open(testing::store_export_run("viewer-no-numerics"), q).ok());
  ASSERT_TRUE(q->numerics("run", none).ok());
  EXPECT_EQ(none, (json{{"scalers", json::array()}, {"marks", json::array()}, {"truncated", false}}));
  EXPECT_EQ(q->numerics("no-such-run", none).code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace castscope::collector::viewer
