#include "server/src/batch/arena_block_pool.h"

#include <gtest/gtest.h>

#include "server/src/batch/batch_validation.h"
#include "server/testing/test_batches.h"

namespace castscope::collector {
namespace {

TEST(ArenaBlockPool, AGivenBackBlockServesTheNextBatchOfItsSize) {
  ArenaBlockPool pool(4u << 20);
  const char* first = nullptr;
  {
    ArenaBlockPool::Block block = pool.take(300'000);
    EXPECT_EQ(block.size(), 320u << 10);  // whole 64 KiB granules
    first = block.data();
  }
  EXPECT_EQ(pool.idle_bytes(), 320u << 10);
  ArenaBlockPool::Block again = pool.take(200'000);  // fits, wastes less than half
  EXPECT_EQ(again.data(), first);
  EXPECT_EQ(pool.idle_bytes(), 0u);
}

TEST(ArenaBlockPool, ASmallBatchDoesNotTakeABlockMoreThanTwiceItsSize) {
  ArenaBlockPool pool(4u << 20);
  { ArenaBlockPool::Block big = pool.take(2u << 20); }
  ArenaBlockPool::Block small = pool.take(100'000);
  EXPECT_EQ(small.size(), 128u << 10);
  EXPECT_EQ(pool.idle_bytes(), 2u << 20);  // the big one still waits
}

TEST(ArenaBlockPool, KeepsAtMostItsIdleBoundAndReleasesOnRequest) {
  ArenaBlockPool pool(1u << 20);
  {
    ArenaBlockPool::Block a = pool.take(1u << 20), b = pool.take(1u << 20);
  }
  EXPECT_EQ(pool.idle_bytes(), 1u << 20);  // the second did not fit: freed
  pool.release_idle();
  EXPECT_EQ(pool.idle_bytes(), 0u);
}

TEST(ArenaBlockPool, ABatchCountsItsPooledFirstBlockAndGivesItBack) {
  ArenaBlockPool& pool = ArenaBlockPool::for_batches();
  pool.release_idle();
  const std::string wire = testing::make_batch("run", "agent", 5).SerializeAsString();
  size_t held = 0;
  {
    DecodedBatch decoded;
    ASSERT_TRUE(decode_batch(wire, BatchLimits(), decoded).ok());
    EXPECT_EQ(decoded.batch().agent().run_id(), "run");
    held = decoded.bytes();
    EXPECT_GE(held, 64u << 10);  // the first block (one granule at least) is in the queue budget's count
  }
  EXPECT_EQ(pool.idle_bytes(), held);
  pool.release_idle();
}

}  // namespace
}  // namespace castscope::collector
