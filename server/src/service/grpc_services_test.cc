#include <gtest/gtest.h>
#include <grpcpp/grpcpp.h>

#include "castscope/v1/transport.grpc.pb.h"
#include "server/src/service/grpc_services.h"
#include "server/testing/test_batches.h"

namespace castscope::collector {
namespace {

using testing::make_batch;
using testing::temp_dir;

class CollectorGrpc : public ::testing::Test {
 protected:
  void start(const std::string& name, const std::string& token = "", int max_message_bytes = 16 << 20) {
    ASSERT_TRUE(CollectorCore::open((temp_dir(name) / "store.db").string(), CollectorOptions(), core_).ok());
    ServiceOptions options;
    options.token = token;
    ASSERT_TRUE(CollectorServices::create(*core_, options, services_).ok());
    grpc::ServerBuilder builder;
    int port = 0;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port);
    builder.SetMaxReceiveMessageSize(max_message_bytes);
    services_->register_with(builder);
    server_ = builder.BuildAndStart();
    ASSERT_TRUE(server_);
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(port), grpc::InsecureChannelCredentials());
  }

  void TearDown() override {
    if (server_) server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
    if (core_) core_->shutdown();
  }

  static v1::IngestRequest hello(uint32_t version = 1) {
    v1::IngestRequest request;
    request.mutable_hello()->set_protocol_version(version);
    request.mutable_hello()->set_client("collector_grpc_test");
    return request;
  }

  static v1::IngestRequest batch(const v1::Batch& batch) {
    v1::IngestRequest request;
    *request.mutable_batch() = batch;
    return request;
  }

  // Sends `requests`, half-closes, reads every response; returns the final status.
  grpc::Status exchange(const std::vector<v1::IngestRequest>& requests, std::vector<v1::IngestResponse>& responses,
                        const std::string& token = "") {
    auto stub = v1::Ingest::NewStub(channel_);
    grpc::ClientContext context;
    if (!token.empty()) context.AddMetadata("authorization", "Bearer " + token);
    auto stream = stub->Stream(&context);
    for (const auto& request : requests)
      if (!stream->Write(request)) break;
    stream->WritesDone();
    v1::IngestResponse response;
    while (stream->Read(&response)) responses.push_back(response);
    return stream->Finish();
  }

  std::unique_ptr<CollectorCore> core_;
  std::unique_ptr<CollectorServices> services_;
  std::unique_ptr<grpc::Server> server_;
  std::shared_ptr<grpc::Channel> channel_;
};

TEST_F(CollectorGrpc, WelcomesThenAcknowledgesEveryBatch) {
  start("grpc_ok");
  std::vector<v1::IngestResponse> responses;
  const grpc::Status status =
      exchange({hello(), batch(make_batch("run", "a", 1)), batch(make_batch("run", "a", 2, 10)),
                batch(make_batch("run", "a", 1))},
               responses);
  // The third batch repeats sequence 1 on the same stream: a sender bug, after two acks.
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "run run agent a: sequence 1 after 2 on this stream (sequences must increase within a stream)");
  ASSERT_EQ(responses.size(), 3u);
  EXPECT_EQ(responses[0].welcome().protocol_version(), kProtocolVersion);
  EXPECT_EQ(responses[1].ack().sequence(), 1u);
  EXPECT_EQ(responses[2].ack().sequence(), 2u);
  EXPECT_FALSE(responses[2].ack().duplicate());

  // A new stream (a forwarder reconnecting) replays: acknowledged as duplicate.
  responses.clear();
  EXPECT_TRUE(exchange({hello(), batch(make_batch("run", "a", 2, 10))}, responses).ok());
  ASSERT_EQ(responses.size(), 2u);
  EXPECT_TRUE(responses[1].ack().duplicate());
  EXPECT_EQ(responses[1].ack().agent_id(), "a");

  v1::ListRunsResponse runs;
  grpc::ClientContext context;
  ASSERT_TRUE(v1::Query::NewStub(channel_)->ListRuns(&context, v1::ListRunsRequest(), &runs).ok());
  ASSERT_EQ(runs.runs_size(), 1);
  EXPECT_EQ(runs.runs(0).agents(0).batches(), 2u);
}

TEST_F(CollectorGrpc, HelloMustComeFirstWithOurVersion) {
  start("grpc_hello");
  std::vector<v1::IngestResponse> responses;
  grpc::Status status = exchange({batch(make_batch("run", "a", 1))}, responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(status.error_message(), "expected Hello first, got a batch");
  status = exchange({hello(2)}, responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
  EXPECT_EQ(status.error_message(), "client speaks protocol version 2, this collector speaks 1");
}

TEST_F(CollectorGrpc, MalformedAndInvalidMessagesAreRejectedPrecisely) {
  start("grpc_malformed");
  std::vector<v1::IngestResponse> responses;
  v1::IngestRequest malformed = hello();
  malformed.mutable_hello()->set_client("\xff\xfe not UTF-8");  // proto3 strings must be UTF-8: parsing fails
  grpc::Status status = exchange({hello(), malformed}, responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message().rfind("message 2 is not a valid castscope.v1.IngestRequest (", 0), 0u)
      << status.error_message();

  v1::Batch bad = make_batch("run", "a", 1);
  bad.mutable_events(1)->mutable_cast()->set_op_id(77);
  status = exchange({hello(), batch(bad)}, responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(status.error_message(),
            "batch 1 of agent a: events[1] (cast seq 2): op_id 77 is not defined in this batch's strings");
}

TEST_F(CollectorGrpc, OversizedMessageIsResourceExhausted) {
  start("grpc_oversized", "", 4096);
  std::vector<v1::IngestResponse> responses;
  const grpc::Status status = exchange({hello(), batch(make_batch("run", "a", 1, 1, 200))}, responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(CollectorGrpc, TokenIsRequiredWhenConfigured) {
  start("grpc_token", "s3cret");
  std::vector<v1::IngestResponse> responses;
  grpc::Status status = exchange({hello()}, responses);
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  status = exchange({hello()}, responses, "wrong");
  EXPECT_EQ(status.error_code(), grpc::StatusCode::UNAUTHENTICATED);
  EXPECT_TRUE(exchange({hello(), batch(make_batch("run", "a", 1))}, responses, "s3cret").ok());

  v1::ListRunsResponse runs;
  grpc::ClientContext anonymous;
  EXPECT_EQ(v1::Query::NewStub(channel_)->ListRuns(&anonymous, v1::ListRunsRequest(), &runs).error_code(),
            grpc::StatusCode::UNAUTHENTICATED);
  grpc::ClientContext follower;
  auto follow = v1::Subscribe::NewStub(channel_)->Follow(&follower, v1::SubscribeRequest());
  v1::SubscribeResponse response;
  EXPECT_FALSE(follow->Read(&response));
  EXPECT_EQ(follow->Finish().error_code(), grpc::StatusCode::UNAUTHENTICATED);
}

TEST_F(CollectorGrpc, FollowReceivesCommittedEvents) {
  start("grpc_follow");
  grpc::ClientContext follower;
  v1::SubscribeRequest request;
  request.set_run_id("run");
  auto follow = v1::Subscribe::NewStub(channel_)->Follow(&follower, request);
  // The subscription exists once the call has reached the server.
  for (int i = 0; i < 100 && follower.peer().empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  std::vector<v1::IngestResponse> responses;
  ASSERT_TRUE(exchange({hello(), batch(make_batch("run", "a", 1))}, responses).ok());
  v1::SubscribeResponse response;
  ASSERT_TRUE(follow->Read(&response));
  ASSERT_EQ(response.events_size(), 5);
  EXPECT_EQ(response.events(0).event().op().op(), "aten::linear");
  EXPECT_EQ(response.events(0).run_id(), "run");
  EXPECT_GT(response.stored_unix_ns(), 0u);
  follower.TryCancel();
}

}  // namespace
}  // namespace castscope::collector
