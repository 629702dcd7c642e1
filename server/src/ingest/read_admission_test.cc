#include "server/src/ingest/read_admission.h"

#include <gtest/gtest.h>

namespace castscope::collector {
namespace {

using std::chrono::milliseconds;
constexpr size_t kMiB = 1 << 20;

TEST(ReadAdmissionTest, BusyStreamsShareTheBudgetInsteadOfEachOvershootingIt) {
  ReadAdmission admission(8 * kMiB, milliseconds(1000));
  const auto now = ReadAdmission::Clock::time_point{} + milliseconds(5000);
  std::vector<uint64_t> readers;
  for (int i = 0; i < 50; ++i) readers.push_back(admission.add_reader());
  for (uint64_t r : readers) admission.submitted(r, kMiB);  // learn the batch size
  for (int i = 0; i < 100; ++i) admission.submitted(readers[0], kMiB);
  int admitted = 0, resumed = 0;
  for (uint64_t r : readers)
    if (admission.admit(r, /*queued_bytes=*/0, now, [&] { ++resumed; })) ++admitted;
  // About budget / batch reads at once, not 50.
  EXPECT_GE(admitted, 7);
  EXPECT_LE(admitted, 8);
  EXPECT_LE(admission.reserved_bytes(now), 8 * kMiB);
  // A batch arrives and is committed: one waiting reader may go.
  admission.submitted(readers[0], kMiB);
  auto go = admission.admit_waiting(/*queued_bytes=*/0, now);
  EXPECT_EQ(go.size(), 1u);
  for (auto& resume : go) resume();
  EXPECT_EQ(resumed, 1);
}

TEST(ReadAdmissionTest, QuietStreamsStopHoldingTheBudget) {
  ReadAdmission admission(4 * kMiB, milliseconds(1000));
  auto now = ReadAdmission::Clock::time_point{} + milliseconds(5000);
  std::vector<uint64_t> quiet;
  for (int i = 0; i < 16; ++i) quiet.push_back(admission.add_reader());  // 16 x 256 KiB: the budget
  for (uint64_t r : quiet) admission.admit(r, 0, now, [] {});
  const uint64_t busy = admission.add_reader();
  bool resumed = false;
  EXPECT_FALSE(admission.admit(busy, 0, now, [&] { resumed = true; }));
  EXPECT_TRUE(admission.admit_waiting(0, now + milliseconds(500)).empty());
  // A second later the quiet reads no longer count.
  auto go = admission.admit_waiting(0, now + milliseconds(1001));
  ASSERT_EQ(go.size(), 1u);
  go[0]();
  EXPECT_TRUE(resumed);
}

TEST(ReadAdmissionTest, WithNothingQueuedOrReservedOneReaderAlwaysGoes) {
  ReadAdmission admission(1, milliseconds(1000));  // a budget smaller than any batch
  const auto now = ReadAdmission::Clock::time_point{} + milliseconds(5000);
  const uint64_t a = admission.add_reader(), b = admission.add_reader();
  EXPECT_TRUE(admission.admit(a, 0, now, [] {}));
  EXPECT_FALSE(admission.admit(b, 0, now, [] {}));
  admission.submitted(a, 100);
  EXPECT_EQ(admission.admit_waiting(100, now).size(), 0u);  // a's batch is still queued
  EXPECT_EQ(admission.admit_waiting(0, now).size(), 1u);    // committed: b goes
}

TEST(ReadAdmissionTest, EachStreamsTransportWindowCountsAgainstTheBudget) {
  ReadAdmission admission(8 * kMiB, milliseconds(1000), /*per_reader_bytes=*/kMiB / 4);
  const auto now = ReadAdmission::Clock::time_point{} + milliseconds(5000);
  std::vector<uint64_t> readers;
  for (int i = 0; i < 16; ++i) readers.push_back(admission.add_reader());  // 4 MiB of windows
  for (int i = 0; i < 100; ++i) admission.submitted(readers[0], kMiB);
  int admitted = 0;
  for (uint64_t r : readers)
    if (admission.admit(r, 0, now, [] {})) ++admitted;
  EXPECT_GE(admitted, 3);
  EXPECT_LE(admitted, 4);  // 4 MiB left for batches
}

TEST(ReadAdmissionTest, ARemovedReaderIsNeitherReservedNorResumed) {
  ReadAdmission admission(kMiB, milliseconds(1000));
  const auto now = ReadAdmission::Clock::time_point{} + milliseconds(5000);
  const uint64_t a = admission.add_reader(), b = admission.add_reader();
  for (int i = 0; i < 50; ++i) admission.submitted(a, kMiB);
  EXPECT_TRUE(admission.admit(a, 0, now, [] {}));
  EXPECT_FALSE(admission.admit(b, 0, now, [] {}));
  admission.remove_reader(b);
  admission.remove_reader(a);
  EXPECT_EQ(admission.reserved_bytes(now), 0u);
  EXPECT_TRUE(admission.admit_waiting(0, now).empty());
}

}  // namespace
}  // namespace castscope::collector
