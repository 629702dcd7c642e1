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
  for (uint64_t i = 1; i <= kItems; ++i) ring.try_push(i);
  done.store(true);
  reader.join();
  EXPECT_TRUE(ordered);
  EXPECT_EQ(received + ring.take_dropped(), kItems);
}

}  // namespace
}  // namespace castscope
