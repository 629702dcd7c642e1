#include "agent/forwarder/forwarder.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstring>
#include <filesystem>
#include <mutex>
#include <thread>

#include "common/log/log.h"
#include "common/version/castscope_version.h"
#include "common/spool/accounting_file.h"

namespace castscope {
namespace {

constexpr uint32_t kProtocolVersion = v1::ProtocolVersion_MAX;  // the highest value is the one spoken
constexpr const char* kLockFileName = "forwarder.lock";

bool permanent(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAUTHENTICATED || code == grpc::StatusCode::PERMISSION_DENIED ||
         code == grpc::StatusCode::FAILED_PRECONDITION || code == grpc::StatusCode::INVALID_ARGUMENT ||
         code == grpc::StatusCode::RESOURCE_EXHAUSTED || code == grpc::StatusCode::UNIMPLEMENTED;
}

int64_t steady_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// Cancels a stream that waits for an answer and hears nothing for `limit`.
// The main thread says when it waits (`awaiting`) and every answer resets
// the clock (`heard`); the stream's own calls may be blocked meanwhile.
class StallWatchdog {
 public:
  StallWatchdog(grpc::ClientContext& context, std::chrono::seconds limit)
      : context_(context), limit_ns_(std::chrono::duration_cast<std::chrono::nanoseconds>(limit).count()) {
    heard();
    thread_ = std::thread([this] { watch(); });
  }
  ~StallWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  void heard() { last_heard_ns_.store(steady_ns(), std::memory_order_relaxed); }
  void awaiting(bool waiting) {
    if (waiting && !awaiting_.exchange(true, std::memory_order_relaxed)) heard();  // the clock starts now
    if (!waiting) awaiting_.store(false, std::memory_order_relaxed);
  }
  bool fired() const { return fired_.load(std::memory_order_relaxed); }

 private:
  void watch() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!wake_.wait_for(lock, std::chrono::milliseconds(100), [this] { return done_; })) {
      if (awaiting_.load(std::memory_order_relaxed) &&
          steady_ns() - last_heard_ns_.load(std::memory_order_relaxed) > limit_ns_) {
        fired_.store(true, std::memory_order_relaxed);
        context_.TryCancel();
        return;
      }
    }
  }

  grpc::ClientContext& context_;
  const int64_t limit_ns_;
  std::atomic<int64_t> last_heard_ns_{0};
  std::atomic<bool> awaiting_{true};  // the Welcome, first
  std::atomic<bool> fired_{false};
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  std::thread thread_;
};

}  // namespace

Forwarder::Forwarder(ForwarderConfig config)
    : config_(std::move(config)),
      tail_(config_.agent_dir),
      give_up_(config_.give_up_after),
      status_file_(config_.agent_dir, config_.collector, config_.parent_pid,
                   static_cast<int>(config_.give_up_after.count())) {
  connect();
  agent_id_ = std::filesystem::path(config_.agent_dir).filename().string();
}

// A fresh channel per failed attempt: gRPC's pick_first keeps a channel that
// never connected in TRANSIENT_FAILURE and may not try the address again for
// seconds after the collector is back (seen with gRPC 1.51: 5 s and more).
void Forwarder::connect() {
  std::shared_ptr<grpc::ChannelCredentials> credentials = grpc::InsecureChannelCredentials();
  if (!config_.tls_ca_pem.empty()) {
    grpc::SslCredentialsOptions options;
    options.pem_root_certs = config_.tls_ca_pem;
    credentials = grpc::SslCredentials(options);
  }
  grpc::ChannelArguments arguments;
  arguments.SetMaxSendMessageSize(64 << 20);
  arguments.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  channel_ = grpc::CreateCustomChannel(config_.collector, credentials, arguments);
  stub_ = v1::Ingest::NewStub(channel_);
}

Forwarder::~Forwarder() {
  if (lock_fd_ >= 0) ::close(lock_fd_);
}

bool Forwarder::parent_alive() const {
  return config_.parent_pid > 0 && (::kill(config_.parent_pid, 0) == 0 || errno == EPERM);
}

bool Forwarder::take_lock() {
  const std::string path = config_.agent_dir + "/" + kLockFileName;
  bool told = false;
  for (;;) {
    if (!std::filesystem::is_directory(config_.agent_dir)) return false;
    if (lock_fd_ < 0) lock_fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    if (lock_fd_ >= 0 && ::flock(lock_fd_, LOCK_EX | LOCK_NB) == 0) {
      // The folder may have been delivered and removed while we waited.
      if (std::filesystem::is_directory(config_.agent_dir)) return true;
      return false;
    }
    if (lock_fd_ >= 0 && errno != EWOULDBLOCK) {
      log::warn("cannot lock " + path + " (" + std::strerror(errno) + "); forwarding without the lock");
      return true;
    }
    if (lock_fd_ < 0) {
      log::warn("cannot create " + path + " (" + std::strerror(errno) + "); forwarding without the lock");
      return true;
    }
    if (!told) {
      log::info("another forwarder serves " + config_.agent_dir + "; waiting for it to end");
      report("waiting-for-lock");
      told = true;
    }
    // Unlocked on every try: a lock held on a folder removed meanwhile is another inode.
    ::close(lock_fd_);
    lock_fd_ = -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
}

void Forwarder::report(const std::string& state, const std::string& message) {
  status_.state = state;
  status_.message = message;
  status_.batches_pending = unsent_.size() + in_flight_.size();
  const auto unreachable = give_up_.unreachable_for(std::chrono::steady_clock::now());
  status_.unreachable_for_s =
      unreachable ? std::optional<double>(std::chrono::duration<double>(*unreachable).count()) : std::nullopt;
  status_file_.update(status_);
}

int Forwarder::finish(int code, const std::string& state, const std::string& message) {
  status_.exit_code = code;
  report(state, message);
  return code;
}

void Forwarder::read_new_frames() {
  std::vector<spool::ReadProblem> problems;
  for (auto& frame : tail_.poll(problems)) {
    Pending pending;
    pending.segment = frame.segment;
    if (!pending.request.mutable_batch()->ParseFromString(frame.payload)) {
      log::error("spool frame in segment " + std::to_string(frame.segment) + " of " + tail_.directory() +
                 " passed its checksum but is not a Batch; skipped");
      tail_.acknowledge(frame.segment);
      continue;
    }
    pending.sequence = pending.request.batch().sequence();
    pending.final = pending.request.batch().final();
    max_sequence_read_ = std::max(max_sequence_read_, pending.sequence);
    unsent_.push_back(std::move(pending));
  }
  for (const auto& problem : problems) log::error("spool: " + problem.str());
}

bool Forwarder::queue_accounting() {
  if (accounting_queued_) return false;
  accounting_queued_ = true;
  const auto payload = spool::read_accounting(config_.agent_dir);
  if (!payload) return false;
  Pending pending;
  if (!pending.request.mutable_batch()->ParseFromString(*payload)) {
    log::error(config_.agent_dir + "/" + spool::kAccountingFileName + " holds no Batch; skipped");
    return false;
  }
  pending.sequence = pending.request.batch().sequence();
  pending.final = pending.request.batch().final();
  // Batches written after it carry newer counts (and the collector wants
  // increasing sequences within a stream).
  if (pending.sequence <= max_sequence_read_) return false;
  log::info("the agent could not write its last batches; sending its accounting (" +
            std::to_string(pending.request.batch().events_recorded_total()) + " events recorded, " +
            std::to_string(pending.request.batch().events_dropped_total()) + " dropped" +
            (pending.final ? ", finished" : "") + ")");
  unsent_.push_back(std::move(pending));
  return true;
}

Forwarder::StreamEnd Forwarder::ended(const grpc::Status& status, bool stalled, const std::string& refused,
                                      const std::string& silence) {
  if (permanent(status.error_code())) {
    log::error("collector " + config_.collector + " refused " + refused + ": " + status.error_message() + " (code " +
               std::to_string(status.error_code()) + "); batches stay in " + tail_.directory());
    broken_because_ = status.error_message();
    return StreamEnd::kRefused;
  }
  broken_because_ =
      stalled ? silence + " in " + std::to_string(config_.stall_limit.count()) + " s" : status.error_message();
  return StreamEnd::kBroken;
}

Forwarder::StreamEnd Forwarder::stream_once() {
  grpc::ClientContext context;
  if (!config_.token.empty()) context.AddMetadata("authorization", "Bearer " + config_.token);
  StallWatchdog watchdog(context, config_.stall_limit);
  auto stream = stub_->Stream(&context);
  v1::IngestRequest hello;
  hello.mutable_hello()->set_protocol_version(kProtocolVersion);
  hello.mutable_hello()->set_agent_id(agent_id_);
  hello.mutable_hello()->set_client(std::string("castscope-forwarder ") + kCastscopeVersion);
  v1::IngestResponse response;
  if (!stream->Write(hello) || !stream->Read(&response) || !response.has_welcome()) {
    context.TryCancel();
    const StreamEnd end = ended(stream->Finish(), watchdog.fired(), "this agent", "no answer");
    if (end == StreamEnd::kBroken) connect();
    return end;
  }
  watchdog.heard();
  watchdog.awaiting(false);
  connected_ = true;
  give_up_.reached();
  log::info("connected to collector " + config_.collector + " (" + response.welcome().collector() + ")");
  // Whatever was in flight on a broken stream goes again, first and in order.
  while (!in_flight_.empty()) {
    unsent_.push_front(std::move(in_flight_.back()));
    in_flight_.pop_back();
  }
  report("streaming");

  std::mutex mutex;
  std::condition_variable wake;
  std::deque<uint64_t> acks;
  bool reader_done = false;
  std::thread reader([&] {
    v1::IngestResponse message;
    while (stream->Read(&message)) {
      if (!message.has_ack()) continue;
      watchdog.heard();
      std::lock_guard<std::mutex> lock(mutex);
      acks.push_back(message.ack().sequence());
      wake.notify_one();
    }
    std::lock_guard<std::mutex> lock(mutex);
    reader_done = true;
    wake.notify_one();
  });

  StreamEnd end = StreamEnd::kBroken;
  for (;;) {
    std::deque<uint64_t> acked;
    bool broken = false;
    {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait_for(lock, std::chrono::milliseconds(10), [&] { return !acks.empty() || reader_done; });
      acked.swap(acks);
      broken = reader_done;
    }
    bool final_acknowledged = false;
    for (const uint64_t sequence : acked) {
      // Acknowledgements come in send order.
      while (!in_flight_.empty() && in_flight_.front().sequence <= sequence) {
        tail_.acknowledge(in_flight_.front().segment);
        final_acknowledged = final_acknowledged || in_flight_.front().final;
        in_flight_.pop_front();
        ++status_.batches_acknowledged;
      }
    }
    if (final_acknowledged) {
      end = StreamEnd::kDelivered;
      break;
    }
    if (broken) break;
    if (unsent_.empty()) read_new_frames();
    if (unsent_.empty() && in_flight_.empty() && !parent_alive()) {
      // Anything written before the agent died: every segment read to its
      // end, empty ones (a full disk leaves them) passed one poll at a time;
      // then the accounting of batches it could not write.
      do {
        read_new_frames();
      } while (unsent_.empty() && !tail_.caught_up());
      if (unsent_.empty() && !queue_accounting()) {
        end = StreamEnd::kDelivered;  // the agent is gone: all it wrote is stored
        break;
      }
    }
    bool write_failed = false;
    while (in_flight_.size() < config_.window && !unsent_.empty()) {
      watchdog.awaiting(true);
      if (!stream->Write(unsent_.front().request)) {
        write_failed = true;
        break;
      }
      in_flight_.push_back(std::move(unsent_.front()));
      unsent_.pop_front();
    }
    if (in_flight_.empty()) watchdog.awaiting(false);
    if (write_failed) break;
    report("streaming");
  }
  if (end == StreamEnd::kDelivered) {
    stream->WritesDone();
  } else {
    context.TryCancel();
  }
  reader.join();
  const grpc::Status status = stream->Finish();
  if (end == StreamEnd::kDelivered) return end;
  if (ended(status, watchdog.fired(), "a batch", "no acknowledgement") == StreamEnd::kRefused)
    return StreamEnd::kRefused;
  log::info("stream to " + config_.collector + " broke (" + broken_because_ + "); " +
            std::to_string(in_flight_.size()) + " batches will be sent again");
  return StreamEnd::kBroken;
}

int Forwarder::run() {
  report("starting");
  if (!take_lock()) {
    log::info(config_.agent_dir + " is gone: another forwarder delivered it");
    return finish(0, "delivered", "the folder was delivered by another forwarder");
  }
  auto backoff = std::chrono::milliseconds(50);
  for (;;) {
    const StreamEnd end = stream_once();
    if (end == StreamEnd::kDelivered) {
      tail_.remove_all();
      return finish(0, "delivered", "");
    }
    if (end == StreamEnd::kRefused)
      return finish(3, "refused", "the collector refused this agent: " + broken_because_);
    if (connected_) backoff = std::chrono::milliseconds(50);
    connected_ = false;
    const auto now = std::chrono::steady_clock::now();
    give_up_.unreachable(now);
    if (give_up_.give_up(now, parent_alive())) {
      const std::string message = "collector " + config_.collector + " unreachable for " +
                                  std::to_string(config_.give_up_after.count()) +
                                  " s after the agent ended (" + broken_because_ + "); batches stay in " +
                                  tail_.directory() + "; load them with: castscope load --db DB " + tail_.directory();
      log::error(message);
      return finish(4, "gave-up", message);
    }
    report("unreachable", broken_because_);
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace castscope
