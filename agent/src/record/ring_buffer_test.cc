#include "agent/src/record/ring_buffer.h"

#include <gtest/gtest.h>

#include <thread>
#include <vector>

namespace castscope {
namespace {

TEST(RingBuffer, DropsWhenFullAndCounts) {
  RingBuffer<int> ring(4);
  for (int i = 0; i < 6; ++i) ring.try_push(i);
  std::vector<int> seen;
  EXPECT_EQ(ring.drain([&](int v) { seen.push_back(v); }), 4u);
  EXPECT_EQ(seen, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(ring.take_dropped(), 2u);
  EXPECT_EQ(ring.take_dropped(), 0u);
  EXPECT_TRUE(ring.empty());
}

TEST(RingBuffer, AWriterThatSawItFullPushesAgainOnceTheReaderDrained) {
  // The writer keeps the tail it last read: it must read it again, not go on
  // believing the ring full.
  RingBuffer<int> ring(4);
  for (int i = 0; i < 4; ++i) EXPECT_TRUE(ring.try_push(i));
  EXPECT_FALSE(ring.try_push(4));
  EXPECT_EQ(ring.drain([](int) {}), 4u);
  for (int i = 5; i < 9; ++i) EXPECT_TRUE(ring.try_push(i));
  EXPECT_FALSE(ring.try_push(9));
  std::vector<int> seen;
  EXPECT_EQ(ring.drain([&](int v) { seen.push_back(v); }), 4u);
  EXPECT_EQ(seen, (std::vector<int>{5, 6, 7, 8}));
  EXPECT_EQ(ring.take_dropped(), 2u);
}

TEST(RingBuffer, ConcurrentWriterAndReaderLoseNothingButDrops) {
  RingBuffer<uint64_t> ring(1024);
  constexpr uint64_t kItems = 200000;
  std::atomic<bool> done{false};
  uint64_t received = 0, last = 0;
  bool ordered = true;
  std::thread reader([&] {
    auto take = [&](uint64_t v) {
      ordered = ordered && v > last;
      last = v;
      ++received;
    };
    while (!done.load()) ring.drain(take);
    ring.drain(take);
  });
  uint64_t pushed = 0;
  for (uint64_t i = 1; i <= kItems; ++i) pushed += ring.try_push(i) ? 1 : 0;
  done.store(true);
  reader.join();
  EXPECT_TRUE(ordered);
  EXPECT_EQ(received, pushed);
  EXPECT_EQ(received + ring.take_dropped(), kItems);
}

}  // namespace
}  // namespace castscope
