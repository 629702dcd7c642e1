#include "common/spool/spool_backlog.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <vector>

#include "common/spool/spool_format.h"
#include "common/spool/spool_reader.h"
#include "common/spool/spool_test_fixture.h"

namespace castscope {
namespace {

class SpoolBacklogTest : public testing::SpoolFolderTest {
 protected:
  // What the forwarder does once the collector stored them: every segment but the newest deleted.
  std::vector<std::string> deliver_finished_segments() {
    std::vector<std::string> delivered;
    auto segments = spool::list_segments(agent_dir());
    if (!segments.empty()) segments.pop_back();
    for (const auto& path : segments) {
      for (auto& payload : spool::read_segment(path).payloads) delivered.push_back(std::move(payload));
      std::filesystem::remove(path);
    }
    return delivered;
  }
};

// Every batch the same size: "batch-0007xxx..."
std::string batch(int i) {
  const std::string digits = std::to_string(i);
  return "batch-" + std::string(4 - digits.size(), '0') + digits + std::string(100, 'x');
}

TEST_F(SpoolBacklogTest, AFullFolderMakesBatchesWaitAndTheyGoFirstInOrderOnceSpaceIsFreed) {
  SpoolWriter spool;
  ASSERT_EQ(spool.open(agent_dir(), /*segment_bytes=*/256, /*max_total_bytes=*/600), "");
  SpoolBacklog backlog(/*max_bytes=*/1000);
  uint64_t written = 0;
  int next = 0;
  while (backlog.append(spool, {batch(next), 1}, written) == SpoolBacklog::Outcome::kWritten) ++next;
  ++next;  // the first one that waits
  EXPECT_EQ(spool.failure(), SpoolWriter::Failure::kFolderFull);
  EXPECT_EQ(backlog.batches(), 1u);
  EXPECT_EQ(written, static_cast<uint64_t>(next - 1));
  // Behind a waiting batch a new one waits too, even if it would fit now.
  ASSERT_EQ(backlog.append(spool, {batch(next++), 1}, written), SpoolBacklog::Outcome::kWaiting);
  // The forwarder frees space as the collector stores: every batch gets through, in order.
  std::vector<std::string> delivered = deliver_finished_segments();
  for (const int last = next + 20; next < last; ++next) {
    EXPECT_NE(backlog.append(spool, {batch(next), 1}, written), SpoolBacklog::Outcome::kRefused);
    for (auto& payload : deliver_finished_segments()) delivered.push_back(std::move(payload));
  }
  written += backlog.flush(spool);
  EXPECT_TRUE(backlog.empty()) << "every waiting batch was written as space came";
  EXPECT_EQ(written, static_cast<uint64_t>(next));
  spool.close();
  for (const auto& path : spool::list_segments(agent_dir()))
    for (auto& payload : spool::read_segment(path).payloads) delivered.push_back(std::move(payload));
  ASSERT_EQ(delivered.size(), static_cast<size_t>(next));
  for (int i = 0; i < next; ++i) EXPECT_EQ(delivered[static_cast<size_t>(i)], batch(i));
}

TEST_F(SpoolBacklogTest, TheCapRefusesTheNewestAndTakeAllHandsBackTheRestInOrder) {
  SpoolWriter spool;
  ASSERT_EQ(spool.open(agent_dir(), 256, 300), "");
  SpoolBacklog backlog(/*max_bytes=*/3 * batch(10).size());
  uint64_t written = 0;
  int next = 0;
  while (backlog.append(spool, {batch(next), 1}, written) == SpoolBacklog::Outcome::kWritten) ++next;
  const int first_waiting = next++;
  ASSERT_EQ(backlog.append(spool, {batch(next++), 2}, written), SpoolBacklog::Outcome::kWaiting);
  ASSERT_EQ(backlog.append(spool, {batch(next++), 3}, written), SpoolBacklog::Outcome::kWaiting);
  EXPECT_EQ(backlog.append(spool, {batch(next), 4}, written), SpoolBacklog::Outcome::kRefused);
  EXPECT_EQ(backlog.peak_bytes(), 3 * batch(10).size());
  const auto waiting = backlog.take_all();
  ASSERT_EQ(waiting.size(), 3u);
  for (size_t i = 0; i < waiting.size(); ++i) {
    EXPECT_EQ(waiting[i].payload, batch(first_waiting + static_cast<int>(i)));
    EXPECT_EQ(waiting[i].events, i + 1);
  }
  EXPECT_TRUE(backlog.empty());
  EXPECT_EQ(backlog.bytes(), 0u);
}

// A final batch may not wait (nothing comes after it to write it): refused,
// so its caller counts it and the accounting file closes the stream.
TEST_F(SpoolBacklogTest, ABatchThatMayNotWaitIsRefusedWhenTheSpoolIsFull) {
  SpoolWriter spool;
  ASSERT_EQ(spool.open(agent_dir(), 256, 300), "");
  SpoolBacklog backlog(/*max_bytes=*/1 << 20);
  uint64_t written = 0;
  int next = 0;
  while (backlog.append(spool, {batch(next), 1}, written) == SpoolBacklog::Outcome::kWritten) ++next;
  EXPECT_EQ(backlog.append(spool, {batch(++next), 1}, written, /*may_wait=*/false), SpoolBacklog::Outcome::kRefused);
  EXPECT_EQ(backlog.batches(), 1u);  // the one before it still waits
  backlog.take_all();
  EXPECT_EQ(backlog.append(spool, {batch(++next), 1}, written, /*may_wait=*/false), SpoolBacklog::Outcome::kRefused);
  EXPECT_EQ(spool.failure(), SpoolWriter::Failure::kFolderFull);
  EXPECT_TRUE(backlog.empty());
}

// A batch the folder could not hold even empty would wait forever and hold
// every later one behind it: refused at once.
TEST_F(SpoolBacklogTest, ABatchLargerThanTheFolderCapIsRefusedNotKeptWaiting) {
  SpoolWriter spool;
  ASSERT_EQ(spool.open(agent_dir(), 4096, 4096), "");
  SpoolBacklog backlog(/*max_bytes=*/1 << 20);
  uint64_t written = 0;
  EXPECT_EQ(backlog.append(spool, {std::string(5000, 'x'), 1}, written), SpoolBacklog::Outcome::kRefused);
  EXPECT_EQ(spool.failure(), SpoolWriter::Failure::kTooLarge);
  EXPECT_NE(spool.error().find("spool_max_bytes 4096"), std::string::npos) << spool.error();
  EXPECT_EQ(backlog.append(spool, {batch(1), 1}, written), SpoolBacklog::Outcome::kWritten);
}

TEST_F(SpoolBacklogTest, AFailureWaitingCannotCureIsRefusedAtOnce) {
  SpoolWriter spool;
  ASSERT_EQ(spool.open(agent_dir(), 1 << 20, 1 << 20), "");
  SpoolBacklog backlog(/*max_bytes=*/1 << 30);
  uint64_t written = 0;
  // Over the frame limit: no amount of freed space lets it in.
  EXPECT_EQ(backlog.append(spool, {std::string(spool::kMaxFramePayload + 1, 'x'), 1}, written),
            SpoolBacklog::Outcome::kRefused);
  EXPECT_EQ(spool.failure(), SpoolWriter::Failure::kTooLarge);
  EXPECT_TRUE(backlog.empty());
  EXPECT_EQ(written, 0u);
}

}  // namespace
}  // namespace castscope
