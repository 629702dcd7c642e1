// The live analyzer inside a real CollectorCore: findings reach the store
// when an agent finishes and at stop, without a report being asked for.
#include "server/src/analysis/live_analyzer.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <future>
#include <nlohmann/json.hpp>
#include <thread>

#include "server/src/store/store_reader.h"
#include "server/testing/test_batches.h"

namespace castscope::collector {
namespace {

using testing::make_batch;
using testing::temp_dir;

IngestResult submit(CollectorCore& core, const v1::Batch& batch) {
  DecodedBatch decoded;
  EXPECT_TRUE(decode_batch(batch.SerializeAsString(), BatchLimits(), decoded).ok());
  std::promise<IngestResult> acked;
  core.submit_and_wait_for_room(std::move(decoded), [&](const IngestResult& result) { acked.set_value(result); });
  return acked.get_future().get();
}

std::vector<std::string> stored_kinds(const std::string& db, const std::string& run_id) {
  std::unique_ptr<StoreReader> reader;
  EXPECT_TRUE(StoreReader::open(db, reader).ok());
  v1::ListFindingsRequest request;
  request.set_run_id(run_id);
  v1::ListFindingsResponse response;
  EXPECT_TRUE(reader->list_findings(request, response).ok());
  std::vector<std::string> kinds;
  for (const auto& finding : response.findings()) {
    kinds.push_back(finding.kind());
    const auto details = nlohmann::json::parse(finding.details_json());
    EXPECT_EQ(details["kind"], finding.kind());  // the whole finding, as the report has it
  }
  return kinds;
}

bool contains(const std::vector<std::string>& kinds, const std::string& kind) {
  return std::find(kinds.begin(), kinds.end(), kind) != kinds.end();
}

TEST(LiveAnalyzer, StoresFindingsWhenAnAgentFinishesAndAtStop) {
  const std::string db = (temp_dir("live_analyzer") / "store.db").string();
  std::unique_ptr<CollectorCore> core;
  ASSERT_TRUE(CollectorCore::open(db, CollectorOptions(), core).ok());
  // An interval longer than the test: only an agent's end and stop() analyze.
  LiveAnalyzer analyzer(*core, std::chrono::hours(1));
  core->set_commit_listener([&](const std::vector<CommittedRun>& runs) { analyzer.committed(runs); });

  v1::Batch last = make_batch("finished", "agent", 1);  // its casts are stale cache hits
  last.set_final(true);
  ASSERT_TRUE(submit(*core, last).status.ok());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (!contains(stored_kinds(db, "finished"), "stale-cache-hit") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_TRUE(contains(stored_kinds(db, "finished"), "stale-cache-hit"));

  ASSERT_TRUE(submit(*core, make_batch("running", "agent", 1)).status.ok());
  EXPECT_TRUE(stored_kinds(db, "running").empty());  // no agent finished, the interval has not passed
  analyzer.stop();
  core->shutdown();
  EXPECT_TRUE(contains(stored_kinds(db, "running"), "stale-cache-hit"));
  EXPECT_TRUE(contains(stored_kinds(db, "finished"), "stale-cache-hit"));
}

}  // namespace
}  // namespace castscope::collector
