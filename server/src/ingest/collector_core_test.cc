#include "server/src/ingest/collector_core.h"

#include <gtest/gtest.h>

#include <future>
#include <optional>

#include "server/src/ingest/spool_import.h"
#include "server/src/store/ship_rollups.h"
#include "server/src/store/store_reader.h"
#include "server/testing/test_batches.h"

namespace castscope::collector {
namespace {

using testing::make_batch;
using testing::temp_dir;

DecodedBatch decoded(const v1::Batch& batch) {
  DecodedBatch out;
  const Status status = decode_batch(batch.SerializeAsString(), BatchLimits(), out);
  EXPECT_TRUE(status.ok()) << status.message();
  return out;
}

// Submits and waits for the acknowledgement.
IngestResult submit(CollectorCore& core, const v1::Batch& batch) {
  std::promise<IngestResult> acked;
  core.submit_and_wait_for_room(decoded(batch), [&](const IngestResult& result) { acked.set_value(result); });
  return acked.get_future().get();
}

std::unique_ptr<CollectorCore> open_core(const std::string& db, CollectorOptions options = {}) {
  std::unique_ptr<CollectorCore> core;
  const Status status = CollectorCore::open(db, options, core);
  EXPECT_TRUE(status.ok()) << status.message();
  return core;
}

TEST(CollectorCore, AcknowledgesAfterCommitAndRecognisesReplays) {
  const std::string db = (temp_dir("core_ack") / "store.db").string();
  auto core = open_core(db);
  IngestResult first = submit(*core, make_batch("run", "agent", 1));
  ASSERT_TRUE(first.status.ok()) << first.status.message();
  EXPECT_FALSE(first.duplicate);
  // Acknowledged means committed: another connection sees it now.
  v1::ListRunsResponse runs;
  ASSERT_TRUE(testing::list_runs(db, runs).ok());
  ASSERT_EQ(runs.runs_size(), 1);
  EXPECT_EQ(runs.runs(0).agents(0).casts(), 3u);

  IngestResult replay = submit(*core, make_batch("run", "agent", 1));
  ASSERT_TRUE(replay.status.ok());
  EXPECT_TRUE(replay.duplicate);
  core->shutdown();
  EXPECT_EQ(core->counters().batches_stored, 1u);
  EXPECT_EQ(core->counters().batches_duplicate, 1u);
}

TEST(CollectorCore, StreamRejectsRepeatsAndStepsBackButNotOtherAgents) {
  auto core = open_core((temp_dir("core_order") / "store.db").string());
  IngestStream stream(*core);
  std::promise<void> stored;
  bool may_continue = false;
  ASSERT_TRUE(stream.submit(decoded(make_batch("run", "agent", 9)), [&](const IngestResult&) { stored.set_value(); },
                            [] {}, may_continue)
                  .ok());
  EXPECT_TRUE(may_continue);
  stored.get_future().wait();
  Status status = stream.submit(decoded(make_batch("run", "agent", 7, 100)), [](const IngestResult&) {}, [] {},
                                may_continue);
  EXPECT_EQ(status.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(status.message(),
            "run run agent agent: sequence 7 after 9 on this stream (sequences must increase within a stream)");
  status = stream.submit(decoded(make_batch("run", "agent", 9)), [](const IngestResult&) {}, [] {}, may_continue);
  EXPECT_EQ(status.message(),
            "run run agent agent: sequence 9 after 9 on this stream (sequences must increase within a stream)");
  // Another agent on the same stream has its own order; a new stream starts afresh.
  EXPECT_TRUE(stream.submit(decoded(make_batch("run", "other", 1)), [](const IngestResult&) {}, [] {}, may_continue)
                  .ok());
  IngestStream reconnected(*core);
  std::promise<IngestResult> replayed;
  ASSERT_TRUE(reconnected
                  .submit(decoded(make_batch("run", "agent", 9)),
                          [&](const IngestResult& result) { replayed.set_value(result); }, [] {}, may_continue)
                  .ok());
  EXPECT_TRUE(replayed.get_future().get().duplicate);
}

TEST(CollectorCore, FullQueueAsksTheSenderToWaitThenResumes) {
  CollectorOptions options;
  options.queue_budget_bytes = 1;  // every batch fills it
  auto core = open_core((temp_dir("core_budget") / "store.db").string(), options);
  std::promise<void> resumed;
  const bool may_continue =
      core->submit(decoded(make_batch("run", "agent", 1)), [](const IngestResult&) {}, [&] { resumed.set_value(); });
  EXPECT_FALSE(may_continue);
  EXPECT_EQ(resumed.get_future().wait_for(std::chrono::seconds(10)), std::future_status::ready);
}

TEST(CollectorCore, SubscribersGetCommittedEventsAndCountWhatTheyMiss) {
  CollectorOptions options;
  options.subscriber_queue_events = 5;  // one batch of make_batch (5 stored events) fits, two do not
  auto core = open_core((temp_dir("core_subscribe") / "store.db").string(), options);
  auto follower = core->subscribe("run", [] {});
  auto other_run = core->subscribe("elsewhere", [] {});
  ASSERT_TRUE(submit(*core, make_batch("run", "agent", 1)).status.ok());
  ASSERT_TRUE(submit(*core, make_batch("run", "agent", 2, 10)).status.ok());
  ASSERT_TRUE(submit(*core, make_batch("run", "agent", 2, 10)).duplicate);  // replays are not offered again

  std::shared_ptr<const EventChunk> chunk;
  uint64_t skipped = 0;
  ASSERT_TRUE(follower->take(chunk, skipped));
  ASSERT_TRUE(chunk);
  EXPECT_EQ(chunk->events.size(), 5u);
  EXPECT_EQ(chunk->events[1].event().cast().op(), "aten::linear");
  EXPECT_EQ(skipped, 5u);
  EXPECT_FALSE(follower->take(chunk, skipped));
  EXPECT_FALSE(other_run->take(chunk, skipped));
  core->shutdown();
  EXPECT_TRUE(follower->closed());
}

TEST(CollectorCore, ChunksWithNoEventStillFillASubscribersQueue) {
  // A page stuck in a write stops taking; commits with no cast still offer it
  // a chunk each (their event count), which must not pile up without bound.
  Subscription page("run", 2, nullptr, 64);
  for (int i = 0; i < 3; ++i) {
    auto chunk = std::make_shared<EventChunk>();
    chunk->batch_events = 5;
    page.offer(chunk);
  }
  std::shared_ptr<const EventChunk> chunk;
  uint64_t skipped = 0;
  ASSERT_TRUE(page.take(chunk, skipped));
  EXPECT_TRUE(chunk);
  EXPECT_EQ(skipped, 5u);  // the third did not fit
  ASSERT_TRUE(page.take(chunk, skipped));
  EXPECT_TRUE(chunk);
  EXPECT_EQ(skipped, 0u);
  EXPECT_FALSE(page.take(chunk, skipped));
  // Taken, they make room again.
  page.offer(std::make_shared<EventChunk>());
  EXPECT_TRUE(page.take(chunk, skipped));
}

TEST(CollectorCore, APageGetsTheNewestCastsOfACommitInOneChunkAFollowerEveryBatch) {
  CollectorOptions options;
  options.max_transaction_time = std::chrono::minutes(1);  // a slow machine must not split the commit
  auto core = open_core((temp_dir("core_sample") / "store.db").string(), options);
  auto page = core->subscribe("run", [] {}, 4);
  auto narrow_page = core->subscribe("run", [] {}, 2);
  auto follower = core->subscribe("run", [] {});
  // The writer held in a task of its own, so that the batches queue and go in one commit.
  std::promise<void> holding, release;
  core->run_on_writer([&](StoreWriter&) {
    holding.set_value();
    release.get_future().wait();
    return Status();
  });
  holding.get_future().wait();
  std::vector<std::promise<void>> stored(4);
  auto queue = [&](const v1::Batch& batch, size_t i) {
    core->submit(decoded(batch), [&stored, i](const IngestResult&) { stored[i].set_value(); }, [] {});
  };
  queue(make_batch("run", "agent", 1, 1, 5), 0);   // op 1, casts 2-6, a cache sample
  queue(make_batch("run", "agent", 2, 50, 0), 1);  // no cast: op 50, a cache sample
  queue(make_batch("run", "other", 1, 1, 1), 2);   // another agent: op 1, cast 2
  queue(make_batch("run", "agent", 3, 100, 3), 3); // op 100, casts 101-103
  release.set_value();
  for (auto& s : stored) s.get_future().wait();
  core->drain();  // and offered: acknowledgements go out before the offers

  auto cast_seqs = [](const EventChunk& chunk) {
    std::vector<uint64_t> seqs;
    for (const v1::StoredEvent& e : chunk.events) seqs.push_back(e.event().cast().seq());
    return seqs;
  };
  std::shared_ptr<const EventChunk> chunk;
  uint64_t skipped = 0;
  // One chunk per agent for the commit: the first batch's last cast, then the last batch's three.
  ASSERT_TRUE(page->take(chunk, skipped));
  ASSERT_TRUE(chunk);
  EXPECT_EQ(chunk->agent_id, "agent");
  EXPECT_EQ(cast_seqs(*chunk), (std::vector<uint64_t>{6, 101, 102, 103}));
  EXPECT_EQ(chunk->events[0].event().cast().op(), "aten::linear");  // resolved
  EXPECT_EQ(chunk->batch_events, 7u + 2u + 5u);  // every batch's op, casts and cache sample
  EXPECT_EQ(chunk->max_ts_ns, 2000u);
  ASSERT_TRUE(page->take(chunk, skipped));
  EXPECT_EQ(chunk->agent_id, "other");
  EXPECT_EQ(cast_seqs(*chunk), (std::vector<uint64_t>{2}));
  EXPECT_FALSE(page->take(chunk, skipped));
  // A sample the newest batch fills alone.
  ASSERT_TRUE(narrow_page->take(chunk, skipped));
  EXPECT_EQ(cast_seqs(*chunk), (std::vector<uint64_t>{102, 103}));
  EXPECT_EQ(chunk->batch_events, 14u);
  ASSERT_TRUE(narrow_page->take(chunk, skipped));
  EXPECT_FALSE(narrow_page->take(chunk, skipped));

  // A follower of every event gets every batch whole, in commit order.
  std::vector<std::pair<std::string, size_t>> batches;
  while (follower->take(chunk, skipped)) batches.emplace_back(chunk->agent_id, chunk->events.size());
  const std::vector<std::pair<std::string, size_t>> whole{{"agent", 7}, {"agent", 2}, {"other", 3}, {"agent", 5}};
  EXPECT_EQ(batches, whole);
}

TEST(CollectorCore, AWriterTaskIsToldOnceItsTransactionCommitted) {
  const std::string db = (temp_dir("core_task") / "store.db").string();
  auto core = open_core(db);
  std::unique_ptr<StoreReader> reader;
  ASSERT_TRUE(StoreReader::open(db, reader).ok());
  std::promise<std::string> seen;  // what another connection reads when `done` runs
  core->run_on_writer([](StoreWriter& writer) { return writer.write_ship_state("k", "v"); },
                      [&](const Status& s) {
                        EXPECT_TRUE(s.ok()) << s.message();
                        std::string value;
                        EXPECT_TRUE(ship::read_state(reader->database().handle(), "k", value).ok());
                        seen.set_value(value);
                      });
  EXPECT_EQ(seen.get_future().get(), "v");

  std::promise<Status> failed;  // a failing task: rolled back, and told why
  core->run_on_writer([](StoreWriter&) { return Status::internal("no"); },
                      [&](const Status& s) { failed.set_value(s); });
  EXPECT_EQ(failed.get_future().get().message(), "no");

  core->shutdown();
  std::optional<Status> dropped;  // after shutdown: dropped, and told so at once
  core->run_on_writer([](StoreWriter&) { return Status(); }, [&](const Status& s) { dropped = s; });
  ASSERT_TRUE(dropped.has_value());
  EXPECT_EQ(dropped->code(), StatusCode::kUnavailable);
}

TEST(CollectorCore, SubmitAfterShutdownIsRefused) {
  auto core = open_core((temp_dir("core_shutdown") / "store.db").string());
  core->shutdown();
  const IngestResult result = submit(*core, make_batch("run", "agent", 1));
  EXPECT_EQ(result.status.code(), StatusCode::kUnavailable);
}

TEST(SpoolImport, CorruptFrameIsSkippedAndTheRestStoredOnce) {
  const auto dir = temp_dir("spool");
  const auto spool = dir / "spool";
  const std::string first = testing::frame(make_batch("run", "agent-a", 1).SerializeAsString());
  std::string corrupted = testing::frame(make_batch("run", "agent-a", 2, 10).SerializeAsString());
  corrupted[corrupted.size() - 1] ^= 0x5a;  // CRC no longer matches
  testing::write_segment(spool / "agent-a" / "00000001.cspool",
                         {first, corrupted,
                          testing::frame(make_batch("run", "agent-a", 3, 20).SerializeAsString())});
  testing::write_segment(spool / "agent-b" / "00000001.cspool",
                         {testing::frame(make_batch("run", "agent-b", 1).SerializeAsString()),
                          testing::frame("not a batch")});

  auto core = open_core((dir / "store.db").string());
  SpoolImportReport report = import_spool(*core, {spool.string()}, BatchLimits());
  EXPECT_EQ(report.agent_dirs, 2u);
  EXPECT_EQ(report.batches_stored, 3u);
  EXPECT_EQ(report.events_stored, 18u);  // events of the stored batches, agent stats included
  EXPECT_EQ(report.frames_skipped, 2u);
  ASSERT_EQ(report.problems.size(), 2u);
  EXPECT_NE(report.problems[0].find("agent-a/00000001.cspool at byte " + std::to_string(8 + first.size())),
            std::string::npos)
      << report.problems[0];
  EXPECT_NE(report.problems[0].find("CRC mismatch"), std::string::npos) << report.problems[0];
  EXPECT_NE(report.problems[1].find("agent-b/00000001.cspool frame 2: not a valid castscope.v1.Batch"),
            std::string::npos)
      << report.problems[1];
  EXPECT_FALSE(report.clean());

  report = import_spool(*core, {spool.string()}, BatchLimits());
  EXPECT_EQ(report.batches_stored, 0u);
  EXPECT_EQ(report.batches_duplicate, 3u);
}

}  // namespace
}  // namespace castscope::collector
