// The in-memory event log: interned op metadata plus per-thread rings.
//
// Concurrency design:
// - Hot path (`record`): the calling thread writes only its own ring
//   (RingBuffer's single writer). Its first event takes `rings_mutex_` once to
//   adopt a ring; after that no lock and no allocation.
// - Sequence numbers come from one relaxed fetch_add: they only need to be
//   unique and increasing per thread, not a global order of memory effects.
// - The exporter (`drain`) takes `drain_mutex_`, so exactly one reader per
//   ring exists at any time, then `rings_mutex_` briefly to snapshot the list.
// - Op metadata is appended at registration time under `ops_mutex_` and read
//   by the exporter under the same mutex; the hot path only carries the id.
// - Rings live as long as their log: a thread that exits returns its ring to
//   the pool, and the next new thread adopts it. This bounds memory by
//   max_rings * ring_records * sizeof(Record).
// - Aggregate mode (cast_counters.h): cast and op records fold into a
//   counter table beside the thread's ring instead of entering it; the
//   exporter takes the tables (`drain_counters`) and the owner flushes its
//   own into its ring at an optimizer step (`flush_thread_counters`). A table
//   is made with its slot (or for every slot at `configure_aggregate`, under
//   `rings_mutex_`) and published through an atomic pointer.
// - A thread keeps one ring at a time, tagged with its log's id. The agent has
//   one log for the whole process (RecordingState, never destroyed); a test may make
//   logs of its own one after the other, and a thread that records into a new
//   log gives back its ring in the old one first, if that log still lives.
#pragma once

#include <time.h>

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "agent/src/record/cast_counters.h"
#include "agent/src/record/cast_record.h"
#include "agent/src/record/ring_buffer.h"

namespace castscope {

struct ThreadBlock;

struct OpMeta {
  std::string name;                    // "aten::norm.Scalar"
  std::vector<std::string> arg_names;  // filled on the op's first call
};

// The clock of every record's ts_ns: CLOCK_MONOTONIC, in ns (what
// std::chrono::steady_clock reads on Linux). Read through libc directly: an op
// reads it twice, and libstdc++'s steady_clock::now() is one more function in
// another library whose code the op then fetches (docs/performance.md, "ninth pass").
inline uint64_t now_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000ull + static_cast<uint64_t>(ts.tv_nsec);
}

// 2^24 records of 128 bytes: 2 GiB per thread, far past any sane setting.
inline constexpr size_t kMaxRingRecords = size_t{1} << 24;

struct EventLogStats {
  uint64_t recorded = 0;  // drained so far
  uint64_t dropped = 0;
  uint64_t internal_errors = 0;
  uint64_t gpu_records_dropped = 0;  // CUPTI activity records never delivered (agent/src/gpu)
  // Module and function overlay entries skipped, each with why (at most
  // kMaxOverlayErrors messages; the last one then counts the rest).
  std::vector<std::string> overlay_errors;
};

inline constexpr size_t kMaxOverlayErrors = 32;

class EventLog {
 public:
  EventLog();
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Before any record; later calls only affect rings not yet created.
  void configure(size_t ring_records, size_t max_rings);

  // Aggregate mode on or off, and its key limit per thread; at attach, before
  // any record of the session.
  void configure_aggregate(bool on, size_t max_keys);
  bool aggregating() const { return aggregate_.load(std::memory_order_relaxed); }
  // Optimizer steps seen: what a new counter remembers as its iteration.
  void set_iteration(uint64_t iteration) { iteration_.store(iteration, std::memory_order_relaxed); }

  uint32_t intern_op(const std::string& name);
  void set_arg_names(uint32_t op_id, std::vector<std::string> names);
  // Copy of an op's metadata; exporter side.
  OpMeta op_meta(uint32_t op_id) const;

  uint64_t next_seq() { return next_seq_.fetch_add(1, std::memory_order_relaxed); }
  // `n` consecutive sequence numbers with one fetch_add; returns the first.
  // For records the caller will make (an op and its casts): one unused is a
  // gap in the seqs, which only promise to be unique and to increase per thread.
  uint64_t reserve_seqs(uint64_t n) { return next_seq_.fetch_add(n, std::memory_order_relaxed); }
  // A record of `kind` with its header filled in: sequence number, timestamp
  // and thread (the caller's, unless given). The one place headers are made.
  Record new_record(RecordKind kind) { return new_record(kind, thread_id()); }
  Record new_record(RecordKind kind, uint32_t thread) { return new_record(kind, thread, next_seq()); }
  // With a seq taken earlier from next_seq() (one that GPU launches carry).
  Record new_record(RecordKind kind, uint32_t thread, uint64_t seq) { return new_record(kind, thread, seq, now_ns()); }
  // With a time read earlier (a cast carries its op's start: one clock read per op, not per record).
  Record new_record(RecordKind kind, uint32_t thread, uint64_t seq, uint64_t ts_ns) {
    Record r{};
    set_header(r, kind, thread, seq, ts_ns);
    return r;
  }
  // The same header written into a zeroed record the caller holds (an op
  // record built in place: no second zeroing and copy of its 128 bytes).
  static void set_header(Record& r, RecordKind kind, uint32_t thread, uint64_t seq, uint64_t ts_ns) {
    r.seq = seq;
    r.ts_ns = ts_ns;
    r.kind = kind;
    r.thread = thread;
  }

  // Hot path. Never blocks after the thread's first event, never throws.
  void record(const Record& record);
  // The same, with the calling thread's block already looked up
  // (thread_block.h). `thread` must be the calling thread's own block.
  void record(const Record& record, ThreadBlock& thread);
  // An op's records: `before` (n of them: its casts, and any cache sample
  // one made due, in order) then `op`, as n + 1 calls of record() would,
  // with one look-up of the thread's ring and, in aggregate mode, one lock
  // of its counters. `direct_casts`: of its casts, those made directly,
  // counted as count_direct_casts would, with the same look-up.
  void record_op(const Record* before, size_t n, const Record& op, ThreadBlock& thread, uint64_t direct_casts = 0);
  // Aggregate mode (aggregating()): an op record and its casts (n) as
  // CastCounts, counted as record_op would count their records; out of
  // aggregate mode all n + 1 are dropped (counted). `direct_casts` as record_op's.
  void count_op(const Record& op, const CastCount* casts, size_t n, ThreadBlock& thread, uint64_t direct_casts = 0);

  // Calls sink for every buffered record, ring by ring (each ring oldest
  // first). Returns how many were drained.
  size_t drain(const std::function<void(const Record&)>& sink);

  // Aggregate mode, exporter side: every thread's counters as kCastCounts /
  // kOpCounts records (fresh sequence numbers), tables left empty. Returns
  // how many were drained.
  size_t drain_counters(const std::function<void(const Record&)>& sink);
  // Aggregate mode, owner side (an optimizer step): the calling thread's
  // counters into its own ring, in order with what it records next.
  void flush_thread_counters();

  // True when some ring is more than a quarter full: the exporter should
  // drain now rather than at its next interval (a burst of small ops).
  bool needs_drain();

  void count_internal_error() { internal_errors_.fetch_add(1, std::memory_order_relaxed); }
  // `n` casts the calling thread's kernels made with at::_to_copy (kernel_core.h,
  // make_cast's `direct`): into the thread's ring slot, no shared counter on
  // the hot path. direct_casts(): every thread's so far (the agent's status).
  void count_direct_casts(ThreadBlock& thread, uint64_t n);
  uint64_t direct_casts() const;
  // Drained events that could not be delivered (spool full or unwritable):
  // they move from recorded to dropped, so recorded counts what was delivered.
  void count_lost(uint64_t events) {
    recorded_.fetch_sub(events, std::memory_order_relaxed);
    dropped_total_.fetch_add(events, std::memory_order_relaxed);
  }
  // CUPTI reported `records` activity records it could not deliver.
  void count_gpu_dropped(uint64_t records) { gpu_dropped_.fetch_add(records, std::memory_order_relaxed); }
  // An overlay entry castscope had to skip (its attribute is missing when
  // its module is imported): reported with every stats event.
  void note_overlay_error(const std::string& message);
  EventLogStats stats() const;
  // A new agent starts counting from zero: sequence numbers from 1 again and
  // no recorded or dropped events. Called at attach, before any hook records;
  // a record left in a ring by an op still running at the last detach belongs
  // to no agent any more and is discarded.
  void begin_session();

  // Around fork(): holds the lock threads take to give a ring back when they
  // exit, so a child never inherits it held by a thread it does not have.
  // after_fork() in both the parent and the child.
  static void before_fork();
  static void after_fork();

  // castscope's id of the calling thread: small, unique per process, never
  // reused (rings are pooled, so a ring is not a thread identity).
  uint32_t thread_id();
  static uint32_t thread_id(ThreadBlock& thread);  // the calling thread's block

  // Owns the calling thread's ring; defined in event_log.cc.
  struct ThreadHandle;

 private:
  friend struct ThreadBlock;  // names the thread's Slot
  // A ring and what folds beside it; a thread names its own in its ThreadBlock.
  struct Slot {
    explicit Slot(size_t records) : ring(records) {}
    ~Slot() { delete counters.load(std::memory_order_relaxed); }
    RingBuffer<Record> ring;
    std::atomic<bool> in_use{false};
    std::atomic<CounterTable*> counters{nullptr};  // aggregate mode; made under rings_mutex_, then fixed
    std::atomic<uint64_t> direct_casts{0};         // written by the owning thread only (relaxed), summed by direct_casts()
  };
  Slot* thread_slot(ThreadBlock& thread);
  Record counts_record(const CountFields& counts);
  Slot* acquire_slot();
  void release_slot(Slot* slot);

  const uint64_t id_;  // tags the rings threads hold (see the design note)
  mutable std::mutex ops_mutex_;
  std::deque<OpMeta> ops_;
  // name -> index in ops_: a policy or overlay of 20 000 entries interns
  // 20 000 names at attach, and a scan per name made that quadratic.
  std::unordered_map<std::string, uint32_t> op_ids_;

  mutable std::mutex rings_mutex_;
  std::vector<std::unique_ptr<Slot>> slots_;
  size_t ring_records_ = 1 << 14;
  size_t max_rings_ = 16;
  size_t aggregate_max_keys_ = 2048;  // guarded by rings_mutex_
  std::atomic<bool> aggregate_{false};
  std::atomic<uint64_t> iteration_{0};
  std::vector<CountFields> taken_;  // drain_counters' buffer, guarded by drain_mutex_

  std::mutex drain_mutex_;
  // Lines of their own: the recording threads take sequence numbers while
  // the exporter counts every record it drains.
  alignas(64) std::atomic<uint64_t> next_seq_{1};
  alignas(64) std::atomic<uint64_t> recorded_{0};
  std::atomic<uint64_t> dropped_total_{0};  // drops with no ring to count in
  mutable std::atomic<uint64_t> ring_drops_{0};
  std::atomic<uint64_t> internal_errors_{0};
  std::atomic<uint64_t> gpu_dropped_{0};
  mutable std::mutex overlay_errors_mutex_;
  std::vector<std::string> overlay_errors_;  // guarded by overlay_errors_mutex_
  uint64_t overlay_errors_total_ = 0;        // guarded by overlay_errors_mutex_
};

}  // namespace castscope
