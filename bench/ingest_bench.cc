// Ingest benchmark against a running collector:
//
//   castscope_ingest_bench --collector HOST:PORT [--token T] throughput [--seconds 10] [--window 8]
//   castscope_ingest_bench --collector HOST:PORT [--token T] latency [--seconds 10] [--rate 200000]
//   castscope_ingest_bench --collector HOST:PORT [--token T] follow --run RUN_ID [--seconds 10]
//
// throughput: streams pre-built batches of 4096 cast events (interned sites,
// ~50 of them) as fast as acknowledgements allow, `--window` unacked batches
// in flight, and prints sustained events/s. latency: sends `--rate` events/s
// as one batch every 20 ms with ts_ns = CLOCK_MONOTONIC at send time, follows
// the run with Subscribe (messages leave after the commit) and prints the
// percentiles of arrival - ts_ns. follow: the same measurement for the casts
// and ops of a real job (RUN_ID) streaming through its agent and forwarder,
// so ring, exporter and forwarder are in the number too.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "castscope/v1/transport.grpc.pb.h"

namespace v1 = castscope::v1;

namespace {

constexpr int kEventsPerBatch = 4096;
constexpr int kSites = 50;

uint64_t monotonic_ns() {
  timespec now{};
  clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<uint64_t>(now.tv_sec) * 1'000'000'000u + static_cast<uint64_t>(now.tv_nsec);
}

// Strings, locations and events of one batch (protobuf fields 4-9). Batch
// fields may come in any order on the wire, so the head (identity,
// sequence) is serialized per message and prepended.
std::string batch_body(uint64_t first_seq, int events, uint64_t ts_ns) {
  static const char* kOps[] = {"aten::linear", "aten::matmul", "aten::conv2d", "aten::addmm", "aten::bmm",
                               "aten::baddbmm", "aten::softmax.int", "aten::layer_norm", "aten::mse_loss",
                               "aten::scaled_dot_product_attention"};
  v1::Batch body;
  uint32_t next_id = 1;
  for (const char* op : kOps) {
    auto* entry = body.add_strings();
    entry->set_id(next_id++);
    entry->set_text(op);
  }
  for (const char* name : {"input", "weight", "bias", "self", "mat2"}) {
    auto* entry = body.add_strings();
    entry->set_id(next_id++);
    entry->set_text(name);
  }
  for (int site = 0; site < kSites; ++site) {
    auto* entry = body.add_locations();
    entry->set_id(static_cast<uint32_t>(site + 1));
    v1::SourceLocation& location = *entry->mutable_location();
    location.set_kind(v1::SourceLocation::KIND_PYTHON);
    location.set_file("/home/user/project/model/layers_" + std::to_string(site % 7) + ".py");
    location.set_line(static_cast<uint32_t>(100 + site * 3));
    location.set_function("forward");
  }
  for (int i = 0; i < events; ++i) {
    v1::CastEvent& cast = *body.add_events()->mutable_cast();
    const int site = i % kSites;
    cast.set_seq(first_seq + static_cast<uint64_t>(i));
    cast.set_ts_ns(ts_ns + static_cast<uint64_t>(i));
    cast.set_thread(static_cast<uint32_t>(i % 4));
    cast.set_op_id(static_cast<uint32_t>(1 + site % 10));
    cast.set_arg_index(static_cast<uint32_t>(i % 3));
    cast.set_arg_name_id(static_cast<uint32_t>(11 + i % 5));
    cast.set_list_index(-1);
    cast.set_policy(v1::CAST_POLICY_LOWER_PRECISION_FP);
    cast.set_src_dtype(v1::DTYPE_FLOAT32);
    cast.set_dst_dtype(v1::DTYPE_FLOAT16);
    cast.set_outcome(v1::CAST_OUTCOME_CAST);
    cast.add_shape(64);
    cast.add_shape(1024);
    cast.set_bytes(64 * 1024 * 4);
    cast.set_device_type(v1::DEVICE_TYPE_CUDA);
    cast.set_op_seq(first_seq + static_cast<uint64_t>(i) - static_cast<uint64_t>(i % 3));
    cast.set_role(i % 3 == 1 ? v1::ROLE_WEIGHT : v1::ROLE_ACTIVATION);
    cast.set_cache(i % 3 == 1 ? v1::CACHE_OUTCOME_HIT : v1::CACHE_OUTCOME_NOT_CACHEABLE);
    cast.set_source_version(i % 3 == 1 ? 7 : 0);
    cast.set_cached_version(i % 3 == 1 ? 7 : 0);
    cast.set_location_id(static_cast<uint32_t>(site + 1));
    cast.set_mode(v1::EXECUTION_MODE_EAGER);
    cast.set_phase(v1::PHASE_FORWARD);
  }
  return body.SerializeAsString();
}

std::string ingest_request(const std::string& run_id, const std::string& agent_id, uint64_t sequence,
                           const std::string& body) {
  v1::Batch head;
  head.set_protocol_version(v1::ProtocolVersion_MAX);
  head.mutable_agent()->set_run_id(run_id);
  head.mutable_agent()->set_agent_id(agent_id);
  head.mutable_agent()->set_pid(4242);
  head.set_sequence(sequence);
  head.set_events_recorded_total(sequence * kEventsPerBatch);
  const std::string batch = head.SerializeAsString() + body;
  std::string request(1, '\x12');  // IngestRequest.batch: field 2, length-delimited
  for (uint64_t length = batch.size(); ; length >>= 7) {
    if (length < 0x80) {
      request.push_back(static_cast<char>(length));
      break;
    }
    request.push_back(static_cast<char>((length & 0x7f) | 0x80));
  }
  return request + batch;
}

grpc::ByteBuffer to_buffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

// One Ingest stream: sends what the producer queues, at most `window`
// batches unacknowledged.
class IngestClient : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  IngestClient(grpc::GenericStub& stub, const std::string& token, size_t window) : window_(window) {
    if (!token.empty()) context_.AddMetadata("authorization", "Bearer " + token);
    stub.PrepareBidiStreamingCall(&context_, "/castscope.v1.Ingest/Stream", grpc::StubOptions(), this);
    v1::IngestRequest hello;
    hello.mutable_hello()->set_protocol_version(v1::ProtocolVersion_MAX);
    hello.mutable_hello()->set_client("castscope_ingest_bench");
    hello_ = to_buffer(hello.SerializeAsString());
    StartRead(&read_);
    StartWrite(&hello_);
    StartCall();
  }

  // Blocks while the queue is long (the window is full).
  void send(grpc::ByteBuffer message) {
    std::unique_lock lock(mutex_);
    room_.wait(lock, [&] { return queued_.size() < 2 || done_; });
    queued_.push_back(std::move(message));
    write_next_locked();
  }

  // Half-closes once everything queued is acknowledged; returns the status.
  grpc::Status finish() {
    std::unique_lock lock(mutex_);
    closing_ = true;
    write_next_locked();
    finished_.wait(lock, [&] { return done_; });
    return status_;
  }

  uint64_t acked() {
    std::lock_guard lock(mutex_);
    return acked_;
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mutex_);
    writing_ = false;
    if (ok) write_next_locked();
  }

  void OnReadDone(bool ok) override {
    if (!ok) return;
    v1::IngestResponse response;
    std::vector<grpc::Slice> slices;
    (void)read_.Dump(&slices);
    std::string bytes;
    for (const auto& slice : slices) bytes.append(reinterpret_cast<const char*>(slice.begin()), slice.size());
    response.ParseFromString(bytes);
    {
      std::lock_guard lock(mutex_);
      if (response.has_ack()) {
        ++acked_;
        --in_flight_;
      }
      write_next_locked();
    }
    StartRead(&read_);
  }

  void OnDone(const grpc::Status& status) override {
    std::lock_guard lock(mutex_);
    status_ = status;
    done_ = true;
    finished_.notify_all();
    room_.notify_all();
  }

 private:
  void write_next_locked() {
    if (writing_ || done_) return;
    if (!queued_.empty() && in_flight_ < window_) {
      writing_ = true;
      ++in_flight_;
      current_ = std::move(queued_.front());
      queued_.pop_front();
      room_.notify_all();
      StartWrite(&current_);
    } else if (closing_ && queued_.empty() && in_flight_ == 0 && !half_closed_) {
      half_closed_ = true;
      StartWritesDone();
    }
  }

  const size_t window_;
  grpc::ClientContext context_;
  grpc::ByteBuffer hello_, read_, current_;
  std::mutex mutex_;
  std::condition_variable room_, finished_;
  std::deque<grpc::ByteBuffer> queued_;
  size_t in_flight_ = 0;
  uint64_t acked_ = 0;
  bool writing_ = true;  // the hello
  bool closing_ = false, half_closed_ = false, done_ = false;
  grpc::Status status_;
};

int usage() {
  std::fprintf(stderr,
               "usage: castscope_ingest_bench --collector HOST:PORT [--token T] throughput|latency|follow\n"
               "       [--seconds N] [--window N] [--streams N (throughput)] [--rate EVENTS_PER_S] [--run RUN_ID]\n");
  return 2;
}

// Prints "<label>: N events, skipped S: p50, p99, max" of arrival - ts_ns.
bool print_latencies(const char* label, std::vector<uint64_t>& latencies, uint64_t skipped, const std::string& extra) {
  if (latencies.empty()) {
    std::printf("%s: no events arrived on the subscription\n", label);
    return false;
  }
  std::sort(latencies.begin(), latencies.end());
  auto percentile = [&](double p) {
    return static_cast<double>(latencies[std::min(latencies.size() - 1, static_cast<size_t>(p * latencies.size()))]) / 1e6;
  };
  std::printf("%s: %zu events%s, skipped %llu: p50 %.1f ms, p99 %.1f ms, max %.1f ms\n", label, latencies.size(),
              extra.c_str(), static_cast<unsigned long long>(skipped), percentile(0.5), percentile(0.99),
              static_cast<double>(latencies.back()) / 1e6);
  return true;
}

// Follows `run_id` for `seconds`, recording arrival - ts_ns of casts and ops.
int follow_run(const std::shared_ptr<grpc::Channel>& channel, const std::string& token, const std::string& run_id,
               double seconds) {
  auto subscribe = v1::Subscribe::NewStub(channel);
  grpc::ClientContext context;
  if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
  context.set_deadline(std::chrono::system_clock::now() + std::chrono::duration_cast<std::chrono::milliseconds>(
                                                               std::chrono::duration<double>(seconds)));
  v1::SubscribeRequest request;
  request.set_run_id(run_id);
  auto follow = subscribe->Follow(&context, request);
  std::vector<uint64_t> latencies;
  uint64_t skipped = 0;
  v1::SubscribeResponse response;
  while (follow->Read(&response)) {
    const uint64_t now = monotonic_ns();
    skipped += response.skipped();
    for (const auto& stored : response.events()) {
      const auto& event = stored.event();
      const uint64_t ts = event.has_cast() ? event.cast().ts_ns() : event.has_op() ? event.op().ts_ns() : 0;
      if (ts != 0) latencies.push_back(now - ts);
    }
  }
  return print_latencies("follow", latencies, skipped, " of run " + run_id) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string collector, token, mode, follow_run_id;
  double seconds = 10;
  size_t window = 8;
  size_t streams = 1;
  double rate = 200000;
  for (int i = 1; i < argc; ++i) {
    const std::string word = argv[i];
    const bool has_value = i + 1 < argc;
    if (word == "--collector" && has_value) collector = argv[++i];
    else if (word == "--token" && has_value) token = argv[++i];
    else if (word == "--seconds" && has_value) seconds = std::stod(argv[++i]);
    else if (word == "--window" && has_value) window = std::stoul(argv[++i]);
    else if (word == "--streams" && has_value) streams = std::max<size_t>(1, std::stoul(argv[++i]));
    else if (word == "--rate" && has_value) rate = std::stod(argv[++i]);
    else if (word == "--run" && has_value) follow_run_id = argv[++i];
    else if (word == "throughput" || word == "latency" || word == "follow") mode = word;
    else return usage();
  }
  if (collector.empty() || mode.empty()) return usage();

  auto channel = grpc::CreateChannel(collector, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  const std::string run_id = "bench-" + std::to_string(monotonic_ns());
  if (mode == "follow") {
    if (follow_run_id.empty()) return usage();
    return follow_run(channel, token, follow_run_id, seconds);
  }

  if (mode == "throughput") {
    // 32 bodies with distinct seq ranges; a new agent every 32 batches keeps every event new.
    constexpr int kBodies = 32;
    std::vector<std::string> bodies;
    for (int b = 0; b < kBodies; ++b) bodies.push_back(batch_body(uint64_t{1} + b * kEventsPerBatch, kEventsPerBatch, 1));
    // Each stream on a connection of its own, as forwarders are.
    std::vector<std::thread> threads;
    std::vector<uint64_t> acked(streams, 0);
    std::vector<std::string> errors(streams);
    const auto start = std::chrono::steady_clock::now();
    const auto end = start + std::chrono::duration<double>(seconds);
    for (size_t s = 0; s < streams; ++s) {
      threads.emplace_back([&, s] {
        grpc::ChannelArguments arguments;
        arguments.SetInt("castscope.bench.stream", static_cast<int>(s));  // no shared subchannel
        auto own_channel = grpc::CreateCustomChannel(collector, grpc::InsecureChannelCredentials(), arguments);
        grpc::GenericStub own_stub(own_channel);
        IngestClient client(own_stub, token, window);
        uint64_t sent = 0;
        while (std::chrono::steady_clock::now() < end) {
          const std::string agent = "agent-" + std::to_string(s) + "-" + std::to_string(sent / kBodies);
          client.send(to_buffer(ingest_request(run_id, agent, sent % kBodies + 1, bodies[sent % kBodies])));
          ++sent;
        }
        const grpc::Status status = client.finish();
        acked[s] = client.acked();
        if (!status.ok()) errors[s] = status.error_message();
      });
    }
    for (auto& thread : threads) thread.join();
    const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    uint64_t total = 0;
    std::string error;
    for (size_t s = 0; s < streams; ++s) {
      total += acked[s];
      if (error.empty() && !errors[s].empty()) error = errors[s];
    }
    std::printf("throughput: %llu batches x %d cast events acknowledged in %.2f s: %.0f events/s (window %zu, %zu "
                "streams)%s%s\n",
                static_cast<unsigned long long>(total), kEventsPerBatch, elapsed,
                static_cast<double>(total) * kEventsPerBatch / elapsed, window, streams,
                error.empty() ? "" : "; stream error: ", error.c_str());
    return error.empty() ? 0 : 1;
  }

  // Latency: follow the run, then send paced batches.
  auto subscribe = v1::Subscribe::NewStub(channel);
  grpc::ClientContext follow_context;
  if (!token.empty()) follow_context.AddMetadata("authorization", "Bearer " + token);
  v1::SubscribeRequest request;
  request.set_run_id(run_id);
  auto follow = subscribe->Follow(&follow_context, request);
  std::vector<uint64_t> latencies;
  uint64_t skipped = 0;
  std::thread reader([&] {
    v1::SubscribeResponse response;
    while (follow->Read(&response)) {
      const uint64_t now = monotonic_ns();
      skipped += response.skipped();
      for (const auto& stored : response.events()) latencies.push_back(now - stored.event().cast().ts_ns());
    }
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the subscription is in place

  const auto period = std::chrono::milliseconds(20);
  const int per_batch = std::max(1, static_cast<int>(rate * 0.02));
  IngestClient client(stub, token, window);
  const auto start = std::chrono::steady_clock::now();
  uint64_t sequence = 0;
  for (auto next = start; next < start + std::chrono::duration<double>(seconds); next += period) {
    std::this_thread::sleep_until(next);
    ++sequence;
    client.send(to_buffer(
        ingest_request(run_id, "agent-0", sequence, batch_body((sequence - 1) * per_batch + 1, per_batch, monotonic_ns()))));
  }
  const grpc::Status status = client.finish();
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  follow_context.TryCancel();
  reader.join();
  const std::string extra = " at " + std::to_string(static_cast<long>(rate)) + " events/s (" + std::to_string(per_batch) +
                            " per 20 ms batch)" + (status.ok() ? "" : "; stream error: " + status.error_message());
  return print_latencies("latency", latencies, skipped, extra) && status.ok() ? 0 : 1;
}
