#include "agent/src/record/event_log.h"

#include <gtest/gtest.h>

#include <set>
#include <thread>

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

}  // namespace
}  // namespace castscope
