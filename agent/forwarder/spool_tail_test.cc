#include "agent/forwarder/spool_tail.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/spool/spool_format.h"
#include "common/spool/spool_reader.h"
#include "common/spool/spool_test_fixture.h"
#include "common/spool/spool_writer.h"

namespace castscope {
namespace {

class SpoolTailTest : public testing::SpoolFolderTest {};

std::string payload(int i) { return "batch-" + std::to_string(i) + std::string(static_cast<size_t>(i % 13) * 7, 'x'); }

// Polls until the tail has nothing more to hand out (a poll reads one
// segment, so moving on to the next segment takes an empty poll).
std::vector<SpoolTail::Frame> drain(SpoolTail& tail, std::vector<spool::ReadProblem>& problems) {
  std::vector<SpoolTail::Frame> out;
  for (int empty = 0; empty < 3;) {
    auto frames = tail.poll(problems);
    empty = frames.empty() ? empty + 1 : 0;
    out.insert(out.end(), frames.begin(), frames.end());
  }
  return out;
}

std::vector<std::string> payloads_of(const std::vector<SpoolTail::Frame>& frames) {
  std::vector<std::string> out;
  for (const auto& frame : frames) out.push_back(frame.payload);
  return out;
}

std::vector<std::string> expected_payloads(int from, int to) {
  std::vector<std::string> out;
  for (int i = from; i < to; ++i) out.push_back(payload(i));
  return out;
}

TEST_F(SpoolTailTest, HandsOutFramesInWriteOrderAsTheyAreAppended) {
  SpoolWriter writer;
  ASSERT_EQ(writer.open(agent_dir(), /*segment_bytes=*/1 << 20, /*max_total_bytes=*/1 << 22), "");
  SpoolTail tail(agent_dir());
  std::vector<spool::ReadProblem> problems;
  EXPECT_TRUE(tail.poll(problems).empty());

  for (int i = 0; i < 5; ++i) ASSERT_TRUE(writer.append(payload(i))) << writer.error();
  auto first = tail.poll(problems);
  EXPECT_EQ(payloads_of(first), expected_payloads(0, 5));
  for (const auto& frame : first) EXPECT_EQ(frame.segment, 1u);

  for (int i = 5; i < 8; ++i) ASSERT_TRUE(writer.append(payload(i))) << writer.error();
  EXPECT_EQ(payloads_of(tail.poll(problems)), expected_payloads(5, 8));  // only what is new
  EXPECT_TRUE(tail.poll(problems).empty());
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(tail.unacknowledged(), 8u);
  for (int i = 0; i < 8; ++i) tail.acknowledge(1);
  EXPECT_EQ(tail.unacknowledged(), 0u);
  // The agent may still append to its newest segment: it stays.
  EXPECT_EQ(spool::list_segments(agent_dir()).size(), 1u);
}

TEST_F(SpoolTailTest, FollowsSegmentRotationAndDeletesAcknowledgedSegments) {
  SpoolWriter writer;
  ASSERT_EQ(writer.open(agent_dir(), /*segment_bytes=*/256, /*max_total_bytes=*/1 << 22), "");
  SpoolTail tail(agent_dir());
  std::vector<spool::ReadProblem> problems;
  std::vector<SpoolTail::Frame> frames;
  // Tail while the writer rotates: a poll after every few appends.
  for (int i = 0; i < 60; ++i) {
    ASSERT_TRUE(writer.append(payload(i))) << writer.error();
    if (i % 3 == 0) {
      auto polled = tail.poll(problems);
      frames.insert(frames.end(), polled.begin(), polled.end());
    }
  }
  auto rest = drain(tail, problems);
  frames.insert(frames.end(), rest.begin(), rest.end());
  EXPECT_TRUE(problems.empty());
  EXPECT_EQ(payloads_of(frames), expected_payloads(0, 60));

  std::set<uint32_t> segments;
  for (size_t i = 0; i < frames.size(); ++i) {
    segments.insert(frames[i].segment);
    if (i > 0) {
      EXPECT_GE(frames[i].segment, frames[i - 1].segment) << "frame " << i;
    }
  }
  const auto on_disk = spool::list_segments(agent_dir());
  ASSERT_GT(segments.size(), 3u);
  EXPECT_EQ(segments.size(), on_disk.size());  // nothing deleted before it is acknowledged

  // Acknowledged in order: every segment but the one the agent still writes goes.
  for (const auto& frame : frames) tail.acknowledge(frame.segment);
  EXPECT_EQ(tail.unacknowledged(), 0u);
  const auto left = spool::list_segments(agent_dir());
  ASSERT_EQ(left.size(), 1u);
  EXPECT_EQ(spool::segment_index(left[0]), *segments.rbegin());

  // The writer goes on in the segment left; the tail follows.
  ASSERT_TRUE(writer.append(payload(60)));
  EXPECT_EQ(payloads_of(drain(tail, problems)), expected_payloads(60, 61));

  writer.close();
  tail.remove_all();
  EXPECT_FALSE(std::filesystem::exists(agent_dir()));
}

TEST_F(SpoolTailTest, EmptySegmentsDoNotEndTheSpool) {
  // A full disk leaves zero-byte segments behind (the writer opens a new
  // segment after each failed write); frames after them must still come out
  // before the tail says it has caught up.
  SpoolWriter writer;
  ASSERT_EQ(writer.open(agent_dir(), /*segment_bytes=*/4096, /*max_total_bytes=*/1 << 22), "");
  int written = 0;
  while (spool::list_segments(agent_dir()).size() < 3) ASSERT_TRUE(writer.append(payload(written++)));
  writer.close();
  const auto segments = spool::list_segments(agent_dir());
  std::filesystem::rename(segments[2], agent_dir() + "/" + spool::segment_name(21));
  std::filesystem::rename(segments[1], agent_dir() + "/" + spool::segment_name(20));
  for (uint32_t empty = 2; empty < 20; ++empty) std::ofstream(agent_dir() + "/" + spool::segment_name(empty));

  SpoolTail tail(agent_dir());
  std::vector<spool::ReadProblem> problems;
  std::vector<SpoolTail::Frame> frames;
  int empty_polls = 0;
  while (true) {
    auto polled = tail.poll(problems);
    empty_polls += polled.empty() ? 1 : 0;
    frames.insert(frames.end(), polled.begin(), polled.end());
    if (tail.caught_up()) break;
    ASSERT_LT(empty_polls, 100) << "the tail never caught up";
  }
  EXPECT_GE(empty_polls, 18);  // one poll per empty segment: "two empty polls" is not the end
  EXPECT_EQ(payloads_of(frames), expected_payloads(0, written));
  EXPECT_TRUE(problems.empty());
}

TEST_F(SpoolTailTest, CorruptFrameIsSkippedAndCounted) {
  {
    SpoolWriter writer;
    ASSERT_EQ(writer.open(agent_dir(), 1 << 20, 1 << 22), "");
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(writer.append(payload(i)));
  }
  const std::string first_segment = spool::list_segments(agent_dir()).at(0);
  {
    std::fstream file(first_segment, std::ios::in | std::ios::out | std::ios::binary);
    const auto second_frame_body =
        sizeof(spool::kFileMagic) + spool::kFrameHeaderBytes + payload(0).size() + spool::kFrameHeaderBytes + 2;
    file.seekp(static_cast<std::streamoff>(second_frame_body));
    file.put('!');  // one flipped byte: CRC mismatch
  }
  // The agent restarts its writer: a second segment follows the damaged one.
  SpoolWriter writer;
  ASSERT_EQ(writer.open(agent_dir(), 1 << 20, 1 << 22), "");
  for (int i = 3; i < 5; ++i) ASSERT_TRUE(writer.append(payload(i)));

  SpoolTail tail(agent_dir());
  std::vector<spool::ReadProblem> problems;
  const auto frames = drain(tail, problems);
  EXPECT_EQ(payloads_of(frames), (std::vector<std::string>{payload(0), payload(2), payload(3), payload(4)}));
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].file, first_segment);
  EXPECT_NE(problems[0].what.find("CRC mismatch"), std::string::npos) << problems[0].str();
  EXPECT_EQ(tail.unacknowledged(), 4u);
  // Polling on finds nothing new and reports the corrupt frame only once.
  EXPECT_TRUE(tail.poll(problems).empty());
  EXPECT_EQ(problems.size(), 1u);
}

}  // namespace
}  // namespace castscope
