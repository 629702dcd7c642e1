// The collector without its transports: ingest, dedup, commit, acknowledge,
// fan out to subscribers. gRPC (grpc_services.cc), `load` and the tests drive
// it the same way.
//
// Concurrency design. Any thread submits decoded, validated batches to one
// FIFO queue; a single writer thread owns the store. It takes batches in
// order, groups them into one transaction (until the queue is empty or the
// transaction is 20 ms old), commits, and only then runs each batch's `done`
// (so an acknowledgement means "in the WAL"). Then it offers the committed
// events to subscribers. The queue is bounded by the memory its batches hold
// (until their commit): past the budget, submit() still takes the batch the
// caller has already decoded but tells it to stop reading until `resume`
// runs; a transport that obeys this lets flow control push back on the
// sender. Transports with a stream per client also ask before each read
// (admit_read, read_admission.h), so that batches being read count against
// the budget too: memory stays near the budget however many streams send.
//
// Dedup and order. A batch is identified by (run, agent, sequence); the store
// keeps each once and acknowledges a replay as a duplicate (a forwarder that
// reconnects resends what it had not seen acknowledged). Within one stream,
// though, an agent's sequences must increase: IngestStream rejects a repeat
// or a step back as a sender bug.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "server/src/batch/batch_validation.h"
#include "server/src/ingest/collector_metrics.h"
#include "server/src/ingest/read_admission.h"
#include "server/src/status.h"
#include "server/src/store/store_writer.h"

namespace castscope::collector {

struct CollectorOptions {
  // Batches queued for the store, batches being read, and each client
  // stream's transport window (stream_window_bytes) share this budget.
  size_t queue_budget_bytes = 64u << 20;
  size_t stream_window_bytes = 0;
  std::chrono::milliseconds max_transaction_time{20};
  size_t subscriber_queue_events = 1u << 16;
  // Fleet shipping (docs/fleet.md): every commit also keeps per-minute
  // rollups of its casts for the shipper.
  bool ship_rollups = false;
};

struct IngestResult {
  Status status;           // not ok: the batch is not stored (the store failed)
  bool duplicate = false;  // stored before; not stored again
};
using IngestDone = std::function<void(const IngestResult&)>;

struct CollectorCounters {
  uint64_t batches_stored = 0;
  uint64_t batches_duplicate = 0;
  uint64_t batches_failed = 0;
  uint64_t events_stored = 0;
  uint64_t commits = 0;
  // Gauges, as of the call.
  uint64_t queue_bytes = 0;  // batches queued or being written, until acknowledged
  uint64_t subscribers = 0;  // live followers (viewer pages and gRPC Follow)
};

// Work for the store's one writer from other threads (the live analyzer's
// findings): runs on the writer thread in a transaction of its own.
using WriterTask = std::function<Status(StoreWriter&)>;
// Told, on the writer thread, how a task ended: after its commit (ok), or
// why it did not commit (failed, rolled back, or dropped at shutdown).
using WriterTaskDone = std::function<void(const Status&)>;

// What one commit stored, per run: told to the commit listener.
struct CommittedRun {
  std::string run_id;
  bool agent_finished = false;  // a batch of this commit was an agent's final one
};
using CommitListener = std::function<void(const std::vector<CommittedRun>&)>;

// Committed events shared by every subscriber that wants them: for a
// follower of every event, one batch's; for a sample of the newest casts,
// one agent's batches of one commit.
struct EventChunk {
  uint64_t stored_unix_ns = 0;
  std::vector<castscope::v1::StoredEvent> events;
  // The whole batch (or batches), also when `events` holds only a sample.
  std::string run_id, agent_id;
  uint64_t batch_events = 0;  // events of the batch or batches (agent stats not counted)
  uint64_t max_ts_ns = 0;     // the newest event timestamp among them
};

// One follower of one run (or of all runs): a bounded queue of chunks, each
// counted as its events and at least one. When it is full, new chunks are
// dropped and counted, so a slow reader never holds back the writer or grows
// memory.
class Subscription {
 public:
  // `listener` is called, without locks held, after each offer and on close
  // (from the writer thread or the closing thread).
  // `sample_casts` 0: every event of each batch; else, per agent and commit,
  // only the newest casts of its batches, at most that many (EventChunk says
  // how many events the batches had).
  Subscription(std::string run_id, size_t capacity_events, std::function<void()> listener, size_t sample_casts = 0)
      : run_id_(std::move(run_id)), capacity_(capacity_events), listener_(std::move(listener)),
        sample_casts_(sample_casts) {}

  const std::string& run_id() const { return run_id_; }
  size_t sample_casts() const { return sample_casts_; }

  void offer(std::shared_ptr<const EventChunk> chunk);
  // The next chunk (maybe none) and the events skipped since the last take;
  // false when there is neither.
  bool take(std::shared_ptr<const EventChunk>& chunk, uint64_t& skipped);
  void close();
  bool closed() const;

 private:
  const std::string run_id_;
  const size_t capacity_;
  const std::function<void()> listener_;
  const size_t sample_casts_;
  mutable std::mutex mutex_;
  std::deque<std::shared_ptr<const EventChunk>> chunks_;
  size_t queued_events_ = 0;
  uint64_t skipped_ = 0;
  bool closed_ = false;
};

class CollectorCore {
 public:
  // Opens (or creates) the store at `db_path` and starts the writer thread.
  static Status open(const std::string& db_path, const CollectorOptions& options, std::unique_ptr<CollectorCore>& out);
  ~CollectorCore();
  CollectorCore(const CollectorCore&) = delete;
  CollectorCore& operator=(const CollectorCore&) = delete;

  // Queues a validated batch; `done` runs on the writer thread after the
  // commit. Returns true when the caller may submit more now; false when the
  // queue is over budget: `resume` then runs (on the writer thread) once
  // there is room. After shutdown, `done` runs at once with UNAVAILABLE.
  // `reader` (from add_reader; 0: none) ends the reservation of its read.
  bool submit(DecodedBatch batch, IngestDone done, std::function<void()> resume, uint64_t reader = 0);
  // Read admission for client streams (read_admission.h): a stream takes a
  // reader id, asks before each read, and gives the id back when it ends.
  // admit_read false: `resume` runs on the writer thread once it may read.
  uint64_t add_reader();
  void remove_reader(uint64_t reader);
  bool admit_read(uint64_t reader, std::function<void()> resume);
  // submit(), then waits for room (for callers with a thread to spare).
  void submit_and_wait_for_room(DecodedBatch batch, IngestDone done);

  // Waits until every batch queued so far is committed and acknowledged
  // (and told to the commit listener). For an orderly stop: stop intake,
  // drain, stop the live analyzer, then shutdown().
  void drain();
  // Queues `task` for the writer thread, after the batches queued before it.
  // Dropped (with a log line) once shutdown has begun. `done`, when given,
  // runs once the task's transaction committed or failed: what the task
  // wrote is visible to other connections only then.
  void run_on_writer(WriterTask task, WriterTaskDone done = nullptr);
  // Called on the writer thread after every commit that stored events. Set
  // it before batches arrive; it must return quickly.
  void set_commit_listener(CommitListener listener);

  // Follows `run_id` (empty: every run); see Subscription for `listener`
  // and `sample_casts`.
  std::shared_ptr<Subscription> subscribe(const std::string& run_id, std::function<void()> listener,
                                          size_t sample_casts = 0);
  void unsubscribe(const std::shared_ptr<Subscription>& subscription);

  // Stops taking batches, commits everything queued, stops the writer and
  // closes subscriptions. Idempotent.
  void shutdown();

  CollectorCounters counters() const;
  // For the transports and the analyzer to count into; any thread.
  CollectorMetrics& metrics() { return metrics_; }
  // Any thread: the store's WAL checkpoint is behind (long readers should pause).
  bool checkpoint_behind() const { return writer_->checkpoint_behind(); }
  const std::string& db_path() const { return db_path_; }

 private:
  struct Submission {
    DecodedBatch batch;
    IngestDone done;
    uint64_t received_unix_ns = 0;
    size_t bytes = 0;
  };

  CollectorCore(std::unique_ptr<StoreWriter> writer, const CollectorOptions& options);
  void writer_loop();
  // Stores as many queued submissions as one transaction takes; `group` gets them.
  Status write_group(std::vector<Submission>& group, std::vector<char>& duplicate);
  void publish(const std::vector<Submission>& group, const std::vector<char>& duplicate, uint64_t stored_unix_ns);
  void tell_listener(const std::vector<Submission>& group, const std::vector<char>& duplicate);
  void run_tasks();

  const CollectorOptions options_;
  const std::string db_path_;
  std::unique_ptr<StoreWriter> writer_;  // writer thread only

  mutable std::mutex mutex_;
  std::condition_variable work_ready_;
  std::deque<Submission> queue_;
  size_t bytes_held_ = 0;  // queued and being written, until acknowledged
  std::vector<std::function<void()>> waiting_for_room_;
  ReadAdmission admission_;
  struct QueuedTask {
    WriterTask task;
    WriterTaskDone done;
  };
  std::deque<QueuedTask> tasks_;
  bool writing_ = false;  // the writer holds batches taken from the queue
  std::condition_variable drained_;
  CommitListener commit_listener_;  // set before the writer has work
  bool stopping_ = false;
  CollectorCounters counters_;

  CollectorMetrics metrics_;

  mutable std::mutex subscriptions_mutex_;
  std::vector<std::shared_ptr<Subscription>> subscriptions_;

  std::thread writer_thread_;
};

// The order rule of one ingest stream (see the note at the top).
class IngestStream {
 public:
  explicit IngestStream(CollectorCore& core) : core_(core), reader_(core.add_reader()) {}
  ~IngestStream() { core_.remove_reader(reader_); }
  IngestStream(const IngestStream&) = delete;
  IngestStream& operator=(const IngestStream&) = delete;

  // Before each read of a batch: see CollectorCore::admit_read.
  bool admit_read(std::function<void()> resume) { return core_.admit_read(reader_, std::move(resume)); }

  // INVALID_ARGUMENT (nothing queued) when the batch breaks the stream's
  // order; else as CollectorCore::submit, with `may_continue` its result.
  Status submit(DecodedBatch batch, IngestDone done, std::function<void()> resume, bool& may_continue);

 private:
  CollectorCore& core_;
  const uint64_t reader_;
  std::unordered_map<std::string, uint64_t> last_sequence_;  // key: run_id '\x1f' agent_id
};

uint64_t unix_now_ns();

}  // namespace castscope::collector
