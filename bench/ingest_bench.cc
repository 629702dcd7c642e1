// Ingest benchmark against a running collector:
//
//   castscope_ingest_bench --collector HOST:PORT [--token T] throughput [--seconds 10] [--window 8]
//   castscope_ingest_bench --collector HOST:PORT [--token T] latency [--seconds 10] [--rate 200000]
//   castscope_ingest_bench --collector HOST:PORT [--token T] follow --run RUN_ID [--seconds 10]
//   castscope_ingest_bench --collector HOST:PORT [--token T] fill --events N [--agents 2] [--run RUN_ID] [--prebuild]
//
// throughput: streams pre-built batches of 4096 cast events (interned sites,
// ~50 of them) as fast as acknowledgements allow, `--window` unacked batches
// in flight, and prints sustained events/s. latency: sends `--rate` events/s
// as one batch every 20 ms with ts_ns = CLOCK_MONOTONIC at send time, follows
// the run with Subscribe (messages leave after the commit) and prints the
// percentiles of arrival - ts_ns. follow: the same measurement for the casts
// and ops of a real job (RUN_ID) streaming through its agent and forwarder,
// so ring, exporter and forwarder are in the number too. fill: a stored
// run that looks like a training job (see TrainingJob) of about N events,
// sent as fast as the collector takes them; each agent ends with its final
// batch, so the run is finished; --prebuild builds every batch before the
// clock starts, so the rate is the collector's.
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <time.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "castscope/v1/transport.grpc.pb.h"
#include "server/testing/batch_builder.h"

namespace v1 = castscope::v1;
namespace fixtures = castscope::collector::testing;

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
  for (const char* op : kOps) next_id = fixtures::add_strings(body, next_id, {op});
  fixtures::add_strings(body, next_id, {"input", "weight", "bias", "self", "mat2"});
  for (int site = 0; site < kSites; ++site)
    fixtures::add_location(body, static_cast<uint32_t>(site + 1),
                           {.kind = v1::SourceLocation::KIND_PYTHON,
                            .file = "/home/user/project/model/layers_" + std::to_string(site % 7) + ".py",
                            .line = static_cast<uint32_t>(100 + site * 3), .function = "forward"});
  for (int i = 0; i < events; ++i) {
    const int site = i % kSites;
    const bool weight = i % 3 == 1;
    fixtures::add<v1::specs::CastEvent>(body, {.seq = first_seq + static_cast<uint64_t>(i),
                                               .ts_ns = ts_ns + static_cast<uint64_t>(i),
                                               .thread = static_cast<uint32_t>(i % 4),
                                               .arg_index = static_cast<uint32_t>(i % 3), .list_index = -1,
                                               .policy = v1::CAST_POLICY_LOWER_PRECISION_FP,
                                               .src_dtype = v1::DTYPE_FLOAT32, .dst_dtype = v1::DTYPE_FLOAT16,
                                               .outcome = v1::CAST_OUTCOME_CAST, .shape = {64, 1024},
                                               .bytes = 64 * 1024 * 4, .device_type = v1::DEVICE_TYPE_CUDA,
                                               .op_seq = first_seq + static_cast<uint64_t>(i - i % 3),
                                               .role = weight ? v1::ROLE_WEIGHT : v1::ROLE_ACTIVATION,
                                               .cache = weight ? v1::CACHE_OUTCOME_HIT
                                                               : v1::CACHE_OUTCOME_NOT_CACHEABLE,
                                               .source_version = weight ? 7 : 0, .cached_version = weight ? 7 : 0,
                                               .mode = v1::EXECUTION_MODE_EAGER, .phase = v1::PHASE_FORWARD,
                                               .op_id = static_cast<uint32_t>(1 + site % 10),
                                               .arg_name_id = static_cast<uint32_t>(11 + i % 5),
                                               .location_id = static_cast<uint32_t>(site + 1)});
  }
  return body.SerializeAsString();
}

std::string ingest_request(const std::string& run_id, const std::string& agent_id, uint64_t sequence,
                           const std::string& body) {
  v1::Batch head = fixtures::batch_head({.run_id = run_id, .agent_id = agent_id, .pid = 4242}, sequence);
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
               "usage: castscope_ingest_bench --collector HOST:PORT [--token T] throughput|latency|follow|fill\n"
               "       [--seconds N] [--window N] [--streams N (throughput)] [--rate EVENTS_PER_S] [--run RUN_ID]\n"
               "       [--events N --agents N --prebuild (fill)]\n");
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


// A data-parallel training job as an agent would record it, in simulated
// time: per step a forward pass on the main thread (thread 0) and a backward
// pass on the autograd thread (thread 1), ops 20-300 us long a few us apart,
// casts inside the autocast ops (weights hit the cast cache after the first
// step), one GPU kernel per op and per cast on device 0 stream 7, an
// optimizer gap between steps. About 1000 events per step, ~40 ms per step.
class TrainingJob {
 public:
  explicit TrainingJob(uint64_t seed) : rng_(seed) {}

  // Appends the events of one step, ts from `now`; returns the new now.
  uint64_t step(v1::Batch& batch, uint64_t now, uint64_t& seq) {
    const bool first_step = step_ == 0;
    for (int i = 0; i < kForwardOps; ++i) now = op(batch, now, seq, i, 0, v1::PHASE_FORWARD, first_step);
    now += 50'000;  // loss, backward starts
    for (int i = 0; i < kBackwardOps; ++i) now = op(batch, now, seq, i, 1, v1::PHASE_BACKWARD, first_step);
    ++step_;
    return now + 2'000'000 + next(1'000'000);  // optimizer step, data loading
  }

  static void add_strings(v1::Batch& batch) {
    uint32_t id = 1;
    for (const char* op : kOps) id = fixtures::add_strings(batch, id, {op});
    fixtures::add_strings(batch, id,
                          {"input", "weight", "self", "mat2", "other",
                           "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64_warpgroupsize1x1x1",
                           "void at::native::unrolled_elementwise_kernel<at::native::direct_copy_kernel_cuda>",
                           "void at::native::vectorized_elementwise_kernel<4, at::native::BinaryFunctor>"});
    for (int site = 0; site < kSites; ++site)
      fixtures::add_location(batch, static_cast<uint32_t>(site + 1),
                             {.kind = v1::SourceLocation::KIND_PYTHON,
                              .file = "/home/user/project/model/block_" + std::to_string(site % 6) + ".py",
                              .line = static_cast<uint32_t>(40 + site * 7),
                              .function = site % 2 == 0 ? "forward" : "_attention"});
  }

 private:
  static constexpr int kForwardOps = 120, kBackwardOps = 200;
  static constexpr const char* kOps[] = {"aten::linear", "aten::matmul", "aten::conv2d", "aten::addmm",
                                         "aten::bmm", "aten::softmax.int", "aten::layer_norm", "aten::gelu",
                                         "aten::add.Tensor", "aten::mse_loss"};
  static constexpr uint32_t kArgNames = 11, kKernelGemm = 16, kKernelCopy = 17, kKernelElementwise = 18;

  uint64_t next(uint64_t bound) {
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 7;
    rng_ ^= rng_ << 17;
    return rng_ % bound;
  }

  uint64_t op(v1::Batch& batch, uint64_t now, uint64_t& seq, int index, uint32_t thread, v1::Phase phase,
              bool first_step) {
    const int kind = index % 10;  // 0-4: lower precision, 5-6: fp32, 7-9: promote / not autocast
    const uint32_t site = static_cast<uint32_t>((index * 7 + (phase == v1::PHASE_BACKWARD ? 3 : 0)) % kSites);
    const uint64_t start = now + 2'000 + next(15'000);
    const uint64_t duration = (kind < 5 ? 80'000 : 20'000) + next(kind < 5 ? 220'000 : 60'000);
    const uint64_t op_seq = ++seq;
    const v1::CastPolicy policy =
        kind < 5 ? v1::CAST_POLICY_LOWER_PRECISION_FP : kind < 7 ? v1::CAST_POLICY_FP32 : v1::CAST_POLICY_PROMOTE;
    const uint32_t op_id = 1 + static_cast<uint32_t>(kind);
    fixtures::add<v1::specs::OpEvent>(batch, {.seq = op_seq, .ts_ns = start, .thread = thread, .policy = policy,
                                              .device_type = v1::DEVICE_TYPE_CUDA,
                                              .input_dtypes = {v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT32},
                                              .output_dtype = kind < 5 ? v1::DTYPE_BFLOAT16 : v1::DTYPE_FLOAT32,
                                              .cpu_duration_ns = duration, .outcome = v1::OP_OUTCOME_OK,
                                              .autocast_dtype = v1::DTYPE_BFLOAT16, .mode = v1::EXECUTION_MODE_EAGER,
                                              .phase = phase, .autocast_enabled = {v1::DEVICE_TYPE_CUDA},
                                              .autocast_nesting = 1, .op_id = op_id, .location_id = site + 1});
    // Forward lower-precision ops cast their input and weight; fp32 ops their
    // input; in backward a third of the ops cast a gradient.
    int casts = kind < 5 ? 2 : kind < 7 ? 1 : 0;
    if (phase == v1::PHASE_BACKWARD) casts = index % 3 == 0 && kind < 7 ? 1 : 0;
    for (int a = 0; a < casts; ++a) {
      const bool weight = a == 1 && phase == v1::PHASE_FORWARD;
      const uint64_t cast_seq = ++seq;
      const uint64_t cast_ts = start + 1'000 + static_cast<uint64_t>(a) * 4'000 + next(2'000);
      fixtures::add<v1::specs::CastEvent>(batch,
                         {.seq = cast_seq, .ts_ns = cast_ts, .thread = thread, .arg_index = static_cast<uint32_t>(a),
                          .list_index = -1, .policy = policy,
                          .src_dtype = kind < 5 ? v1::DTYPE_FLOAT32 : v1::DTYPE_BFLOAT16,
                          .dst_dtype = kind < 5 ? v1::DTYPE_BFLOAT16 : v1::DTYPE_FLOAT32,
                          .outcome = v1::CAST_OUTCOME_CAST,
                          .shape = weight ? std::vector<int64_t>{1024, 1024} : std::vector<int64_t>{32, 512, 1024},
                          .bytes = (weight ? 1024ull * 1024 : 32ull * 512 * 1024) * (kind < 5 ? 4 : 2),
                          .device_type = v1::DEVICE_TYPE_CUDA, .op_seq = op_seq,
                          .role = weight ? v1::ROLE_WEIGHT : v1::ROLE_ACTIVATION,
                          .cache = weight ? (first_step ? v1::CACHE_OUTCOME_MISS : v1::CACHE_OUTCOME_HIT)
                                          : v1::CACHE_OUTCOME_NOT_CACHEABLE,
                          .source_version = weight ? 3 : 0, .cached_version = weight && !first_step ? 3 : 0,
                          .mode = v1::EXECUTION_MODE_EAGER, .phase = phase, .op_id = op_id,
                          .arg_name_id = kArgNames + static_cast<uint32_t>(a), .location_id = site + 1});
      kernel(batch, cast_ts + 6'000, 3'000 + next(6'000), kKernelCopy, v1::LAUNCHED_BY_CAST, cast_seq, seq);
    }
    kernel(batch, start + duration / 2, duration / 2 + next(duration / 2), kind < 5 ? kKernelGemm : kKernelElementwise,
           v1::LAUNCHED_BY_OP, op_seq, seq);
    return start + duration;
  }

  void kernel(v1::Batch& batch, uint64_t ts, uint64_t duration, uint32_t name_id, v1::LaunchedBy by,
              uint64_t launch_seq, uint64_t& seq) {
    fixtures::add<v1::specs::KernelEvent>(batch, {.seq = ++seq, .ts_ns = ts, .duration_ns = duration,
                                                  .activity = v1::GPU_ACTIVITY_KERNEL, .device = 0, .stream = 7,
                                                  .launched_by = by, .launch_seq = launch_seq, .name_id = name_id});
  }

  uint64_t rng_;
  uint64_t step_ = 0;
};

// fill: `agents` ranks of one run, each on its own connection, until about
// `events` events are stored; batches of about 4096 events, as the agent's
// exporter makes at a high rate.
// With `prebuild`, every batch is built and serialized first and the clock
// starts when all agents are ready: the rate is then the collector's, not the
// time this process takes to build batches.
int fill_run(const std::string& collector, const std::string& token, std::string run_id, uint64_t events,
             int agents, bool prebuild) {
  if (run_id.empty()) run_id = "train-" + std::to_string(monotonic_ns());
  const uint64_t origin = monotonic_ns();
  auto started = std::chrono::steady_clock::now();
  std::mutex ready_mutex;
  std::condition_variable ready_changed;
  int ready = 0;
  std::vector<std::thread> threads;
  std::vector<uint64_t> sent(static_cast<size_t>(agents), 0), simulated(static_cast<size_t>(agents), 0);
  std::vector<std::string> errors(static_cast<size_t>(agents));
  for (int a = 0; a < agents; ++a) {
    threads.emplace_back([&, a] {
      grpc::ChannelArguments arguments;
      arguments.SetInt("castscope.bench.stream", a);
      auto channel = grpc::CreateCustomChannel(collector, grpc::InsecureChannelCredentials(), arguments);
      grpc::GenericStub stub(channel);
      std::unique_ptr<IngestClient> client;
      if (!prebuild) client = std::make_unique<IngestClient>(stub, token, 8);
      std::vector<std::string> built;
      TrainingJob job(0x9e3779b97f4a7c15ull + static_cast<uint64_t>(a));
      const std::string agent_id = "train-host-" + std::to_string(1000 + a) + "-" + std::to_string(origin);
      uint64_t seq = 0, sequence = 0, now = origin + static_cast<uint64_t>(a) * 150'000;
      const uint64_t mine = events / static_cast<uint64_t>(agents);
      while (seq < mine) {
        v1::Batch batch = fixtures::batch_head(
            {.run_id = run_id, .agent_id = agent_id, .pid = static_cast<uint32_t>(1000 + a), .rank = a, .local_rank = a,
             .world_size = agents, .hostname = "train-host",
             .command = "python train.py --amp bf16 (castscope_ingest_bench fill)"},
            ++sequence);
        TrainingJob::add_strings(batch);
        while (batch.events_size() < kEventsPerBatch - 1200 && seq < mine) now = job.step(batch, now, seq);
        batch.set_events_recorded_total(seq);
        batch.set_final(seq >= mine);
        v1::IngestRequest request;
        *request.mutable_batch() = std::move(batch);
        if (prebuild) built.push_back(request.SerializeAsString());
        else client->send(to_buffer(request.SerializeAsString()));
      }
      if (prebuild) {
        client = std::make_unique<IngestClient>(stub, token, 8);
        {
          std::unique_lock lock(ready_mutex);
          if (++ready == agents) {
            started = std::chrono::steady_clock::now();
            ready_changed.notify_all();
          }
          ready_changed.wait(lock, [&] { return ready == agents; });
        }
        for (const std::string& request : built) client->send(to_buffer(request));
      }
      const grpc::Status status = client->finish();
      sent[static_cast<size_t>(a)] = seq;
      simulated[static_cast<size_t>(a)] = now - origin;
      if (!status.ok()) errors[static_cast<size_t>(a)] = status.error_message();
    });
  }
  for (auto& thread : threads) thread.join();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  uint64_t total = 0;
  for (uint64_t n : sent) total += n;
  std::string error;
  for (const auto& e : errors)
    if (error.empty() && !e.empty()) error = e;
  std::printf("fill: run %s, %d agents, %llu events stored in %.1f s (%.0f events/s), %.1f s of simulated run%s%s\n",
              run_id.c_str(), agents, static_cast<unsigned long long>(total), elapsed, static_cast<double>(total) / elapsed,
              static_cast<double>(*std::max_element(simulated.begin(), simulated.end())) / 1e9,
              error.empty() ? "" : "; stream error: ", error.c_str());
  return error.empty() ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  std::string collector, token, mode, follow_run_id;
  double seconds = 10;
  size_t window = 8;
  size_t streams = 1;
  double rate = 200000;
  uint64_t fill_events = 10'000'000;
  int agents = 2;
  bool prebuild = false;
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
    else if (word == "--events" && has_value) fill_events = std::stoull(argv[++i]);
    else if (word == "--agents" && has_value) agents = std::max(1, std::stoi(argv[++i]));
    else if (word == "--prebuild") prebuild = true;
    else if (word == "throughput" || word == "latency" || word == "follow" || word == "fill") mode = word;
    else return usage();
  }
  if (collector.empty() || mode.empty()) return usage();

  auto channel = grpc::CreateChannel(collector, grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  const std::string run_id = "bench-" + std::to_string(monotonic_ns());
  if (mode == "fill") return fill_run(collector, token, follow_run_id, fill_events, agents, prebuild);
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
