// Streams one agent's spool folder to the collector (Ingest.Stream) and
// deletes what the collector has acknowledged. At-least-once: after a broken
// stream every unacknowledged batch is sent again on the next one; the
// collector drops duplicates by (run, agent, sequence).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "agent/forwarder/spool_tail.h"
#include "castscope/v1/transport.grpc.pb.h"

namespace castscope {

struct ForwarderConfig {
  std::string agent_dir;
  std::string collector;
  std::string token;
  std::string tls_ca_pem;  // non-empty: TLS with these roots
  int parent_pid = 0;
  std::chrono::seconds linger{10};  // after the agent is gone, how long to keep trying an absent collector
  size_t window = 16;               // batches in flight before waiting for acknowledgements
};

class Forwarder {
 public:
  explicit Forwarder(ForwarderConfig config);
  // Returns the process exit code: 0 everything delivered; 3 the collector
  // refused us for good (bad token, protocol version); 4 gave up on an absent
  // collector. In both failure cases every batch stays in the spool folder.
  int run();

 private:
  enum class StreamEnd { kDelivered, kBroken, kRefused };
  struct Pending {
    uint32_t segment = 0;
    uint64_t sequence = 0;
    bool final = false;
    v1::IngestRequest request;
  };

  StreamEnd stream_once();
  void read_new_frames();
  bool parent_alive() const;

  ForwarderConfig config_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Ingest::Stub> stub_;
  SpoolTail tail_;
  std::deque<Pending> unsent_;
  std::deque<Pending> in_flight_;
  std::string agent_id_;
  bool connected_ = false;  // the last stream got as far as the Welcome
};

}  // namespace castscope
