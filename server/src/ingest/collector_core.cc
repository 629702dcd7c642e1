#include "server/src/ingest/collector_core.h"

#include <pthread.h>

#include <algorithm>
#include <cassert>
#include <map>
#include <string_view>

#include "common/log/logger.h"
#include "server/src/batch/stored_events.h"

namespace castscope::collector {

namespace v1 = castscope::v1;

uint64_t unix_now_ns() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
}

namespace {

// What a chunk takes of a subscription's capacity: its events, and at least
// one, so that chunks with no event to show (a commit with no cast, for a
// page) cannot pile up without bound behind a reader that stopped taking.
size_t queue_cost(const EventChunk& chunk) { return std::max<size_t>(1, chunk.events.size()); }

}  // namespace

void Subscription::offer(std::shared_ptr<const EventChunk> chunk) {
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    if (queued_events_ + queue_cost(*chunk) > capacity_) {
      skipped_ += chunk->batch_events;
    } else {
      queued_events_ += queue_cost(*chunk);
      chunks_.push_back(std::move(chunk));
    }
  }
  if (listener_) listener_();
}

bool Subscription::take(std::shared_ptr<const EventChunk>& chunk, uint64_t& skipped) {
  std::lock_guard lock(mutex_);
  chunk.reset();
  if (!chunks_.empty()) {
    chunk = std::move(chunks_.front());
    chunks_.pop_front();
    queued_events_ -= queue_cost(*chunk);
  }
  skipped = skipped_;
  skipped_ = 0;
  return chunk != nullptr || skipped != 0;
}

void Subscription::close() {
  {
    std::lock_guard lock(mutex_);
    if (closed_) return;
    closed_ = true;
  }
  if (listener_) listener_();
}

bool Subscription::closed() const {
  std::lock_guard lock(mutex_);
  return closed_;
}

Status CollectorCore::open(const std::string& db_path, const CollectorOptions& options,
                           std::unique_ptr<CollectorCore>& out) {
  std::unique_ptr<StoreWriter> writer;
  if (Status s = StoreWriter::open(db_path, writer); !s.ok()) return s;
  if (options.ship_rollups) writer->enable_rollups();
  out.reset(new CollectorCore(std::move(writer), options));
  return {};
}

namespace {

// How long an admitted read that brought nothing yet holds its share of the budget.
constexpr auto kReservationLife = std::chrono::seconds(1);
// How often the writer looks at waiting readers while it has nothing to commit.
constexpr auto kAdmissionRecheck = std::chrono::milliseconds(100);

}  // namespace

CollectorCore::CollectorCore(std::unique_ptr<StoreWriter> writer, const CollectorOptions& options)
    : options_(options),
      db_path_(writer->path()),
      writer_(std::move(writer)),
      admission_(options.queue_budget_bytes, kReservationLife, options.stream_window_bytes) {
  writer_thread_ = std::thread([this] { writer_loop(); });
}

CollectorCore::~CollectorCore() { shutdown(); }

uint64_t CollectorCore::add_reader() {
  std::lock_guard lock(mutex_);
  return admission_.add_reader();
}

void CollectorCore::remove_reader(uint64_t reader) {
  std::lock_guard lock(mutex_);
  admission_.remove_reader(reader);
}

bool CollectorCore::admit_read(uint64_t reader, std::function<void()> resume) {
  bool admitted = false;
  {
    std::lock_guard lock(mutex_);
    if (stopping_) return true;  // reads end with the stream; nothing more is queued
    admitted = admission_.admit(reader, bytes_held_, std::chrono::steady_clock::now(), std::move(resume));
  }
  if (!admitted) work_ready_.notify_one();  // the writer rechecks waiting readers while idle
  return admitted;
}

bool CollectorCore::submit(DecodedBatch batch, IngestDone done, std::function<void()> resume, uint64_t reader) {
  Submission submission{std::move(batch), std::move(done), unix_now_ns(), 0};
  submission.bytes = submission.batch.bytes();
  std::unique_lock lock(mutex_);
  if (reader != 0) admission_.submitted(reader, submission.bytes);
  if (stopping_) {
    lock.unlock();
    submission.done({Status::unavailable("the collector is shutting down"), false});
    return true;
  }
  bytes_held_ += submission.bytes;
  queue_.push_back(std::move(submission));
  const bool has_room = bytes_held_ < options_.queue_budget_bytes;
  if (!has_room && reader == 0) waiting_for_room_.push_back(std::move(resume));
  lock.unlock();
  work_ready_.notify_one();
  return has_room;
}

void CollectorCore::submit_and_wait_for_room(DecodedBatch batch, IngestDone done) {
  auto room = std::make_shared<std::pair<std::mutex, std::condition_variable>>();
  auto has_room = std::make_shared<bool>(false);
  if (submit(std::move(batch), std::move(done), [room, has_room] {
        std::lock_guard lock(room->first);
        *has_room = true;
        room->second.notify_all();
      }))
    return;
  std::unique_lock lock(room->first);
  room->second.wait(lock, [&] { return *has_room; });
}

std::shared_ptr<Subscription> CollectorCore::subscribe(const std::string& run_id, std::function<void()> listener,
                                                      size_t sample_casts) {
  auto subscription =
      std::make_shared<Subscription>(run_id, options_.subscriber_queue_events, std::move(listener), sample_casts);
  std::lock_guard lock(subscriptions_mutex_);
  subscriptions_.push_back(subscription);
  return subscription;
}

void CollectorCore::unsubscribe(const std::shared_ptr<Subscription>& subscription) {
  {
    std::lock_guard lock(subscriptions_mutex_);
    std::erase(subscriptions_, subscription);
  }
  subscription->close();
}

void CollectorCore::shutdown() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_one();
  if (writer_thread_.joinable()) writer_thread_.join();
  std::vector<std::shared_ptr<Subscription>> subscriptions;
  {
    std::lock_guard lock(subscriptions_mutex_);
    subscriptions.swap(subscriptions_);
  }
  for (const auto& subscription : subscriptions) subscription->close();
}

CollectorCounters CollectorCore::counters() const {
  CollectorCounters out;
  {
    std::lock_guard lock(mutex_);
    out = counters_;
    out.queue_bytes = bytes_held_;
  }
  std::lock_guard lock(subscriptions_mutex_);
  out.subscribers = subscriptions_.size();
  return out;
}

void CollectorCore::writer_loop() {
  pthread_setname_np(pthread_self(), "cs-writer");  // for perf and top -H
  std::vector<Submission> group;
  std::vector<char> duplicate;
  for (;;) {
    std::vector<std::function<void()>> admitted;
    bool tasks_only = false;
    {
      std::unique_lock lock(mutex_);
      for (;;) {
        if (!queue_.empty()) break;
        if (!tasks_.empty()) {
          tasks_only = true;
          break;
        }
        if (stopping_) return;  // and everything is committed
        if (!admission_.has_waiting()) {
          work_ready_.wait(lock);
          continue;
        }
        // Idle, with readers waiting: reservations of quiet streams expire.
        admitted = admission_.admit_waiting(bytes_held_, std::chrono::steady_clock::now());
        if (!admitted.empty()) break;
        work_ready_.wait_for(lock, kAdmissionRecheck);
      }
    }
    if (!admitted.empty()) {
      for (auto& resume : admitted) resume();
      continue;
    }
    if (tasks_only) {
      run_tasks();
      continue;
    }
    group.clear();
    duplicate.clear();
    const Status status = write_group(group, duplicate);
    const uint64_t stored_unix_ns = unix_now_ns();
    if (!status.ok()) {
      log::logger("collector").error("{}: {} batches not stored: {}", db_path_, group.size(), status.message());
      for (const Submission& s : group)
        metrics_.reject_batch(RejectReason::kStoreFailed, static_cast<uint64_t>(s.batch.batch().events_size()));
    }

    // The listener first: whoever waits for an acknowledgement may then
    // stop the analyzer, which must already know about the batch.
    if (status.ok() && commit_listener_) tell_listener(group, duplicate);
    size_t bytes = 0;
    uint64_t events = 0;
    for (size_t i = 0; i < group.size(); ++i) {
      group[i].done({status, duplicate[i] != 0});
      bytes += group[i].bytes;
      if (status.ok() && !duplicate[i]) events += static_cast<uint64_t>(group[i].batch.batch().events_size());
    }
    if (status.ok()) publish(group, duplicate, stored_unix_ns);

    std::vector<std::function<void()>> resume;
    {
      std::lock_guard lock(mutex_);
      bytes_held_ -= bytes;
      writing_ = false;
      if (bytes_held_ < options_.queue_budget_bytes) resume.swap(waiting_for_room_);
      for (auto& reader : admission_.admit_waiting(bytes_held_, std::chrono::steady_clock::now()))
        resume.push_back(std::move(reader));
      ++counters_.commits;
      counters_.events_stored += events;
      for (char is_duplicate : duplicate) {
        if (!status.ok())
          ++counters_.batches_failed;
        else if (is_duplicate)
          ++counters_.batches_duplicate;
        else
          ++counters_.batches_stored;
      }
    }
    group.clear();  // frees the batches before the senders refill the queue
    drained_.notify_all();
    for (auto& wake : resume)
      if (wake) wake();
    run_tasks();
  }
}

void CollectorCore::run_tasks() {
  std::deque<QueuedTask> tasks;
  {
    std::lock_guard lock(mutex_);
    tasks.swap(tasks_);
  }
  for (QueuedTask& queued : tasks) {
    Status status = writer_->begin();
    if (status.ok()) status = queued.task(*writer_);
    if (status.ok()) status = writer_->commit();
    if (!status.ok()) {
      writer_->rollback();
      log::logger("collector").error("{}: a store task failed: {}", db_path_, status.message());
    }
    if (queued.done) queued.done(status);
  }
}

void CollectorCore::tell_listener(const std::vector<Submission>& group, const std::vector<char>& duplicate) {
  std::vector<CommittedRun> runs;
  for (size_t i = 0; i < group.size(); ++i) {
    if (duplicate[i]) continue;
    const v1::Batch& batch = group[i].batch.batch();
    auto it = std::find_if(runs.begin(), runs.end(), [&](const CommittedRun& r) { return r.run_id == batch.agent().run_id(); });
    if (it == runs.end()) it = runs.insert(runs.end(), CommittedRun{batch.agent().run_id(), false});
    it->agent_finished |= batch.final();
  }
  if (!runs.empty()) commit_listener_(runs);
}

void CollectorCore::drain() {
  std::unique_lock lock(mutex_);
  drained_.wait(lock, [&] { return (queue_.empty() && !writing_) || stopping_; });
}

void CollectorCore::run_on_writer(WriterTask task, WriterTaskDone done) {
  {
    std::unique_lock lock(mutex_);
    if (stopping_) {
      lock.unlock();
      log::logger("collector").warn("{}: shutting down; a store task was dropped", db_path_);
      if (done) done(Status::unavailable(db_path_ + ": the collector is shutting down; a store task was dropped"));
      return;
    }
    tasks_.push_back({std::move(task), std::move(done)});
  }
  work_ready_.notify_one();
}

void CollectorCore::set_commit_listener(CommitListener listener) {
  std::lock_guard lock(mutex_);  // the writer reads it after taking this lock
  commit_listener_ = std::move(listener);
}

Status CollectorCore::write_group(std::vector<Submission>& group, std::vector<char>& duplicate) {
  const auto started = std::chrono::steady_clock::now();
  Status status = writer_->begin();
  for (;;) {
    {
      std::lock_guard lock(mutex_);
      if (queue_.empty()) break;
      writing_ = true;
      group.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    bool is_duplicate = false;
    if (status.ok()) status = writer_->store_batch(group.back().batch.batch(), group.back().received_unix_ns, is_duplicate);
    duplicate.push_back(is_duplicate ? 1 : 0);
    if (!status.ok() || std::chrono::steady_clock::now() - started >= options_.max_transaction_time) break;
  }
  if (status.ok()) status = writer_->commit();
  if (!status.ok()) writer_->rollback();
  return status;
}

namespace {

std::shared_ptr<EventChunk> chunk_of(const DecodedBatch& first, uint64_t stored_unix_ns) {
  auto chunk = std::make_shared<EventChunk>();
  chunk->stored_unix_ns = stored_unix_ns;
  chunk->run_id = first.batch().agent().run_id();
  chunk->agent_id = first.batch().agent().agent_id();
  return chunk;
}

std::shared_ptr<EventChunk> every_event_chunk(const DecodedBatch& batch, uint64_t stored_unix_ns) {
  std::shared_ptr<EventChunk> chunk = chunk_of(batch, stored_unix_ns);
  chunk->batch_events = batch.timeline().events;
  chunk->max_ts_ns = batch.timeline().max_ts_ns;
  resolve_batch_events(batch.batch(), chunk->events);
  return chunk;
}

// One agent's batches of a commit (in commit order, at least one) as one
// chunk: all their events counted, their newest `sample` (> 0) casts resolved.
std::shared_ptr<EventChunk> newest_casts_chunk(const std::vector<const DecodedBatch*>& batches, size_t sample,
                                               uint64_t stored_unix_ns) {
  assert(!batches.empty() && sample > 0);
  std::shared_ptr<EventChunk> chunk = chunk_of(*batches.front(), stored_unix_ns);
  for (const DecodedBatch* batch : batches) {
    chunk->batch_events += batch->timeline().events;
    chunk->max_ts_ns = std::max(chunk->max_ts_ns, batch->timeline().max_ts_ns);
  }
  // Back from the newest batch to the one that completes the sample: the
  // casts of the batches before it would only be dropped by the reader.
  size_t first = batches.size();
  uint64_t later = 0;  // casts of the batches after `first`
  while (first > 0 && later < sample) later += batches[--first]->timeline().casts;
  later -= batches[first]->timeline().casts;
  for (size_t i = first; i < batches.size(); ++i) {
    const uint64_t casts = batches[i]->timeline().casts;
    const uint64_t wanted = i == first ? std::min<uint64_t>(casts, sample - later) : casts;
    if (wanted > 0) resolve_batch_events(batches[i]->batch(), chunk->events, wanted);
  }
  return chunk;
}

}  // namespace

void CollectorCore::publish(const std::vector<Submission>& group, const std::vector<char>& duplicate,
                            uint64_t stored_unix_ns) {
  std::vector<std::shared_ptr<Subscription>> every_event, sampled;
  {
    std::lock_guard lock(subscriptions_mutex_);
    for (const auto& subscription : subscriptions_)
      (subscription->sample_casts() == 0 ? every_event : sampled).push_back(subscription);
  }
  auto follows = [](const Subscription& subscription, std::string_view run_id) {
    return subscription.run_id().empty() || subscription.run_id() == run_id;
  };
  // A batch's timeline facts were counted when it was validated, not walked here.
  auto published = [&](size_t i) { return !duplicate[i] && group[i].batch.timeline().events > 0; };

  // Every event, batch by batch in commit order (gRPC Follow).
  if (!every_event.empty()) {
    for (size_t i = 0; i < group.size(); ++i) {
      if (!published(i)) continue;
      std::shared_ptr<EventChunk> chunk;  // made once for all that follow its run
      for (const auto& subscription : every_event) {
        if (!follows(*subscription, group[i].batch.batch().agent().run_id())) continue;
        if (!chunk) chunk = every_event_chunk(group[i].batch, stored_unix_ns);
        subscription->offer(chunk);
      }
    }
  }

  // The viewer's pages: a sample of the newest casts, per run and agent of the
  // whole commit. A page's message keeps only the newest casts of all that
  // committed since its last one, so resolving every batch's sample (as
  // before) copied casts on the store's one serial thread only to drop them.
  if (sampled.empty()) return;
  std::map<std::pair<std::string_view, std::string_view>, std::vector<const DecodedBatch*>> by_agent;
  for (size_t i = 0; i < group.size(); ++i)
    if (published(i))
      by_agent[{group[i].batch.batch().agent().run_id(), group[i].batch.batch().agent().agent_id()}].push_back(
          &group[i].batch);
  for (const auto& [key, batches] : by_agent) {
    std::map<size_t, std::shared_ptr<EventChunk>> chunks;  // made once per sample size
    for (const auto& subscription : sampled) {
      if (!follows(*subscription, key.first)) continue;
      std::shared_ptr<EventChunk>& chunk = chunks[subscription->sample_casts()];
      if (!chunk) chunk = newest_casts_chunk(batches, subscription->sample_casts(), stored_unix_ns);
      subscription->offer(chunk);
    }
  }
}

Status IngestStream::submit(DecodedBatch batch, IngestDone done, std::function<void()> resume, bool& may_continue) {
  const v1::AgentIdentity& agent = batch.batch().agent();
  const uint64_t sequence = batch.batch().sequence();
  auto [it, first] = last_sequence_.try_emplace(agent.run_id() + '\x1f' + agent.agent_id(), sequence);
  if (!first) {
    if (sequence <= it->second)
      return Status::invalid_argument("run " + agent.run_id() + " agent " + agent.agent_id() + ": sequence " +
                                      std::to_string(sequence) + " after " + std::to_string(it->second) +
                                      " on this stream (sequences must increase within a stream)");
    it->second = sequence;
  }
  may_continue = core_.submit(std::move(batch), std::move(done), std::move(resume), reader_);
  return {};
}

}  // namespace castscope::collector
