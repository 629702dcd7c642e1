// Streams one agent's spool folder to the collector (Ingest.Stream) and
// deletes what the collector has acknowledged. At-least-once: after a broken
// stream every unacknowledged batch is sent again on the next one; the
// collector drops duplicates by (run, agent, sequence).
//
// One forwarder per folder at a time (an flock on <folder>/forwarder.lock):
// the agent restarts a forwarder that died, and `castscope run` starts one
// for a folder whose agent and forwarder are both gone; a second one waits
// for the lock. State goes to a status file (forwarder_status.h).
#pragma once

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>

#include "agent/forwarder/forwarder_status.h"
#include "agent/forwarder/give_up_rule.h"
#include "agent/forwarder/spool_tail.h"
#include "castscope/v1/transport.grpc.pb.h"

namespace castscope {

struct ForwarderConfig {
  std::string agent_dir;
  std::string collector;
  std::string token;
  std::string tls_ca_pem;  // non-empty: TLS with these roots
  int parent_pid = 0;      // the agent; 0: none to wait for (deliver what is there, then exit)
  // Once the agent is gone: how long the collector may stay unreachable
  // (one outage, measured now) before the spool is left for `castscope load`.
  std::chrono::seconds give_up_after{60};
  // A stream that hears nothing (no Welcome, no acknowledgement) for this
  // long while it waits for an answer is broken: a stopped collector
  // accepts connections but never answers.
  std::chrono::seconds stall_limit{30};
  size_t window = 16;  // batches in flight before waiting for acknowledgements
};

class Forwarder {
 public:
  explicit Forwarder(ForwarderConfig config);
  ~Forwarder();
  // Returns the process exit code: 0 everything delivered (or the folder
  // was already gone); 3 the collector refused us for good (bad token,
  // protocol version); 4 gave up on an unreachable collector. In both
  // failure cases every batch stays in the spool folder.
  int run();

 private:
  enum class StreamEnd { kDelivered, kBroken, kRefused };
  struct Pending {
    uint32_t segment = 0;  // 0: the accounting batch, in no segment
    uint64_t sequence = 0;
    bool final = false;
    v1::IngestRequest request;
  };

  void connect();
  StreamEnd stream_once();
  // How a stream that did not deliver ended: refused for good (logged as
  // refusing `refused`), or broken (`silence` when the watchdog fired);
  // broken_because_ says why.
  StreamEnd ended(const grpc::Status& status, bool stalled, const std::string& refused, const std::string& silence);
  void read_new_frames();
  // The agent's accounting batch (common/spool/accounting_file.h), queued
  // once, when it says more than the batches read; false when there is none.
  bool queue_accounting();
  bool parent_alive() const;
  // Waits for the folder's lock; false when the folder is gone meanwhile.
  bool take_lock();
  int finish(int code, const std::string& state, const std::string& message);
  void report(const std::string& state, const std::string& message = "");

  ForwarderConfig config_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Ingest::Stub> stub_;
  SpoolTail tail_;
  GiveUpRule give_up_;
  ForwarderStatusFile status_file_;
  ForwarderState status_;
  std::deque<Pending> unsent_;
  std::deque<Pending> in_flight_;
  std::string agent_id_;
  uint64_t max_sequence_read_ = 0;
  bool accounting_queued_ = false;
  bool connected_ = false;  // the last stream got as far as the Welcome
  std::string broken_because_;
  int lock_fd_ = -1;
};

}  // namespace castscope
