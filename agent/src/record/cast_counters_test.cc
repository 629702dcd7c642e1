// Aggregate mode's folding: counter keys, sums, the key limit, and the
// event log's flushes (exporter side and at a step).
#include "agent/src/record/cast_counters.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <thread>
#include <vector>

#include "agent/src/record/event_log.h"
#include "agent/src/record/thread_block.h"

namespace castscope {
namespace {

Record cast(uint32_t op, uint32_t location, uint16_t arg, CacheOutcome cache, uint64_t bytes, uint64_t ts) {
  Record r{};
  r.kind = RecordKind::kCast;
  r.op_id = op;
  r.ts_ns = ts;
  r.thread = 1;
  r.policy = CastPolicy::kLowerPrecisionFp;
  r.device = DeviceKind::kCpu;
  r.cast.location = location;
  r.cast.arg_index = arg;
  r.cast.src = DType::kFloat32;
  r.cast.dst = DType::kBfloat16;
  r.cast.outcome = CastOutcome::kCast;
  r.cast.maker = CastMaker::kAutocast;
  r.cast.role = Role::kWeight;
  r.cast.cache = cache;
  r.cast.bytes = bytes;
  r.cast.shape[0] = static_cast<int64_t>(ts);  // not part of the key
  r.cast.op_seq = ts;                           // nor this
  return r;
}

Record op(uint32_t op_id, uint32_t location, bool ok, uint64_t cpu_ns) {
  Record r{};
  r.kind = RecordKind::kOp;
  r.op_id = op_id;
  r.thread = 1;
  r.policy = CastPolicy::kLowerPrecisionFp;  // as cast()'s: the op's casts
  r.device = DeviceKind::kCpu;
  r.op.location = location;
  r.op.ok = ok;
  r.op.cpu_duration_ns = cpu_ns;
  r.op.output = DType::kBfloat16;
  return r;
}

TEST(CounterTable, FoldsEventsOfOneKeyAndKeepsOtherKeysApart) {
  CounterTable table(64);
  for (uint64_t i = 0; i < 10; ++i) ASSERT_TRUE(table.fold(cast(1, 7, 0, CacheOutcome::kMiss, 100, 1000 + i), 3));
  ASSERT_TRUE(table.fold(cast(1, 7, 1, CacheOutcome::kMiss, 5, 2000), 4));     // another argument
  ASSERT_TRUE(table.fold(cast(1, 7, 0, CacheOutcome::kHit, 100, 2001), 4));    // another cache outcome
  ASSERT_TRUE(table.fold(cast(1, 8, 0, CacheOutcome::kMiss, 100, 2002), 4));   // another line
  ASSERT_TRUE(table.fold(op(1, 7, true, 40), 4));
  ASSERT_TRUE(table.fold(op(1, 7, false, 60), 4));
  std::vector<CountFields> taken;
  table.take(taken);
  ASSERT_EQ(taken.size(), 5u);
  std::map<std::tuple<RecordKind, uint32_t, uint16_t, CacheOutcome>, CountFields> by_key;
  for (const auto& c : taken) by_key[{c.key.kind, c.key.location, c.key.arg_index, c.key.cache}] = c;
  const CountFields& misses = by_key.at({RecordKind::kCast, 7, 0, CacheOutcome::kMiss});
  EXPECT_EQ(misses.count, 10u);
  EXPECT_EQ(misses.sum, 1000u);
  EXPECT_EQ(misses.first_ts_ns, 1000u);
  EXPECT_EQ(misses.last_ts_ns, 1009u);
  EXPECT_EQ(misses.iteration, 3u);  // the steps seen at the first event
  EXPECT_EQ(by_key.at({RecordKind::kCast, 7, 1, CacheOutcome::kMiss}).count, 1u);
  EXPECT_EQ(by_key.at({RecordKind::kCast, 7, 0, CacheOutcome::kHit}).count, 1u);
  const CountFields& ops = by_key.at({RecordKind::kOp, 7, 0, CacheOutcome::kUnspecified});
  EXPECT_EQ(ops.count, 2u);
  EXPECT_EQ(ops.sum, 100u);   // CPU ns
  EXPECT_EQ(ops.extra, 1u);   // one raised
  taken.clear();
  table.take(taken);
  EXPECT_TRUE(taken.empty());  // a take empties the table
}

TEST(CounterTable, StaleHitsKeepTheLargestVersionGap) {
  CounterTable table(16);
  for (uint32_t gap : {2u, 5u, 3u}) {
    Record r = cast(1, 1, 0, CacheOutcome::kStaleHit, 8, 1);
    r.cast.source_version = 10 + gap;
    r.cast.cached_version = 10;
    ASSERT_TRUE(table.fold(r, 0));
  }
  std::vector<CountFields> taken;
  table.take(taken);
  ASSERT_EQ(taken.size(), 1u);
  EXPECT_EQ(taken[0].max_version_gap, 5);
}

TEST(CounterTable, RefusesKeysPastTheLimitButCountsKnownOnes) {
  CounterTable table(16);
  for (uint32_t line = 0; line < 16; ++line) ASSERT_TRUE(table.fold(cast(1, line, 0, CacheOutcome::kMiss, 1, 1), 0));
  EXPECT_FALSE(table.fold(cast(1, 99, 0, CacheOutcome::kMiss, 1, 1), 0));
  EXPECT_TRUE(table.fold(cast(1, 3, 0, CacheOutcome::kMiss, 1, 1), 0));  // a known key still counts
  EXPECT_GE(table.capacity() * 3, table.max_keys() * 4);
  std::vector<CountFields> taken;
  table.take(taken);
  EXPECT_EQ(taken.size(), 16u);
  EXPECT_TRUE(table.fold(cast(1, 99, 0, CacheOutcome::kMiss, 1, 1), 0));  // room again after a flush
}

TEST(CounterTable, AnOpFoldsWithItsCastsAsOneByOneAndRefusesOnlyKeysPastTheLimit) {
  const Record casts[] = {cast(1, 7, 0, CacheOutcome::kMiss, 100, 10), cast(1, 7, 1, CacheOutcome::kHit, 50, 10)};
  CounterTable together(3), one_by_one(3);
  for (int i = 0; i < 4; ++i) {
    ASSERT_EQ(together.fold_op(casts, 2, op(1, 7, i != 2, 40), 5), 0u);
    for (const Record& r : casts) ASSERT_TRUE(one_by_one.fold(r, 5));
    ASSERT_TRUE(one_by_one.fold(op(1, 7, i != 2, 40), 5));
  }
  std::vector<CountFields> a, b;
  together.take(a);
  one_by_one.take(b);
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 3u);
  auto sorted = [](std::vector<CountFields>& v) {
    std::sort(v.begin(), v.end(), [](const CountFields& x, const CountFields& y) {
      return std::memcmp(&x.key, &y.key, sizeof(CounterKey)) < 0;
    });
  };
  sorted(a);
  sorted(b);
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(std::memcmp(&a[i], &b[i], sizeof(CountFields)), 0) << i;
  // A table with room for two keys: the op's own key is the one refused, the casts still count.
  CounterTable small(2);
  EXPECT_EQ(small.fold_op(casts, 2, op(1, 7, true, 40), 0), 1u);
  std::vector<CountFields> taken;
  small.take(taken);
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].key.kind, RecordKind::kCast);
  EXPECT_EQ(taken[1].key.kind, RecordKind::kCast);
}

// A cast record's fields as the kernel hands them to fold_op_casts.
CastCount count_of(const Record& r) {
  CastCount c{};
  c.arg_index = r.cast.arg_index;
  c.src = r.cast.src;
  c.dst = r.cast.dst;
  c.outcome = r.cast.outcome;
  c.role = r.cast.role;
  c.cache = r.cast.cache;
  c.round_trip = r.cast.round_trip;
  c.bytes = r.cast.bytes;
  c.source_version = r.cast.source_version;
  c.cached_version = r.cast.cached_version;
  return c;
}

TEST(CounterTable, ACastCountsKeyIsItsRecordsKey) {
  Record o = op(1, 7, true, 5);
  o.op.mode = ExecutionMode::kScript;
  o.op.phase = Phase::kBackward;
  o.op.autocast_enabled = 3;  // an op's fields a cast's key leaves at zero
  o.op.probe = ProbeReason::kDtypes;
  o.op.autocast_dtype = DType::kFloat16;
  Record r = cast(1, 7, 2, CacheOutcome::kStaleHit, 8, 1);
  r.cast.mode = o.op.mode;
  r.cast.phase = o.op.phase;
  r.cast.outcome = CastOutcome::kAlreadyTarget;
  r.cast.role = Role::kActivation;
  r.cast.round_trip = true;
  const CounterKey from_record = counter_key(r), from_count = counter_key(counter_key(o), count_of(r));
  EXPECT_EQ(std::memcmp(&from_record, &from_count, sizeof(CounterKey)), 0);
}

std::vector<CountFields> sorted_take(CounterTable& table) {
  std::vector<CountFields> v;
  table.take(v);
  std::sort(v.begin(), v.end(), [](const CountFields& x, const CountFields& y) {
    return std::memcmp(&x.key, &y.key, sizeof(CounterKey)) < 0;
  });
  return v;
}

void expect_same_counters(CounterTable& counted, CounterTable& folded) {
  const std::vector<CountFields> a = sorted_take(counted), b = sorted_take(folded);
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_EQ(std::memcmp(&a[i], &b[i], sizeof(CountFields)), 0) << i;
}

// fold_op_casts remembers an op group's slots and adds a repeat straight to
// them: every counter must come out as folding the same op's records one by
// one makes it, across groups that differ in one cast's key part, flushes
// (which empty those slots), stale hits, round trips, and ops with more casts
// than a group holds.
TEST(CounterTable, AnOpsCastCountsCountAsItsRecordsFoldedOneByOne) {
  CounterTable counted(64), folded(64);
  auto both = [&](const std::vector<Record>& casts, const Record& o, uint64_t iteration) {
    std::vector<CastCount> counts;
    for (const Record& r : casts) counts.push_back(count_of(r));
    ASSERT_EQ(counted.fold_op_casts(o, counts.data(), counts.size(), iteration), 0u);
    for (const Record& r : casts) ASSERT_TRUE(folded.fold(r, iteration));
    ASSERT_TRUE(folded.fold(o, iteration));
  };
  for (uint64_t step = 0; step < 3; ++step) {
    for (uint64_t i = 0; i < 20; ++i) {
      const uint64_t ts = 100 * step + i;
      Record weight = cast(1, 7, 1, i == 0 ? CacheOutcome::kMiss : CacheOutcome::kHit, 64, ts);
      if (i % 5 == 4) {  // a stale hit: the group differs in the weight's cache outcome
        weight.cast.cache = CacheOutcome::kStaleHit;
        weight.cast.source_version = static_cast<uint32_t>(i);
        weight.cast.cached_version = 1;
      }
      Record input = cast(1, 7, 0, CacheOutcome::kNotCacheable, 32 + i, ts);
      input.cast.role = i % 6 == 5 ? Role::kActivation : Role::kInput;  // or in the input's role
      input.cast.round_trip = i % 3 == 0;
      input.cast.dst = i % 7 == 6 ? DType::kFloat16 : DType::kBfloat16;  // or in its dtype
      Record o = op(1, 7, i != 7, 10 + i);
      o.ts_ns = ts;
      both({input, weight}, o, step);
      Record other = op(2, 9, true, 5);  // another op, with one cast
      other.ts_ns = ts;
      both({cast(2, 9, 0, CacheOutcome::kNotCacheable, 8, ts)}, other, step);
      Record lone = op(3, 9, true, 1);  // an op with no casts
      lone.ts_ns = ts;
      both({}, lone, step);
      std::vector<Record> many;  // more casts than a group holds: key by key every time
      for (uint16_t arg = 0; arg < 6; ++arg) many.push_back(cast(4, 9, arg, CacheOutcome::kMiss, arg, ts));
      Record wide = op(4, 9, true, 2);
      wide.ts_ns = ts;
      both(many, wide, step);
    }
    expect_same_counters(counted, folded);  // a flush: the next step starts from empty slots
  }
}

TEST(CounterTable, AClearForgetsTheRememberedGroups) {
  const CastCount counts[] = {count_of(cast(1, 7, 0, CacheOutcome::kMiss, 4, 1))};
  CounterTable table(16);
  Record o = op(1, 7, true, 1);
  for (uint64_t ts : {10, 11}) {
    o.ts_ns = ts;
    ASSERT_EQ(table.fold_op_casts(o, counts, 1, 0), 0u);
  }
  table.clear();
  o.ts_ns = 20;
  ASSERT_EQ(table.fold_op_casts(o, counts, 1, 3), 0u);  // remembered before the clear: its slots are empty now
  const std::vector<CountFields> taken = sorted_take(table);
  ASSERT_EQ(taken.size(), 2u);
  for (const CountFields& c : taken) {
    EXPECT_EQ(c.count, 1u);
    EXPECT_EQ(c.first_ts_ns, 20u);
    EXPECT_EQ(c.iteration, 3u);
  }
}

// The cast count is part of a group's key: an op with no casts and the same
// op with one cast whose key part is all zero are two groups.
TEST(CounterTable, AnOpsCastCountTellsItsGroupsApart) {
  CounterTable counted(16), folded(16);
  const CastCount zero{};
  Record zero_cast = cast(1, 7, 0, CacheOutcome::kUnspecified, 0, 0);
  zero_cast.cast.src = zero_cast.cast.dst = DType::kUnspecified;
  zero_cast.cast.outcome = CastOutcome::kUnspecified;
  zero_cast.cast.role = Role::kUnspecified;
  const Record o = op(1, 7, true, 1);
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(counted.fold_op_casts(o, nullptr, 0, 0), 0u);
    ASSERT_EQ(counted.fold_op_casts(o, &zero, 1, 0), 0u);
    ASSERT_TRUE(folded.fold(o, 0));
    ASSERT_TRUE(folded.fold(zero_cast, 0));
    ASSERT_TRUE(folded.fold(o, 0));
  }
  expect_same_counters(counted, folded);
}

TEST(CounterTable, AGroupWithAKeyPastTheLimitIsNotRememberedAndKeepsCountingItsDrops) {
  const Record casts[] = {cast(1, 7, 0, CacheOutcome::kMiss, 1, 1), cast(1, 7, 1, CacheOutcome::kMiss, 1, 1)};
  const CastCount counts[] = {count_of(casts[0]), count_of(casts[1])};
  CounterTable small(2);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(small.fold_op_casts(op(1, 7, true, 1), counts, 2, 0), 1u) << i;
  const std::vector<CountFields> taken = sorted_take(small);
  ASSERT_EQ(taken.size(), 2u);
  EXPECT_EQ(taken[0].count, 3u);
  EXPECT_EQ(taken[1].count, 3u);
  EXPECT_EQ(taken[0].key.kind, RecordKind::kCast);  // the op's own key, made last, is the one refused
}

TEST(EventLogAggregate, AnOpCountedAfterASwitchToFullEventsIsDropped) {
  EventLog log;
  log.configure_aggregate(true, 16);
  log.begin_session();
  log.configure_aggregate(false, 16);
  const CastCount counts[] = {count_of(cast(1, 1, 0, CacheOutcome::kMiss, 4, 1))};
  log.count_op(op(1, 1, true, 40), counts, 1, this_thread_block());
  EXPECT_EQ(log.drain([](const Record&) {}), 0u);
  EXPECT_EQ(log.drain_counters([](const Record&) {}), 0u);
  EXPECT_EQ(log.stats().dropped, 2u);
}

// An op's records (record_op) and its casts as CastCounts (count_op, the
// kernel's steady state) fold alike: nothing in the ring, keys past the limit dropped.
TEST(EventLogAggregate, AnOpsRecordsOrCastCountsFoldAndKeysPastTheLimitAreDropped) {
  for (const bool as_counts : {false, true}) {
    SCOPED_TRACE(as_counts ? "count_op" : "record_op");
    EventLog log;
    log.configure_aggregate(true, 16);
    log.begin_session();
    for (uint32_t line = 0; line < 10; ++line) {
      const Record casts[] = {cast(1, line, 0, CacheOutcome::kMiss, 4, 1)};
      const CastCount counts[] = {count_of(casts[0])};
      if (as_counts) {
        log.count_op(op(1, line, true, 40), counts, 1, this_thread_block());
      } else {
        log.record_op(casts, 1, op(1, line, true, 40), this_thread_block());
      }
    }
    EXPECT_EQ(log.drain([](const Record&) {}), 0u);  // nothing in the ring
    uint64_t casts = 0, bytes = 0, ops = 0;
    log.drain_counters([&](const Record& r) {
      if (r.kind == RecordKind::kCastCounts) casts += r.counts.count, bytes += r.counts.sum;
      if (r.kind == RecordKind::kOpCounts) ops += r.counts.count;
    });
    EXPECT_EQ(casts, 8u);
    EXPECT_EQ(bytes, 32u);
    EXPECT_EQ(ops, 8u);
    EXPECT_EQ(log.stats().dropped, 4u);  // lines 8 and 9: their casts' and ops' keys
  }
}

TEST(EventLogAggregate, ACacheSampleAmongAnOpsRecordsGoesToTheRingAsItIs) {
  EventLog log;
  log.configure_aggregate(true, 16);
  log.begin_session();
  Record sample = log.new_record(RecordKind::kCacheSample);
  sample.sample.live_casts = 7;
  const Record before[] = {cast(1, 1, 0, CacheOutcome::kMiss, 4, 1), sample, cast(1, 1, 1, CacheOutcome::kMiss, 4, 1)};
  log.record_op(before, 3, op(1, 1, true, 40), this_thread_block());
  std::vector<Record> ring;
  log.drain([&](const Record& r) { ring.push_back(r); });
  ASSERT_EQ(ring.size(), 1u);
  EXPECT_EQ(ring[0].kind, RecordKind::kCacheSample);
  EXPECT_EQ(ring[0].sample.live_casts, 7u);
  EXPECT_EQ(log.drain_counters([](const Record&) {}), 3u);  // two casts' keys and the op's
  EXPECT_EQ(log.stats().dropped, 0u);
}

TEST(EventLogAggregate, CastsAndOpsFoldInsteadOfEnteringTheRingAndPastTheLimitAreDropped) {
  EventLog log;
  log.configure_aggregate(true, 16);
  log.begin_session();
  for (int i = 0; i < 100; ++i) log.record(cast(1, 1, 0, CacheOutcome::kMiss, 4, 10 + i));
  for (uint32_t line = 100; line < 120; ++line) log.record(cast(1, line, 0, CacheOutcome::kMiss, 4, 1));
  Record sample = log.new_record(RecordKind::kCacheSample);
  log.record(sample);  // not a cast or op: through the ring as before
  std::vector<Record> ring;
  log.drain([&](const Record& r) { ring.push_back(r); });
  ASSERT_EQ(ring.size(), 1u);
  EXPECT_EQ(ring[0].kind, RecordKind::kCacheSample);
  std::vector<Record> counts;
  log.drain_counters([&](const Record& r) { counts.push_back(r); });
  ASSERT_EQ(counts.size(), 16u);  // line 1, then 15 of the 20 new lines
  uint64_t folded = 0;
  for (const Record& r : counts) {
    EXPECT_EQ(r.kind, RecordKind::kCastCounts);
    EXPECT_EQ(r.ts_ns, r.counts.first_ts_ns);
    folded += r.counts.count;
  }
  EXPECT_EQ(folded, 115u);
  EXPECT_EQ(log.stats().dropped, 5u);  // the keys past the limit, never silently lost
  EXPECT_LT(counts[0].seq, counts[1].seq);
}

TEST(EventLogAggregate, AStepFlushPutsTheThreadsCountersIntoItsRingInOrder) {
  EventLog log;
  log.configure_aggregate(true, 64);
  log.begin_session();
  std::thread worker([&] {
    for (uint64_t step = 0; step < 3; ++step) {
      log.set_iteration(step);
      for (uint64_t i = 0; i <= step; ++i) log.record(cast(1, 1, 0, CacheOutcome::kMiss, 4, 1));
      log.flush_thread_counters();
      log.record(log.new_record(RecordKind::kCacheSample));
    }
  });
  worker.join();
  std::vector<Record> ring;
  log.drain([&](const Record& r) { ring.push_back(r); });
  ASSERT_EQ(ring.size(), 6u);
  for (uint64_t step = 0; step < 3; ++step) {
    EXPECT_EQ(ring[2 * step].kind, RecordKind::kCastCounts);
    EXPECT_EQ(ring[2 * step].counts.count, step + 1);
    EXPECT_EQ(ring[2 * step].counts.iteration, step);
    EXPECT_EQ(ring[2 * step + 1].kind, RecordKind::kCacheSample);
  }
  size_t left = log.drain_counters([](const Record&) {});
  EXPECT_EQ(left, 0u);
}

TEST(EventLogAggregate, OffByDefaultAndANewSessionForgetsCounters) {
  EventLog log;
  log.record(cast(1, 1, 0, CacheOutcome::kMiss, 4, 1));
  size_t ring = log.drain([](const Record&) {});
  EXPECT_EQ(ring, 1u);
  log.configure_aggregate(true, 16);  // a slot that existed before aggregate mode gets its table
  log.record(cast(1, 1, 0, CacheOutcome::kMiss, 4, 1));
  log.begin_session();
  EXPECT_EQ(log.drain_counters([](const Record&) {}), 0u);
}

}  // namespace
}  // namespace castscope
