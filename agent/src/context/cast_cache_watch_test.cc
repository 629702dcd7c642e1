// When the cast-cache watch asks for a step-free sample, on real tensors:
// at a miss, after as many cacheable casts (hits included) as the cache held
// at the last sample, at least the configured minimum.
#include "agent/src/context/cast_cache_watch.h"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <thread>
#include <utility>
#include <vector>

namespace castscope {
namespace {

// A leaf that requires grad and its bf16 copy, kept alive as the cache would.
struct Cached {
  at::Tensor source = at::randn({2, 2}).requires_grad_();
  at::Tensor cast = source.detach().to(at::kBFloat16);
};

TEST(CastCacheWatch, FillWithMissesOnlyIsSampledGeometrically) {
  CastCacheWatch observer;
  observer.set_sample_every_misses(16);
  std::vector<Cached> weights(200);
  std::vector<size_t> due;  // 1-based miss numbers
  for (size_t i = 0; i < weights.size(); ++i) {
    const auto seen = observer.observe(weights[i].source, weights[i].cast);
    EXPECT_EQ(seen.outcome, CacheOutcome::kMiss);
    if (!seen.sample_due) continue;
    due.push_back(i + 1);
    observer.sample();
  }
  EXPECT_EQ(due, (std::vector<size_t>{16, 32, 64, 128}));  // a first forward pass: few scans
}

TEST(CastCacheWatch, HitsCountTowardsTheNextSampleButOnlyAMissTakesIt) {
  CastCacheWatch observer;
  observer.set_sample_every_misses(16);
  std::vector<Cached> weights(4);
  for (auto& w : weights) EXPECT_FALSE(observer.observe(w.source, w.cast).sample_due);
  for (int i = 0; i < 100; ++i) {  // a warm cache serving hits: nothing new to see
    const auto seen = observer.observe(weights[i % 4].source, weights[i % 4].cast);
    EXPECT_EQ(seen.outcome, CacheOutcome::kHit);
    EXPECT_FALSE(seen.sample_due);
  }
  Cached input;
  EXPECT_TRUE(observer.observe(input.source, input.cast).sample_due);  // the miss after 104 casts
  const auto sample = observer.sample();
  EXPECT_EQ(sample.live_casts, 5u);
  EXPECT_EQ(sample.cache_hits, 100u);
}

// An input-gradient loop in one region: every pass casts a new input (a miss)
// and serves the four weights again (hits). Spaced by casts, samples come
// every held/5 passes (held casts, five a pass; at least 16 casts); spaced by
// misses alone, they came at 64, 128, 256 and 512 misses.
TEST(CastCacheWatch, ALeakingLoopIsSampledEveryFewPasses) {
  CastCacheWatch observer;
  observer.set_sample_every_misses(16);
  std::vector<Cached> weights(4);
  std::vector<Cached> inputs;
  inputs.reserve(60);
  std::vector<std::pair<size_t, uint64_t>> samples;  // (pass, live casts)
  size_t pass = 0;
  auto observe = [&](const Cached& c) {  // as dispatch does: the sample right after the cast that made it due
    if (observer.observe(c.source, c.cast).sample_due) samples.emplace_back(pass, observer.sample().live_casts);
  };
  for (pass = 1; pass <= 60; ++pass) {
    inputs.emplace_back();
    observe(inputs.back());
    for (const auto& w : weights) observe(w);
  }
  ASSERT_GE(samples.size(), 6u);
  EXPECT_EQ(samples[0], (std::pair<size_t, uint64_t>{4, 8}));  // 16 casts: passes 1-3 and this input
  for (size_t i = 1; i < samples.size(); ++i) {
    EXPECT_GT(samples[i].second, samples[i - 1].second);
    // The next one after as many casts as the cache held (at least 16), five a pass.
    EXPECT_LE(samples[i].first - samples[i - 1].first, std::max<uint64_t>(16, samples[i - 1].second) / 5 + 1);
  }
  EXPECT_LE(samples[3].first, 20u);  // four samples, three growing intervals, by pass 20
}

TEST(CastCacheWatch, ZeroTakesNoStepFreeSamples) {
  CastCacheWatch observer;
  observer.set_sample_every_misses(0);
  std::vector<Cached> casts(100);
  for (auto& c : casts) EXPECT_FALSE(observer.observe(c.source, c.cast).sample_due);
}

// A hit the thread saw before is answered from its memo, as the entry would
// answer it: a stale hit after the source changed in place, a miss for a new
// cast of the same source, nothing known to another thread (which asks the
// entry through the lock), to another observer or after clear(); every hit
// counted, on whichever path.
TEST(CastCacheWatch, HitsTheThreadSawAreAnsweredAsTheEntryWould) {
  CastCacheWatch observer;
  Cached weight;
  EXPECT_FALSE(observer.knows_cast(weight.source, weight.cast));
  EXPECT_EQ(observer.observe(weight.source, weight.cast).outcome, CacheOutcome::kMiss);
  EXPECT_TRUE(observer.knows_cast(weight.source, weight.cast));
  EXPECT_EQ(observer.observe(weight.source, weight.cast).outcome, CacheOutcome::kHit);
  const int64_t version_at_cast = weight.source._version();
  {
    at::NoGradGuard no_grad;
    weight.source.add_(1);  // an optimizer step: the cached cast is stale now
  }
  const auto stale = observer.observe(weight.source, weight.cast);
  EXPECT_EQ(stale.outcome, CacheOutcome::kStaleHit);
  EXPECT_EQ(stale.cached_version, version_at_cast);
  EXPECT_EQ(stale.source_version, version_at_cast + 1);

  std::thread([&] {
    EXPECT_FALSE(observer.knows_cast(weight.source, weight.cast));
    EXPECT_EQ(observer.observe(weight.source, weight.cast).outcome, CacheOutcome::kStaleHit);  // through the lock
    EXPECT_TRUE(observer.knows_cast(weight.source, weight.cast));
  }).join();
  CastCacheWatch other;
  EXPECT_FALSE(other.knows_cast(weight.source, weight.cast));
  EXPECT_EQ(observer.sample().cache_hits, 3u);

  const at::Tensor recast = weight.source.detach().to(at::kBFloat16);  // after a region exit let the first go
  EXPECT_FALSE(observer.knows_cast(weight.source, recast));
  EXPECT_EQ(observer.observe(weight.source, recast).outcome, CacheOutcome::kMiss);
  EXPECT_EQ(observer.observe(weight.source, recast).outcome, CacheOutcome::kHit);
  observer.clear();
  EXPECT_FALSE(observer.knows_cast(weight.source, recast));
  EXPECT_EQ(observer.observe(weight.source, recast).outcome, CacheOutcome::kMiss);
}

// An op's two cacheable sources (a linear's weight and bias) are both
// answered by the thread's memo whatever addresses the heap gave them: any
// two sources seen one after the other are both known. Among 65 sources
// some two shared a slot of the 64 direct-mapped ones (pigeonhole), and the
// second evicted the first; in sets of two kept in the order seen, neither
// is given up.
TEST(CastCacheWatch, TheMemoKnowsAnyTwoSourcesSeenOneAfterTheOther) {
  CastCacheWatch observer;
  std::vector<Cached> weights(65);
  for (const Cached& w : weights) observer.observe(w.source, w.cast);
  size_t forgotten_pairs = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    for (size_t j = i + 1; j < weights.size(); ++j) {
      observer.observe(weights[i].source, weights[i].cast);
      observer.observe(weights[j].source, weights[j].cast);
      if (!observer.knows_cast(weights[i].source, weights[i].cast) ||
          !observer.knows_cast(weights[j].source, weights[j].cast))
        ++forgotten_pairs;
    }
  }
  EXPECT_EQ(forgotten_pairs, 0u);
}

// A third source in a set gives up the one seen least recently, a hit
// counting as seen: after i, j, i again and then k, i is known whichever of
// them share a set (33 sources: more than the 32 sets, so some do).
TEST(CastCacheWatch, TheMemoGivesUpTheSourceSeenLeastRecently) {
  CastCacheWatch observer;
  std::vector<Cached> weights(33);
  size_t forgotten = 0;
  for (size_t i = 0; i < weights.size(); ++i) {
    for (size_t j = 0; j < weights.size(); ++j) {
      for (size_t k = 0; k < weights.size(); ++k) {
        if (i == j || j == k || i == k) continue;
        observer.observe(weights[i].source, weights[i].cast);
        observer.observe(weights[j].source, weights[j].cast);
        observer.observe(weights[i].source, weights[i].cast);
        observer.observe(weights[k].source, weights[k].cast);
        if (!observer.knows_cast(weights[i].source, weights[i].cast)) ++forgotten;
      }
    }
  }
  EXPECT_EQ(forgotten, 0u);
}

// A thread's memo (in its ThreadBlock) holds a weak reference to each cast it
// saw, and lets go of them when the thread exits: the casts' TensorImpls are
// not kept by threads that are gone. A thread made a memo only at its first
// cacheable cast; one that never saw any has none.
TEST(CastCacheWatch, AThreadsMemoIsFreedWhenTheThreadExits) {
  CastCacheWatch observer;
  Cached weight;
  const auto weak_refs = [&] { return weight.cast.getIntrusivePtr().weak_use_count(); };
  (void)observer.observe(weight.source, weight.cast);  // the entry's weak references, and this thread's memo's
  const size_t held_here = weak_refs();
  std::thread([&] {
    EXPECT_EQ(this_thread_block().cast_memo, nullptr);
    EXPECT_EQ(observer.observe(weight.source, weight.cast).outcome, CacheOutcome::kHit);  // through the lock
    EXPECT_NE(this_thread_block().cast_memo, nullptr);
    EXPECT_EQ(weak_refs(), held_here + 1);  // the thread's memo
    EXPECT_TRUE(observer.knows_cast(weight.source, weight.cast));
  }).join();
  EXPECT_EQ(weak_refs(), held_here);
  EXPECT_TRUE(observer.knows_cast(weight.source, weight.cast));  // this thread's memo is its own
}

// A cast seen by a thread-local destructor that runs after the memo was
// freed (thread exit) is answered through the lock, and makes no new memo.
struct ObservesAtThreadExit {
  static inline CastCacheWatch* observer = nullptr;
  static inline const Cached* weight = nullptr;
  static inline std::atomic<int> hits{0};
  static inline std::atomic<bool> memo_made{false};
  bool armed = false;
  ~ObservesAtThreadExit() {
    if (observer->observe(weight->source, weight->cast).outcome == CacheOutcome::kHit) ++hits;
    if (observer->knows_cast(weight->source, weight->cast)) ++hits;  // must not: no memo now
    memo_made = this_thread_block().cast_memo != nullptr;
  }
};

TEST(CastCacheWatch, ACastSeenAfterTheMemoWasFreedGoesThroughTheLock) {
  CastCacheWatch observer;
  Cached weight;
  (void)observer.observe(weight.source, weight.cast);
  ObservesAtThreadExit::observer = &observer;
  ObservesAtThreadExit::weight = &weight;
  std::thread([&] {
    // Made first, so destroyed after the memo's owner (thread-locals are
    // destroyed in the reverse order of their construction).
    static thread_local ObservesAtThreadExit late;
    late.armed = true;
    EXPECT_EQ(observer.observe(weight.source, weight.cast).outcome, CacheOutcome::kHit);  // makes the memo
    EXPECT_NE(this_thread_block().cast_memo, nullptr);
  }).join();
  EXPECT_EQ(ObservesAtThreadExit::hits.load(), 1);  // the hit, through the lock; knows_cast false
  EXPECT_FALSE(ObservesAtThreadExit::memo_made.load());
  EXPECT_EQ(observer.sample().cache_hits, 2u);
}

// Threads serving the same weights while another samples: every hit is
// counted once, whichever path answered it.
TEST(CastCacheWatch, ConcurrentHitsAreEachCountedOnce) {
  CastCacheWatch observer;
  std::vector<Cached> weights(8);
  for (auto& w : weights) (void)observer.observe(w.source, w.cast);
  constexpr int kThreads = 4;
  constexpr int kHitsEach = 20000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kHitsEach; ++i) {
        const Cached& w = weights[i % weights.size()];
        EXPECT_EQ(observer.observe(w.source, w.cast).outcome, CacheOutcome::kHit);
      }
    });
  for (int i = 0; i < 100; ++i) EXPECT_EQ(observer.sample().live_casts, weights.size());
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(observer.sample().cache_hits, static_cast<uint64_t>(kThreads) * kHitsEach);
}

}  // namespace
}  // namespace castscope
