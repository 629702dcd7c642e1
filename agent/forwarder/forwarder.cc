#include "agent/forwarder/forwarder.h"

#include <signal.h>
#include <unistd.h>

#include <condition_variable>
#include <filesystem>
#include <mutex>
#include <thread>

#include "common/log/log.h"

namespace castscope {
namespace {

constexpr uint32_t kProtocolVersion = v1::ProtocolVersion_MAX;  // the highest value is the one spoken

bool permanent(grpc::StatusCode code) {
  return code == grpc::StatusCode::UNAUTHENTICATED || code == grpc::StatusCode::PERMISSION_DENIED ||
         code == grpc::StatusCode::FAILED_PRECONDITION || code == grpc::StatusCode::INVALID_ARGUMENT ||
         code == grpc::StatusCode::RESOURCE_EXHAUSTED || code == grpc::StatusCode::UNIMPLEMENTED;
}

}  // namespace

Forwarder::Forwarder(ForwarderConfig config) : config_(std::move(config)), tail_(config_.agent_dir) {
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
  agent_id_ = std::filesystem::path(config_.agent_dir).filename().string();
}

bool Forwarder::parent_alive() const {
  return config_.parent_pid <= 0 || (::kill(config_.parent_pid, 0) == 0 || errno == EPERM);
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
    unsent_.push_back(std::move(pending));
  }
  for (const auto& problem : problems) log::error("spool: " + problem.str());
}

Forwarder::StreamEnd Forwarder::stream_once() {
  grpc::ClientContext context;
  if (!config_.token.empty()) context.AddMetadata("authorization", "Bearer " + config_.token);
  auto stream = stub_->Stream(&context);
  v1::IngestRequest hello;
  hello.mutable_hello()->set_protocol_version(kProtocolVersion);
  hello.mutable_hello()->set_agent_id(agent_id_);
  hello.mutable_hello()->set_client("castscope-forwarder 0.1.0");
  v1::IngestResponse response;
  if (!stream->Write(hello) || !stream->Read(&response) || !response.has_welcome()) {
    context.TryCancel();
    const grpc::Status status = stream->Finish();
    if (permanent(status.error_code())) {
      log::error("collector " + config_.collector + " refused this agent: " + status.error_message() + " (code " +
                 std::to_string(status.error_code()) + "); batches stay in " + tail_.directory());
      return StreamEnd::kRefused;
    }
    return StreamEnd::kBroken;
  }
  connected_ = true;
  log::info("connected to collector " + config_.collector + " (" + response.welcome().collector() + ")");
  // Whatever was in flight on a broken stream goes again, first and in order.
  while (!in_flight_.empty()) {
    unsent_.push_front(std::move(in_flight_.back()));
    in_flight_.pop_back();
  }

  std::mutex mutex;
  std::condition_variable wake;
  std::deque<uint64_t> acks;
  bool reader_done = false;
  std::thread reader([&] {
    v1::IngestResponse message;
    while (stream->Read(&message)) {
      if (!message.has_ack()) continue;
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
      // end, empty ones (a full disk leaves them) passed one poll at a time.
      do {
        read_new_frames();
      } while (unsent_.empty() && !tail_.caught_up());
      if (unsent_.empty()) {
        end = StreamEnd::kDelivered;  // the agent is gone (killed): all it wrote is stored
        break;
      }
    }
    bool write_failed = false;
    while (in_flight_.size() < config_.window && !unsent_.empty()) {
      if (!stream->Write(unsent_.front().request)) {
        write_failed = true;
        break;
      }
      in_flight_.push_back(std::move(unsent_.front()));
      unsent_.pop_front();
    }
    if (write_failed) break;
  }
  if (end == StreamEnd::kDelivered) {
    stream->WritesDone();
  } else {
    context.TryCancel();
  }
  reader.join();
  const grpc::Status status = stream->Finish();
  if (end == StreamEnd::kDelivered) return end;
  if (permanent(status.error_code())) {
    log::error("collector " + config_.collector + " refused a batch: " + status.error_message() + " (code " +
               std::to_string(status.error_code()) + "); batches stay in " + tail_.directory());
    return StreamEnd::kRefused;
  }
  log::info("stream to " + config_.collector + " broke (" + status.error_message() + "); " +
            std::to_string(in_flight_.size()) + " batches will be sent again");
  return StreamEnd::kBroken;
}

int Forwarder::run() {
  auto backoff = std::chrono::milliseconds(50);
  std::chrono::steady_clock::time_point parent_gone_at{};
  for (;;) {
    const StreamEnd end = stream_once();
    if (end == StreamEnd::kDelivered) {
      tail_.remove_all();
      return 0;
    }
    if (end == StreamEnd::kRefused) return 3;
    if (connected_) backoff = std::chrono::milliseconds(50);
    connected_ = false;
    if (!parent_alive()) {
      const auto now = std::chrono::steady_clock::now();
      if (parent_gone_at == std::chrono::steady_clock::time_point{}) parent_gone_at = now;
      if (now - parent_gone_at > config_.linger) {
        log::error("collector " + config_.collector + " unreachable and the agent is gone; batches stay in " +
                   tail_.directory() + " (load them with `castscope load`)");
        return 4;
      }
    }
    std::this_thread::sleep_for(backoff);
    backoff = std::min(backoff * 2, std::chrono::milliseconds(1000));
  }
}

}  // namespace castscope
