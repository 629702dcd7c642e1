#include "server/src/service/grpc_services.h"

#include <grpcpp/support/proto_buffer_reader.h>
#include <malloc.h>

#include <atomic>
#include <deque>
#include <mutex>

#include "castscope/v1/transport.grpc.pb.h"
#include "common/log/logger.h"
#include "common/log/rate_limited.h"
#include "common/version/castscope_version.h"
#include "server/src/store/store_reader.h"

namespace castscope::collector {

namespace v1 = castscope::v1;

namespace {

constexpr size_t kEventsPerFollowMessage = 1024;  // keeps messages well under clients' 4 MiB default

// A line per stream or request: many clients (or one misbehaving) would flood the log.
log::RateLimited& stream_warnings() {
  static auto* limited = new log::RateLimited(log::logger("collector"), "ingest stream warnings");
  return *limited;
}
log::RateLimited& query_warnings() {
  static auto* limited = new log::RateLimited(log::logger("collector"), "query and subscribe rejections");
  return *limited;
}

const char* code_name(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::INVALID_ARGUMENT:
      return "INVALID_ARGUMENT";
    case grpc::StatusCode::FAILED_PRECONDITION:
      return "FAILED_PRECONDITION";
    case grpc::StatusCode::UNAUTHENTICATED:
      return "UNAUTHENTICATED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED:
      return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::UNAVAILABLE:
      return "UNAVAILABLE";
    default:
      return "INTERNAL";
  }
}

grpc::ByteBuffer serialize(const google::protobuf::MessageLite& message) {
  std::string bytes = message.SerializeAsString();
  grpc::Slice slice(std::move(bytes));
  return grpc::ByteBuffer(&slice, 1);
}

// Reads Hello, then batches; each batch is validated here (on the gRPC
// thread, in parallel with the writer) and acknowledged once committed.
// Owned by shared_ptr: acks may arrive from the writer thread after gRPC
// is done with the stream; `finished_` (under mutex_) stops them from
// touching the call.
class IngestReactor : public grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>,
                      public IdleTrackedStream,
                      public std::enable_shared_from_this<IngestReactor> {
 public:
  IngestReactor(CollectorCore& core, const BatchLimits& limits, std::string peer, std::function<void()> on_done)
      : limits_(limits), peer_(std::move(peer)), on_done_(std::move(on_done)), metrics_(core.metrics()), stream_(core) {}

  std::chrono::steady_clock::time_point last_message() const override {
    return std::chrono::steady_clock::time_point(std::chrono::steady_clock::duration(last_message_.load()));
  }
  bool greeted() const override { return greeted_.load(); }
  bool end_idle(const std::string& why) override {
    std::lock_guard lock(mutex_);
    if (finished_ || failing_) return false;
    stream_warnings().warn("ingest stream from {} {}", peer_, why);
    failing_ = true;
    failure_ = grpc::Status(grpc::StatusCode::UNAVAILABLE, why);
    finish_if_done_locked();
    return true;
  }

  void start(const grpc::Status& auth) {
    self_ = shared_from_this();
    std::lock_guard lock(mutex_);
    if (!auth.ok()) {
      fail_locked(auth);
      return;
    }
    StartRead(&read_buffer_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // the client closed its side
      std::lock_guard lock(mutex_);
      read_done_ = true;
      finish_if_done_locked();
      return;
    }
    ++messages_;
    last_message_.store(std::chrono::steady_clock::now().time_since_epoch().count());
    const size_t wire_bytes = read_buffer_.Length();
    BatchArena arena(wire_bytes);
    auto* request = google::protobuf::Arena::CreateMessage<v1::IngestRequest>(arena.get());
    grpc::ProtoBufferReader reader(&read_buffer_);
    const bool parsed = request->ParseFromZeroCopyStream(&reader);
    read_buffer_.Clear();
    if (!parsed) {
      metrics_.reject_batch(RejectReason::kMalformed, 0);  // its events cannot be counted
      return fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "message " + std::to_string(messages_.load()) + " is not a valid castscope.v1.IngestRequest (" +
                                   std::to_string(wire_bytes) + " bytes)"));
    }
    if (!hello_done_) return on_hello(*request);
    if (request->kind_case() != v1::IngestRequest::kBatch) {
      metrics_.reject_stream(RejectReason::kProtocol);
      return fail(grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                               "message " + std::to_string(messages_.load()) + ": " +
                                   (request->has_hello() ? "Hello repeated" : "neither Hello nor Batch")));
    }
    BatchTimeline timeline;
    if (Status s = validate_batch(request->batch(), limits_, &timeline); !s.ok()) {
      metrics_.reject_batch(RejectReason::kInvalidBatch, static_cast<uint64_t>(request->batch().events_size()));
      return fail(to_grpc(Status(s.code(), "batch " + std::to_string(request->batch().sequence()) + " of agent " +
                                               request->batch().agent().agent_id() + ": " + s.message())));
    }
    on_batch(DecodedBatch(std::move(arena), &request->batch(), timeline));
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mutex_);
    writing_ = false;
    if (!ok) {
      fail_locked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed: the client went away"));
      return;
    }
    write_next_locked();
    finish_if_done_locked();
  }

  // The client cancelled, or gRPC ended the call (e.g. a message over the size limit).
  void OnCancel() override {
    std::lock_guard lock(mutex_);
    if (!finished_)
      stream_warnings().warn("ingest stream from {} cancelled after {} messages ({} batches still being stored)", peer_,
                           messages_.load(), pending_acks_);
    finish_locked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    if (on_done_) on_done_();
    self_.reset();
  }

 private:
  // Reads the next batch once the core admits it (read_admission.h); the
  // resume holds no reference, so a stream that ends meanwhile is not kept.
  void request_read() {
    std::weak_ptr<IngestReactor> weak = weak_from_this();
    const bool admitted = stream_.admit_read([weak] {
      if (auto self = weak.lock()) {
        std::lock_guard lock(self->mutex_);
        if (!self->finished_ && !self->failing_) self->StartRead(&self->read_buffer_);
      }
    });
    if (!admitted) return;
    std::lock_guard lock(mutex_);
    if (!finished_ && !failing_) StartRead(&read_buffer_);
  }

  void on_hello(const v1::IngestRequest& request) {
    if (!request.has_hello() || request.hello().protocol_version() != kProtocolVersion)
      metrics_.reject_stream(RejectReason::kProtocol);
    if (!request.has_hello())
      return fail(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION, "expected Hello first, got a batch"));
    if (request.hello().protocol_version() != kProtocolVersion)
      return fail(grpc::Status(grpc::StatusCode::FAILED_PRECONDITION,
                               "client speaks protocol version " + std::to_string(request.hello().protocol_version()) +
                                   ", this collector speaks " + std::to_string(kProtocolVersion)));
    hello_done_ = true;
    greeted_.store(true);
    log::logger("collector").debug("ingest stream from {}: {} (agent {})", peer_, request.hello().client(),
                          request.hello().agent_id());
    v1::IngestResponse response;
    response.mutable_welcome()->set_protocol_version(kProtocolVersion);
    response.mutable_welcome()->set_collector(std::string("castscope-collector ") + kCastscopeVersion);
    response.mutable_welcome()->set_collector_version(kCastscopeVersion);
    {
      std::lock_guard lock(mutex_);
      queue_write_locked(serialize(response));
    }
    request_read();
  }

  void on_batch(DecodedBatch batch) {
    const std::string agent_id = batch.batch().agent().agent_id();
    const uint64_t sequence = batch.batch().sequence();
    const auto events = static_cast<uint64_t>(batch.batch().events_size());
    auto self = shared_from_this();
    {
      std::lock_guard lock(mutex_);
      ++pending_acks_;  // before submit: the ack may come first
    }
    IngestDone done = [self, agent_id, sequence](const IngestResult& result) {
      self->on_stored(agent_id, sequence, result);
    };
    bool may_continue = true;  // read admission decides instead
    Status status = stream_.submit(std::move(batch), std::move(done), nullptr, may_continue);
    if (!status.ok()) {
      metrics_.reject_batch(RejectReason::kOutOfOrder, events);
      std::lock_guard lock(mutex_);
      --pending_acks_;
      fail_locked(to_grpc(status));
      return;
    }
    request_read();
  }

  // Writer thread.
  void on_stored(const std::string& agent_id, uint64_t sequence, const IngestResult& result) {
    std::lock_guard lock(mutex_);
    --pending_acks_;
    if (!result.status.ok()) {
      fail_locked(to_grpc(result.status));
      return;
    }
    v1::IngestResponse response;
    v1::BatchAck& ack = *response.mutable_ack();
    ack.set_agent_id(agent_id);
    ack.set_sequence(sequence);
    ack.set_duplicate(result.duplicate);
    queue_write_locked(serialize(response));
    finish_if_done_locked();
  }

  void fail(const grpc::Status& status) {
    std::lock_guard lock(mutex_);
    fail_locked(status);
  }

  // Stops reading; the stream ends with `status` once the acks of batches
  // already taken are written (they are stored: the client should know).
  void fail_locked(const grpc::Status& status) {
    if (finished_ || failing_) return;
    stream_warnings().warn("ingest stream from {} rejected ({}): {}", peer_, code_name(status.error_code()),
                         status.error_message());
    failing_ = true;
    failure_ = status;
    finish_if_done_locked();
  }

  void queue_write_locked(grpc::ByteBuffer message) {
    if (finished_) return;
    writes_.push_back(std::move(message));
    write_next_locked();
  }

  void write_next_locked() {
    if (writing_ || writes_.empty() || finished_) return;
    writing_ = true;
    current_write_ = std::move(writes_.front());
    writes_.pop_front();
    StartWrite(&current_write_);
  }

  void finish_if_done_locked() {
    if ((read_done_ || failing_) && pending_acks_ == 0 && writes_.empty() && !writing_)
      finish_locked(failing_ ? failure_ : grpc::Status::OK);
  }

  void finish_locked(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  const BatchLimits limits_;
  const std::string peer_;
  std::shared_ptr<IngestReactor> self_;  // until OnDone
  const std::function<void()> on_done_;
  CollectorMetrics& metrics_;

  // Read side: only the thread in OnReadDone (one read is outstanding at a time).
  grpc::ByteBuffer read_buffer_;
  IngestStream stream_;
  std::atomic<uint64_t> messages_{0};  // also read by OnCancel
  bool hello_done_ = false;
  // For the idle-stream policy (its sweeper's thread reads them).
  std::atomic<std::chrono::steady_clock::rep> last_message_{std::chrono::steady_clock::now().time_since_epoch().count()};
  std::atomic<bool> greeted_{false};

  std::mutex mutex_;
  std::deque<grpc::ByteBuffer> writes_;
  grpc::ByteBuffer current_write_;
  bool writing_ = false;
  bool read_done_ = false;
  bool failing_ = false;
  bool finished_ = false;
  uint64_t pending_acks_ = 0;
  grpc::Status failure_;
};

// Sends a subscription's chunks as they are committed.
class FollowReactor : public grpc::ServerWriteReactor<v1::SubscribeResponse>,
                      public std::enable_shared_from_this<FollowReactor> {
 public:
  FollowReactor(CollectorCore& core, std::string peer) : core_(core), peer_(std::move(peer)) {}

  void start(const grpc::Status& auth, const std::string& run_id) {
    self_ = shared_from_this();
    if (!auth.ok()) {
      std::lock_guard lock(mutex_);
      finish_locked(auth);
      return;
    }
    // A weak reference: the subscription must not keep a finished call alive.
    std::weak_ptr<FollowReactor> weak = weak_from_this();
    std::lock_guard lock(mutex_);
    subscription_ = core_.subscribe(run_id, [weak] {
      if (auto self = weak.lock()) {
        std::lock_guard lock(self->mutex_);
        self->write_next_locked();
      }
    });
    write_next_locked();
  }

  void OnWriteDone(bool ok) override {
    std::lock_guard lock(mutex_);
    writing_ = false;
    if (!ok) {
      finish_locked(grpc::Status(grpc::StatusCode::UNAVAILABLE, "write failed: the client went away"));
      return;
    }
    write_next_locked();
  }

  void OnCancel() override {
    std::lock_guard lock(mutex_);
    finish_locked(grpc::Status::CANCELLED);
  }

  void OnDone() override {
    if (subscription_) core_.unsubscribe(subscription_);
    self_.reset();
  }

 private:
  void write_next_locked() {
    if (writing_ || finished_) return;
    uint64_t skipped = 0;
    if (!chunk_ || offset_ == chunk_->events.size()) {
      chunk_.reset();
      offset_ = 0;
      if (!subscription_->take(chunk_, skipped)) {
        if (subscription_->closed()) finish_locked(grpc::Status::OK);
        return;
      }
    }
    response_.Clear();
    response_.set_skipped(skipped);
    if (chunk_) {
      response_.set_stored_unix_ns(chunk_->stored_unix_ns);
      const size_t end = std::min(chunk_->events.size(), offset_ + kEventsPerFollowMessage);
      for (; offset_ < end; ++offset_) *response_.add_events() = chunk_->events[offset_];
    }
    writing_ = true;
    StartWrite(&response_);
  }

  void finish_locked(const grpc::Status& status) {
    if (finished_) return;
    finished_ = true;
    Finish(status);
  }

  CollectorCore& core_;
  const std::string peer_;
  std::shared_ptr<FollowReactor> self_;
  std::shared_ptr<Subscription> subscription_;

  std::mutex mutex_;
  std::shared_ptr<const EventChunk> chunk_;
  size_t offset_ = 0;
  v1::SubscribeResponse response_;
  bool writing_ = false;
  bool finished_ = false;
};

class IngestService final : public v1::Ingest::WithRawCallbackMethod_Stream<v1::Ingest::Service> {
 public:
  IngestService(CollectorCore& core, const ServiceOptions& options)
      : core_(core),
        options_(options),
        idle_(options.idle, [&metrics = core.metrics()](bool) { metrics.reject_stream(RejectReason::kIdle); }) {}

  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Stream(grpc::CallbackServerContext* context) override {
    const size_t streams = streams_.fetch_add(1) + 1;
    core_.metrics().ingest_streams.fetch_add(1, std::memory_order_relaxed);
    auto reactor = std::make_shared<IngestReactor>(core_, options_.limits, context->peer(), [this] { stream_ended(); });
    grpc::Status admission = check_bearer_token(*context, options_.token);
    if (!admission.ok()) core_.metrics().reject_stream(RejectReason::kUnauthenticated);
    // At the limit the stream idle longest gives its place (it ends once its
    // call is done: streams_ is over the limit by one until then).
    if (admission.ok() && options_.max_streams > 0 && streams > options_.max_streams && !idle_.evict_idlest()) {
      core_.metrics().reject_stream(RejectReason::kTooManyStreams);
      admission = grpc::Status(grpc::StatusCode::UNAVAILABLE,
                               "the collector serves its limit of " + std::to_string(options_.max_streams) +
                                   " ingest streams (--max-streams); try again later");
    }
    if (admission.ok()) idle_.add(reactor);
    reactor->start(admission);
    return reactor.get();
  }

 private:
  // The last stream gone: give the memory its batches used back to the system
  // (the pool's idle arena blocks too)
  // (glibc keeps freed memory in per-thread arenas otherwise).
  void stream_ended() {
    core_.metrics().ingest_streams.fetch_sub(1, std::memory_order_relaxed);
    if (streams_.fetch_sub(1) == 1) {
      ArenaBlockPool::for_batches().release_idle();
      ::malloc_trim(0);
    }
  }

  CollectorCore& core_;
  const ServiceOptions& options_;
  std::atomic<size_t> streams_{0};
  IdleStreams idle_;
};

class QueryService final : public v1::Query::CallbackService {
 public:
  QueryService(std::unique_ptr<StoreReader> reader, const ServiceOptions& options)
      : reader_(std::move(reader)), options_(options) {}

  grpc::ServerUnaryReactor* ListRuns(grpc::CallbackServerContext* context, const v1::ListRunsRequest*,
                                     v1::ListRunsResponse* response) override {
    return answer(context, "ListRuns", [&] { return reader_->list_runs(*response); });
  }
  grpc::ServerUnaryReactor* QueryEvents(grpc::CallbackServerContext* context, const v1::EventFilter* filter,
                                        v1::QueryEventsResponse* response) override {
    return answer(context, "QueryEvents", [&] { return reader_->query_events(*filter, *response); });
  }
  grpc::ServerUnaryReactor* ListSequences(grpc::CallbackServerContext* context,
                                          const v1::ListSequencesRequest* request,
                                          v1::ListSequencesResponse* response) override {
    return answer(context, "ListSequences", [&] { return reader_->list_sequences(*request, *response); });
  }
  grpc::ServerUnaryReactor* ListFindings(grpc::CallbackServerContext* context, const v1::ListFindingsRequest* request,
                                         v1::ListFindingsResponse* response) override {
    return answer(context, "ListFindings", [&] { return reader_->list_findings(*request, *response); });
  }

 private:
  // Queries are short reads; they run on the gRPC thread, one at a time.
  template <typename Read>
  grpc::ServerUnaryReactor* answer(grpc::CallbackServerContext* context, const char* method, Read&& read) {
    grpc::ServerUnaryReactor* reactor = context->DefaultReactor();
    grpc::Status status = check_bearer_token(*context, options_.token);
    if (status.ok()) {
      std::lock_guard lock(mutex_);
      status = to_grpc(read());
    }
    if (!status.ok())
      query_warnings().warn("{} from {} rejected: {}", method, context->peer(), status.error_message());
    reactor->Finish(status);
    return reactor;
  }

  std::mutex mutex_;
  std::unique_ptr<StoreReader> reader_;
  const ServiceOptions& options_;
};

class SubscribeService final : public v1::Subscribe::CallbackService {
 public:
  SubscribeService(CollectorCore& core, const ServiceOptions& options) : core_(core), options_(options) {}

  grpc::ServerWriteReactor<v1::SubscribeResponse>* Follow(grpc::CallbackServerContext* context,
                                                           const v1::SubscribeRequest* request) override {
    auto reactor = std::make_shared<FollowReactor>(core_, context->peer());
    grpc::Status auth = check_bearer_token(*context, options_.token);
    if (!auth.ok()) query_warnings().warn("Follow from {} rejected: {}", context->peer(), auth.error_message());
    reactor->start(auth, request->run_id());
    return reactor.get();
  }

 private:
  CollectorCore& core_;
  const ServiceOptions& options_;
};

}  // namespace

struct CollectorServices::Services {
  ServiceOptions options;
  std::unique_ptr<IngestService> ingest;
  std::unique_ptr<QueryService> query;
  std::unique_ptr<SubscribeService> subscribe;
};

Status CollectorServices::create(CollectorCore& core, const ServiceOptions& options,
                                 std::unique_ptr<CollectorServices>& out) {
  std::unique_ptr<StoreReader> reader;
  if (Status s = StoreReader::open(core.db_path(), reader); !s.ok()) return s;
  auto collector = std::unique_ptr<CollectorServices>(new CollectorServices());
  collector->services_ = std::make_unique<Services>();
  Services& services = *collector->services_;
  services.options = options;
  services.ingest = std::make_unique<IngestService>(core, services.options);
  services.query = std::make_unique<QueryService>(std::move(reader), services.options);
  services.subscribe = std::make_unique<SubscribeService>(core, services.options);
  out = std::move(collector);
  return {};
}

CollectorServices::~CollectorServices() = default;

void CollectorServices::register_with(grpc::ServerBuilder& builder) {
  builder.RegisterService(services_->ingest.get());
  builder.RegisterService(services_->query.get());
  builder.RegisterService(services_->subscribe.get());
}

grpc::Status to_grpc(const Status& status) {
  switch (status.code()) {
    case StatusCode::kOk:
      return grpc::Status::OK;
    case StatusCode::kInvalidArgument:
      return {grpc::StatusCode::INVALID_ARGUMENT, status.message()};
    case StatusCode::kFailedPrecondition:
      return {grpc::StatusCode::FAILED_PRECONDITION, status.message()};
    case StatusCode::kResourceExhausted:
      return {grpc::StatusCode::RESOURCE_EXHAUSTED, status.message()};
    case StatusCode::kUnauthenticated:
      return {grpc::StatusCode::UNAUTHENTICATED, status.message()};
    case StatusCode::kNotFound:
      return {grpc::StatusCode::NOT_FOUND, status.message()};
    case StatusCode::kUnavailable:
      return {grpc::StatusCode::UNAVAILABLE, status.message()};
    case StatusCode::kInternal:
      break;
  }
  return {grpc::StatusCode::INTERNAL, status.message()};
}

grpc::Status check_bearer_token(const grpc::ServerContextBase& context, const std::string& token) {
  if (token.empty()) return grpc::Status::OK;
  const std::string expected = "Bearer " + token;
  const auto& metadata = context.client_metadata();
  const auto found = metadata.find("authorization");
  if (found == metadata.end())
    return {grpc::StatusCode::UNAUTHENTICATED, "missing metadata \"authorization: Bearer <token>\""};
  const grpc::string_ref given = found->second;
  // Constant time in the given value: every byte of the expected one is compared.
  unsigned char difference = given.size() == expected.size() ? 0 : 1;
  for (size_t i = 0; i < expected.size(); ++i)
    difference |= static_cast<unsigned char>(expected[i] ^ (i < given.size() ? given.data()[i] : 0));
  if (difference != 0) return {grpc::StatusCode::UNAUTHENTICATED, "wrong bearer token"};
  return grpc::Status::OK;
}

}  // namespace castscope::collector
