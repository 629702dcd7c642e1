#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "common/spool/accounting_file.h"
#include "common/spool/spool_format.h"
#include "common/spool/spool_reader.h"
#include "common/spool/spool_test_fixture.h"
#include "common/spool/spool_writer.h"

namespace castscope {
namespace {

class SpoolTest : public testing::SpoolFolderTest {};

std::string payload(int i) { return "batch-" + std::to_string(i) + std::string(static_cast<size_t>(i * 7), 'x'); }

TEST_F(SpoolTest, FramesRoundTripAcrossSegments) {
  SpoolWriter writer;
  ASSERT_EQ(writer.open(agent_dir(), /*segment_bytes=*/256, /*max_total_bytes=*/1 << 20), "");
  for (int i = 0; i < 40; ++i) ASSERT_TRUE(writer.append(payload(i))) << writer.error();
  writer.close();
  const auto segments = spool::list_segments(agent_dir());
  ASSERT_GT(segments.size(), 3u);
  EXPECT_EQ(std::filesystem::path(segments[0]).filename(), "00000001.cspool");
  int next = 0;
  for (const auto& path : segments) {
    const auto contents = spool::read_segment(path);
    EXPECT_TRUE(contents.problems.empty());
    EXPECT_FALSE(contents.incomplete_tail);
    for (const auto& p : contents.payloads) EXPECT_EQ(p, payload(next++));
  }
  EXPECT_EQ(next, 40);
  EXPECT_EQ(spool::list_agent_dirs(root_.string()), std::vector<std::string>{agent_dir()});
}

TEST_F(SpoolTest, CorruptFrameIsSkippedAndNamedTheRestKept) {
  SpoolWriter writer;
  ASSERT_EQ(writer.open(agent_dir(), 1 << 20, 1 << 20), "");
  for (int i = 0; i < 3; ++i) ASSERT_TRUE(writer.append(payload(i)));
  writer.close();
  const std::string path = spool::list_segments(agent_dir()).at(0);
  {
    std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
    const auto second_frame_body = sizeof(spool::kFileMagic) + spool::kFrameHeaderBytes + payload(0).size() +
                                   spool::kFrameHeaderBytes + 2;
    file.seekp(static_cast<std::streamoff>(second_frame_body));
    file.put('!');  // one flipped byte: CRC mismatch
  }
  const auto contents = spool::read_segment(path);
  ASSERT_EQ(contents.payloads.size(), 2u);
  EXPECT_EQ(contents.payloads[0], payload(0));
  EXPECT_EQ(contents.payloads[1], payload(2));
  ASSERT_EQ(contents.problems.size(), 1u);
  EXPECT_NE(contents.problems[0].str().find("CRC mismatch"), std::string::npos) << contents.problems[0].str();
  EXPECT_NE(contents.problems[0].str().find(path), std::string::npos);
}

TEST_F(SpoolTest, TruncatedTailIsIncompleteNotCorrupt) {
  SpoolWriter writer;
  ASSERT_EQ(writer.open(agent_dir(), 1 << 20, 1 << 20), "");
  ASSERT_TRUE(writer.append(payload(1)));
  ASSERT_TRUE(writer.append(payload(2)));
  writer.close();
  const std::string path = spool::list_segments(agent_dir()).at(0);
  std::filesystem::resize_file(path, std::filesystem::file_size(path) - 3);  // killed mid-write
  const auto contents = spool::read_segment(path);
  ASSERT_EQ(contents.payloads.size(), 1u);
  EXPECT_TRUE(contents.incomplete_tail);
  EXPECT_TRUE(contents.problems.empty());
  // A reader that resumes at complete_bytes sees nothing new yet.
  const auto resumed = spool::read_segment(path, contents.complete_bytes);
  EXPECT_TRUE(resumed.payloads.empty());
  EXPECT_TRUE(resumed.incomplete_tail);
}

TEST_F(SpoolTest, NotASpoolFileIsRefused) {
  std::filesystem::create_directories(agent_dir());
  const std::string path = agent_dir() + "/00000001.cspool";
  std::ofstream(path) << "hello, this is not a spool";
  const auto contents = spool::read_segment(path);
  EXPECT_TRUE(contents.payloads.empty());
  ASSERT_EQ(contents.problems.size(), 1u);
  EXPECT_NE(contents.problems[0].what.find("bad file magic"), std::string::npos);
}

TEST_F(SpoolTest, FullSpoolRefusesAndSaysSo) {
  SpoolWriter writer;
  ASSERT_EQ(writer.open(agent_dir(), 1 << 20, /*max_total_bytes=*/200), "");
  EXPECT_TRUE(writer.append(payload(1)));
  EXPECT_FALSE(writer.append(payload(22)));  // fits the cap alone, not beside the first
  EXPECT_NE(writer.error().find("is full"), std::string::npos) << writer.error();
  EXPECT_EQ(writer.failure(), SpoolWriter::Failure::kFolderFull);
}

// The kernel refusing writes part way, as a full disk does: RLIMIT_FSIZE
// makes write(2) stop at the limit (EFBIG) once SIGXFSZ is ignored.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    previous_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &previous_);
    rlimit limit = previous_;
    limit.rlim_cur = bytes;
    ::setrlimit(RLIMIT_FSIZE, &limit);
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &previous_);
    ::signal(SIGXFSZ, previous_handler_);
  }

 private:
  rlimit previous_{};
  sighandler_t previous_handler_ = SIG_DFL;
};

TEST_F(SpoolTest, FailedWritesAreCutOffAndLeaveNoTrailOfSegments) {
  SpoolWriter writer;
  ASSERT_EQ(writer.open(agent_dir(), 1 << 20, 1 << 20), "");
  ASSERT_TRUE(writer.append(payload(1)));
  const std::string path = spool::list_segments(agent_dir()).at(0);
  const auto size_before = std::filesystem::file_size(path);
  {
    FileSizeLimit full(size_before + 20);  // the next frame gets part way
    for (int i = 0; i < 50; ++i) {
      EXPECT_FALSE(writer.append(payload(40)));
      EXPECT_EQ(writer.failure(), SpoolWriter::Failure::kIo) << writer.error();
    }
  }
  // No half frame left behind, and no new segment per failed write.
  EXPECT_EQ(std::filesystem::file_size(path), size_before);
  EXPECT_EQ(spool::list_segments(agent_dir()).size(), 1u);
  ASSERT_TRUE(writer.append(payload(2))) << writer.error();  // room again: same segment
  EXPECT_EQ(writer.failure(), SpoolWriter::Failure::kNone);
  const auto contents = spool::read_segment(path);
  EXPECT_TRUE(contents.problems.empty());
  EXPECT_FALSE(contents.incomplete_tail);
  EXPECT_EQ(contents.payloads, (std::vector<std::string>{payload(1), payload(2)}));
}

TEST_F(SpoolTest, AccountingFileRoundTripsAndIsRewrittenInPlace) {
  std::filesystem::create_directories(agent_dir());
  EXPECT_FALSE(spool::read_accounting(agent_dir()).has_value());
  spool::AccountingFile file;
  ASSERT_EQ(file.open(agent_dir()), "");
  EXPECT_FALSE(spool::read_accounting(agent_dir()).has_value()) << "reserved, never written";
  ASSERT_TRUE(file.write(std::string(300, 'a')));
  ASSERT_TRUE(file.write("shorter"));  // the old frame's tail stays behind it, unread
  EXPECT_EQ(spool::read_accounting(agent_dir()), std::optional<std::string>("shorter"));
  EXPECT_EQ(std::filesystem::file_size(agent_dir() + "/" + spool::kAccountingFileName), spool::kAccountingFileBytes);
  EXPECT_FALSE(file.write(std::string(spool::kAccountingFileBytes, 'x'))) << "over the reservation";
  EXPECT_EQ(spool::read_accounting(agent_dir()), std::optional<std::string>("shorter"));
  const auto mode = std::filesystem::status(agent_dir() + "/" + spool::kAccountingFileName).permissions();
  EXPECT_EQ(mode & std::filesystem::perms::all, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
}

TEST_F(SpoolTest, AccountingFrameWithABadChecksumReadsAsAbsent) {
  std::filesystem::create_directories(agent_dir());
  spool::AccountingFile file;
  ASSERT_EQ(file.open(agent_dir()), "");
  ASSERT_TRUE(file.write("the counts"));
  {
    std::fstream raw(agent_dir() + "/" + spool::kAccountingFileName, std::ios::in | std::ios::out | std::ios::binary);
    raw.seekp(static_cast<std::streamoff>(sizeof(spool::kFileMagic) + spool::kFrameHeaderBytes + 1));
    raw.put('!');  // a torn rewrite
  }
  EXPECT_FALSE(spool::read_accounting(agent_dir()).has_value());
}

}  // namespace
}  // namespace castscope
