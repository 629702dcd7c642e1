#include "agent/src/record/event_log.h"

#include <unordered_map>

#include "agent/src/record/thread_block.h"

namespace castscope {
namespace {

// Logs that live now, by id: a thread gives its ring back only to a live log.
// Taken when a thread exits or moves to another log, never per record.
std::mutex& live_logs_mutex() {
  static auto* mutex = new std::mutex();  // leaked: threads exit after static destruction
  return *mutex;
}
std::unordered_map<uint64_t, EventLog*>& live_logs() {
  static auto* logs = new std::unordered_map<uint64_t, EventLog*>();
  return *logs;
}
std::atomic<uint64_t> g_next_log_id{1};
std::atomic<uint32_t> g_next_thread_id{1};

}  // namespace

thread_local constinit ThreadBlock t_thread_block;

// What the calling thread's ring needs beyond its ThreadBlock fields (ring,
// ring_log): whether it tried to adopt one, and the destructor that gives it
// back when the thread exits. Touched only off the hot path.
struct EventLog::ThreadHandle {
  bool tried = false;
  bool exited = false;

  void give_back() {
    ThreadBlock& block = t_thread_block;
    if (block.ring == nullptr) return;
    std::lock_guard<std::mutex> lock(live_logs_mutex());
    if (auto found = live_logs().find(block.ring_log); found != live_logs().end())
      found->second->release_slot(block.ring);
    block.ring = nullptr;
  }
  ~ThreadHandle() {
    give_back();
    exited = true;  // a record from a later thread-local destructor is dropped, never
    tried = true;   // written into a ring another thread may have adopted
  }
};

void EventLog::before_fork() { live_logs_mutex().lock(); }
void EventLog::after_fork() { live_logs_mutex().unlock(); }

EventLog::EventLog() : id_(g_next_log_id.fetch_add(1, std::memory_order_relaxed)) {
  std::lock_guard<std::mutex> lock(live_logs_mutex());
  live_logs().emplace(id_, this);
}

EventLog::~EventLog() {
  std::lock_guard<std::mutex> lock(live_logs_mutex());
  live_logs().erase(id_);
}

void EventLog::configure(size_t ring_records, size_t max_rings) {
  std::lock_guard<std::mutex> lock(rings_mutex_);
  size_t pow2 = 64;
  while (pow2 < ring_records && pow2 < kMaxRingRecords) pow2 <<= 1;
  ring_records_ = pow2;
  max_rings_ = max_rings == 0 ? 1 : max_rings;
}

void EventLog::configure_aggregate(bool on, size_t max_keys) {
  std::lock_guard<std::mutex> lock(rings_mutex_);
  aggregate_max_keys_ = max_keys;
  if (on)
    for (auto& slot : slots_)
      if (slot->counters.load(std::memory_order_relaxed) == nullptr)
        slot->counters.store(new CounterTable(max_keys), std::memory_order_release);
  aggregate_.store(on, std::memory_order_relaxed);
}

uint32_t EventLog::intern_op(const std::string& name) {
  std::lock_guard<std::mutex> lock(ops_mutex_);
  const auto [at, inserted] = op_ids_.try_emplace(name, static_cast<uint32_t>(ops_.size()));
  if (inserted) ops_.push_back(OpMeta{name, {}});
  return at->second;
}

void EventLog::set_arg_names(uint32_t op_id, std::vector<std::string> names) {
  std::lock_guard<std::mutex> lock(ops_mutex_);
  if (op_id < ops_.size()) ops_[op_id].arg_names = std::move(names);
}

OpMeta EventLog::op_meta(uint32_t op_id) const {
  std::lock_guard<std::mutex> lock(ops_mutex_);
  return op_id < ops_.size() ? ops_[op_id] : OpMeta{"<unknown op>", {}};
}

EventLog::Slot* EventLog::acquire_slot() {
  std::lock_guard<std::mutex> lock(rings_mutex_);
  for (auto& slot : slots_) {
    bool expected = false;
    if (slot->in_use.compare_exchange_strong(expected, true)) return slot.get();
  }
  if (slots_.size() >= max_rings_) return nullptr;
  slots_.push_back(std::make_unique<Slot>(ring_records_));
  slots_.back()->in_use.store(true);
  if (aggregate_.load(std::memory_order_relaxed))
    slots_.back()->counters.store(new CounterTable(aggregate_max_keys_), std::memory_order_release);
  return slots_.back().get();
}

void EventLog::release_slot(Slot* slot) { slot->in_use.store(false, std::memory_order_release); }

namespace {
thread_local EventLog::ThreadHandle tls_thread;
}  // namespace

uint32_t EventLog::thread_id() { return thread_id(this_thread_block()); }

uint32_t EventLog::thread_id(ThreadBlock& thread) {
  if (thread.thread_id == 0) [[unlikely]]
    thread.thread_id = g_next_thread_id.fetch_add(1, std::memory_order_relaxed);
  return thread.thread_id;
}

namespace {
// The owning thread's count: a plain add, no read-modify-write (one writer).
void add_direct_casts(std::atomic<uint64_t>& count, uint64_t n) {
  count.store(count.load(std::memory_order_relaxed) + n, std::memory_order_relaxed);
}
}  // namespace

void EventLog::count_direct_casts(ThreadBlock& thread, uint64_t n) {
  if (n == 0) return;
  if (Slot* slot = thread_slot(thread)) add_direct_casts(slot->direct_casts, n);
}

uint64_t EventLog::direct_casts() const {
  std::lock_guard<std::mutex> lock(rings_mutex_);
  uint64_t total = 0;
  for (const auto& slot : slots_) total += slot->direct_casts.load(std::memory_order_relaxed);
  return total;
}

EventLog::Slot* EventLog::thread_slot(ThreadBlock& thread) {
  if (thread.ring_log != id_ || thread.ring == nullptr) [[unlikely]] {
    ThreadHandle& handle = tls_thread;
    if (thread.ring_log != id_ && !handle.exited) {
      handle.give_back();  // the thread's ring in an earlier log (tests only)
      thread.ring_log = id_;
      handle.tried = false;
    }
    if (!handle.tried) {
      handle.tried = true;
      thread.ring = acquire_slot();
    }
  }
  return thread.ring;
}

void EventLog::record(const Record& record) { this->record(record, this_thread_block()); }

void EventLog::record(const Record& record, ThreadBlock& thread) {
  Slot* slot = thread_slot(thread);
  if (slot == nullptr) [[unlikely]] {
    dropped_total_.fetch_add(1, std::memory_order_relaxed);
    return;
  }
  if (aggregate_.load(std::memory_order_relaxed) && CounterTable::folds(record)) {
    CounterTable* counters = slot->counters.load(std::memory_order_acquire);
    if (counters == nullptr || !counters->fold(record, iteration_.load(std::memory_order_relaxed)))
      dropped_total_.fetch_add(1, std::memory_order_relaxed);  // past the key limit: counted, never lost silently
    return;
  }
  slot->ring.try_push(record);
}

void EventLog::record_op(const Record* before, size_t n, const Record& op, ThreadBlock& thread,
                         uint64_t direct_casts) {
  Slot* slot = thread_slot(thread);
  if (slot == nullptr) [[unlikely]] {
    dropped_total_.fetch_add(n + 1, std::memory_order_relaxed);
    return;
  }
  if (direct_casts != 0) add_direct_casts(slot->direct_casts, direct_casts);
  if (aggregate_.load(std::memory_order_relaxed)) {
    CounterTable* counters = slot->counters.load(std::memory_order_acquire);
    size_t refused = 0;
    if (counters != nullptr) {
      refused = counters->fold_op(before, n, op, iteration_.load(std::memory_order_relaxed));
    } else {
      for (size_t i = 0; i < n; ++i) refused += CounterTable::folds(before[i]) ? 1 : 0;
      ++refused;
    }
    for (size_t i = 0; i < n; ++i)
      if (!CounterTable::folds(before[i])) slot->ring.try_push(before[i]);  // a cache sample: as in full mode
    if (refused != 0) dropped_total_.fetch_add(refused, std::memory_order_relaxed);  // past the key limit
    return;
  }
  for (size_t i = 0; i < n; ++i) slot->ring.try_push(before[i]);
  slot->ring.try_push(op);
}

void EventLog::count_op(const Record& op, const CastCount* casts, size_t n, ThreadBlock& thread,
                        uint64_t direct_casts) {
  Slot* slot = thread_slot(thread);
  if (slot != nullptr && direct_casts != 0) add_direct_casts(slot->direct_casts, direct_casts);
  // An op that began in aggregate mode and ends after a switch back to full
  // events has no records to log: dropped, and counted so.
  CounterTable* counters = slot != nullptr && aggregate_.load(std::memory_order_relaxed)
                               ? slot->counters.load(std::memory_order_acquire)
                               : nullptr;
  const size_t refused = counters != nullptr
                             ? counters->fold_op_casts(op, casts, n, iteration_.load(std::memory_order_relaxed))
                             : n + 1;
  if (refused != 0) [[unlikely]]  // past the key limit, or nowhere to count: counted, never lost silently
    dropped_total_.fetch_add(refused, std::memory_order_relaxed);
}

Record EventLog::counts_record(const CountFields& counts) {
  Record r{};
  r.seq = next_seq();
  r.ts_ns = counts.first_ts_ns;
  r.kind = counts.key.kind == RecordKind::kCast ? RecordKind::kCastCounts : RecordKind::kOpCounts;
  r.op_id = counts.key.op_id;
  r.thread = counts.key.thread;
  r.policy = counts.key.policy;
  r.device = counts.key.device;
  r.counts = counts;
  return r;
}

size_t EventLog::drain_counters(const std::function<void(const Record&)>& sink) {
  std::lock_guard<std::mutex> drain_lock(drain_mutex_);
  std::vector<CounterTable*> tables;
  {
    std::lock_guard<std::mutex> lock(rings_mutex_);
    for (auto& slot : slots_)
      if (CounterTable* table = slot->counters.load(std::memory_order_acquire)) tables.push_back(table);
  }
  size_t drained = 0;
  for (CounterTable* table : tables) {
    taken_.clear();
    taken_.reserve(table->max_keys());  // no allocation while the owner may wait on the table
    table->take(taken_);
    for (const CountFields& counts : taken_) {
      recorded_.fetch_add(1, std::memory_order_relaxed);
      ++drained;
      sink(counts_record(counts));
    }
  }
  return drained;
}

void EventLog::flush_thread_counters() {
  Slot* slot = thread_slot(this_thread_block());
  if (slot == nullptr) return;
  CounterTable* table = slot->counters.load(std::memory_order_acquire);
  if (table == nullptr) return;
  // A thread-local buffer: the owner flushes only its own table.
  thread_local std::vector<CountFields> taken;
  taken.clear();
  taken.reserve(table->max_keys());
  table->take(taken);
  for (const CountFields& counts : taken) slot->ring.try_push(counts_record(counts));
}

size_t EventLog::drain(const std::function<void(const Record&)>& sink) {
  std::lock_guard<std::mutex> drain_lock(drain_mutex_);
  std::vector<Slot*> snapshot;
  {
    std::lock_guard<std::mutex> lock(rings_mutex_);
    for (auto& slot : slots_) snapshot.push_back(slot.get());
  }
  size_t drained = 0;
  // Counted before the sink sees each record, so a sink that reads stats()
  // (a batch header) or counts a loss sees consistent totals.
  auto counted = [&](const Record& record) {
    recorded_.fetch_add(1, std::memory_order_relaxed);
    ++drained;
    sink(record);
  };
  for (Slot* slot : snapshot) {
    slot->ring.drain(counted);
    ring_drops_.fetch_add(slot->ring.take_dropped(), std::memory_order_relaxed);
  }
  return drained;
}

void EventLog::begin_session() {
  drain([](const Record&) {});
  {
    std::lock_guard<std::mutex> lock(rings_mutex_);
    for (auto& slot : slots_)
      if (CounterTable* table = slot->counters.load(std::memory_order_acquire)) table->clear();
  }
  iteration_.store(0, std::memory_order_relaxed);
  std::lock_guard<std::mutex> drain_lock(drain_mutex_);
  next_seq_.store(1, std::memory_order_relaxed);
  recorded_.store(0, std::memory_order_relaxed);
  dropped_total_.store(0, std::memory_order_relaxed);
  ring_drops_.store(0, std::memory_order_relaxed);
  internal_errors_.store(0, std::memory_order_relaxed);
  gpu_dropped_.store(0, std::memory_order_relaxed);
  std::lock_guard<std::mutex> overlay_lock(overlay_errors_mutex_);
  overlay_errors_.clear();
  overlay_errors_total_ = 0;
}

void EventLog::note_overlay_error(const std::string& message) {
  std::lock_guard<std::mutex> lock(overlay_errors_mutex_);
  ++overlay_errors_total_;
  if (overlay_errors_.size() + 1 < kMaxOverlayErrors) {
    overlay_errors_.push_back(message);
  } else {
    overlay_errors_.resize(kMaxOverlayErrors - 1);
    overlay_errors_.push_back("... and " + std::to_string(overlay_errors_total_ - (kMaxOverlayErrors - 1)) +
                              " more overlay errors");
  }
}

bool EventLog::needs_drain() {
  std::lock_guard<std::mutex> lock(rings_mutex_);
  for (const auto& slot : slots_)
    if (slot->ring.size() * 4 > slot->ring.capacity()) return true;
  return false;
}

EventLogStats EventLog::stats() const {
  EventLogStats out;
  out.recorded = recorded_.load(std::memory_order_relaxed);
  out.dropped = dropped_total_.load(std::memory_order_relaxed) + ring_drops_.load(std::memory_order_relaxed);
  out.internal_errors = internal_errors_.load(std::memory_order_relaxed);
  out.gpu_records_dropped = gpu_dropped_.load(std::memory_order_relaxed);
  std::lock_guard<std::mutex> lock(overlay_errors_mutex_);
  out.overlay_errors = overlay_errors_;
  return out;
}

}  // namespace castscope
