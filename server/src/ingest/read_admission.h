// Which client streams may read their next batch, so that the batches queued
// for the store plus those being read stay within the queue budget however
// many streams send at once.
//
// Why reads, not submits: a stream's next batch is in memory as soon as its
// read completes, so a queue that only pushes back once it is over budget
// still takes one more batch from every stream with a read outstanding (50
// busy streams: 50 batches past the budget). Here a stream asks before each
// read; an admitted read reserves the average batch size until its batch
// arrives. Reservations older than `reservation_life` stop counting: a stream
// that went quiet (a forwarder between batches) must not hold the budget
// forever; if it speaks again its one batch is the only overshoot.
// Each stream also costs its transport's receive window (`per_reader_bytes`),
// which counts against the same budget, so the budget bounds what ingest
// holds whatever the number of streams. Progress: with nothing queued and
// nothing reserved, one reader is always admitted. Pure logic, time passed
// in; CollectorCore calls it under its lock.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <functional>
#include <unordered_map>
#include <vector>

namespace castscope::collector {

class ReadAdmission {
 public:
  using Clock = std::chrono::steady_clock;

  ReadAdmission(size_t budget_bytes, Clock::duration reservation_life, size_t per_reader_bytes = 0)
      : budget_(budget_bytes), life_(reservation_life), per_reader_(per_reader_bytes) {}

  uint64_t add_reader();
  // The stream is gone: its reservation and any waiting resume are dropped.
  void remove_reader(uint64_t reader);
  // True: read now. False: `resume` is returned by a later admit_waiting()
  // once there is room (readers are admitted in the order they asked).
  bool admit(uint64_t reader, size_t queued_bytes, Clock::time_point now, std::function<void()> resume);
  // The reader's batch arrived (`bytes` of memory): its reservation ends.
  void submitted(uint64_t reader, size_t bytes);
  // Waiting readers admitted now; run their resumes without the lock held.
  std::vector<std::function<void()>> admit_waiting(size_t queued_bytes, Clock::time_point now);
  bool has_waiting() const { return !waiting_.empty(); }
  size_t reserved_bytes(Clock::time_point now) const;
  size_t average_batch_bytes() const { return static_cast<size_t>(average_); }

 private:
  struct AdmittedStream {  // an ingest stream's reservation
    size_t reserved = 0;
    Clock::time_point since{};
  };
  bool room(size_t queued_bytes, Clock::time_point now) const;
  void reserve(AdmittedStream& reader, Clock::time_point now);

  const size_t budget_;
  const Clock::duration life_;
  const size_t per_reader_;
  uint64_t next_id_ = 1;
  std::unordered_map<uint64_t, AdmittedStream> readers_;
  std::deque<std::pair<uint64_t, std::function<void()>>> waiting_;
  double average_ = 256 << 10;  // batch memory, moving average; a first guess until batches come
};

}  // namespace castscope::collector
