#include "agent/src/record/event_log.h"

#include <gtest/gtest.h>

#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "agent/src/record/thread_block.h"

namespace castscope {
namespace {

Record make(uint64_t seq) {
  Record r{};
  r.seq = seq;
  r.kind = RecordKind::kOp;
  return r;
}

TEST(EventLog, InternsOpsOnce) {
  EventLog log;
  const uint32_t a = log.intern_op("test::a");
  EXPECT_EQ(log.intern_op("test::a"), a);
  EXPECT_NE(log.intern_op("test::b"), a);
  log.set_arg_names(a, {"self", "other"});
  EXPECT_EQ(log.op_meta(a).arg_names.size(), 2u);
}

TEST(EventLog, ManyOpsKeepDenseIdsInOrderAndTheirNames) {
  EventLog log;
  std::vector<uint32_t> ids;
  for (int i = 0; i < 5000; ++i) ids.push_back(log.intern_op("benchlib::op" + std::to_string(i)));
  for (int i = 0; i < 5000; ++i) {
    EXPECT_EQ(ids[i], static_cast<uint32_t>(i));  // the index of its metadata, as before the name index
    EXPECT_EQ(log.intern_op("benchlib::op" + std::to_string(i)), ids[i]);
    EXPECT_EQ(log.op_meta(ids[i]).name, "benchlib::op" + std::to_string(i));
  }
  EXPECT_EQ(log.op_meta(5000).name, "<unknown op>");
}

TEST(EventLog, ThreadsGetTheirOwnRingsAndEveryRecordIsDrained) {
  EventLog log;
  log.drain([](const Record&) {});
  const EventLogStats before = log.stats();
  constexpr int kThreads = 4, kPerThread = 1000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&] {
      for (int i = 0; i < kPerThread; ++i) log.record(make(log.next_seq()));
    });
  for (auto& t : threads) t.join();
  std::set<uint64_t> seqs;
  log.drain([&](const Record& r) { seqs.insert(r.seq); });
  const EventLogStats after = log.stats();
  EXPECT_EQ(seqs.size() + (after.dropped - before.dropped), static_cast<size_t>(kThreads * kPerThread));
  EXPECT_EQ(after.recorded - before.recorded, seqs.size());
}

TEST(EventLog, AnOpsRecordsEnterTheRingCastsFirst) {
  EventLog log;
  log.begin_session();
  Record casts[] = {make(2), make(3)};
  for (Record& c : casts) c.kind = RecordKind::kCast;
  log.record_op(casts, 2, make(1), this_thread_block());
  std::vector<uint64_t> seqs;
  std::vector<RecordKind> kinds;
  log.drain([&](const Record& r) {
    seqs.push_back(r.seq);
    kinds.push_back(r.kind);
  });
  EXPECT_EQ(seqs, (std::vector<uint64_t>{2, 3, 1}));
  EXPECT_EQ(kinds, (std::vector<RecordKind>{RecordKind::kCast, RecordKind::kCast, RecordKind::kOp}));
}

TEST(EventLog, ASessionCountsFromZeroAndDiscardsLeftovers) {
  EventLog log;
  for (int i = 0; i < 10; ++i) log.record(log.new_record(RecordKind::kOp));
  log.drain([](const Record&) {});
  log.count_lost(3);
  log.count_internal_error();
  log.record(log.new_record(RecordKind::kOp));  // left over: nobody drained it
  ASSERT_GT(log.stats().recorded, 0u);
  ASSERT_GT(log.stats().dropped, 0u);

  log.begin_session();
  EXPECT_EQ(log.stats().recorded, 0u);
  EXPECT_EQ(log.stats().dropped, 0u);
  EXPECT_EQ(log.stats().internal_errors, 0u);
  log.record(log.new_record(RecordKind::kOp));
  std::vector<uint64_t> seqs;
  log.drain([&](const Record& r) { seqs.push_back(r.seq); });
  EXPECT_EQ(seqs, std::vector<uint64_t>{1});
  EXPECT_EQ(log.stats().recorded, 1u);
}

TEST(EventLog, AThreadMovingToAnotherLogGivesItsRingBack) {
  auto a = std::make_unique<EventLog>();
  a->configure(64, 1);  // one ring: a second thread gets one only if the first gave it back
  EventLog b;
  b.configure(64, 1);
  a->record(make(1));
  b.record(make(2));  // this thread moves to b, its ring in a goes back to a's pool
  size_t adopted = 0;
  std::thread([&] { a->record(make(3)); }).join();
  a->drain([&](const Record& r) { adopted += r.seq == 3 ? 1 : 0; });
  EXPECT_EQ(adopted, 1u);
  EXPECT_EQ(a->stats().dropped, 0u);

  a.reset();  // this thread still holds a ring in b; a is gone
  EventLog c;
  c.configure(64, 1);
  c.record(make(4));  // gives b its ring back, takes one in c
  size_t in_c = 0;
  c.drain([&](const Record& r) { in_c += r.seq == 4 ? 1 : 0; });
  EXPECT_EQ(in_c, 1u);
  std::thread([&] { b.record(make(5)); }).join();  // b's only ring is free again
  EXPECT_EQ(b.stats().dropped, 0u);
}

TEST(EventLog, AnExitingThreadGivesItsRingBack) {
  EventLog log;
  log.configure(64, 1);
  std::thread([&] { log.record(make(1)); }).join();
  std::thread([&] { log.record(make(2)); }).join();
  size_t drained = log.drain([](const Record&) {});
  EXPECT_EQ(drained, 2u);
  EXPECT_EQ(log.stats().dropped, 0u);
}

}  // namespace
}  // namespace castscope
