// The idle-stream policy over a collector's ingest streams (docs/operations.md,
// "Limits"): a stream holds one of --max-streams places for as long as it is
// open, so a client that opens streams and sends nothing (no Hello, or Hello
// and then no batch) would keep real agents out. Learnt from how gRPC servers
// bound idle connections (max_connection_idle) and Kafka brokers close idle
// ones (connections.max.idle.ms), with one addition: at the limit, the stream
// idle longest gives its place to the newcomer, so idle streams never refuse
// an agent that has something to send.
//
// - A stream that sends no Hello within `hello_limit` is ended.
// - A stream that sends no message within `idle_limit` is ended (0: never).
// - At --max-streams, a new stream ends the one idle longest, if any has been
//   idle for `evict_after` (a stream that sent a moment ago keeps its place).
// An ended stream gets UNAVAILABLE, which a forwarder takes as "reconnect".
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace castscope::collector {

struct IdlePolicy {
  std::chrono::milliseconds hello_limit{10'000};
  std::chrono::milliseconds idle_limit{300'000};  // 0: never
  std::chrono::milliseconds evict_after{2'000};
};

// What the registry needs of a stream (IngestReactor).
class IdleTrackedStream {
 public:
  virtual ~IdleTrackedStream() = default;
  // Steady-clock time of its last message (its start before the first).
  virtual std::chrono::steady_clock::time_point last_message() const = 0;
  virtual bool greeted() const = 0;  // Hello received
  // Ends the stream with UNAVAILABLE and `why`; false when it had already ended.
  virtual bool end_idle(const std::string& why) = 0;
};

class IdleStreams {
 public:
  // `on_ended(evicted)` is called for each stream ended (counted by the caller).
  IdleStreams(IdlePolicy policy, std::function<void(bool evicted)> on_ended);
  ~IdleStreams();  // stops the sweeper
  IdleStreams(const IdleStreams&) = delete;
  IdleStreams& operator=(const IdleStreams&) = delete;

  void add(std::weak_ptr<IdleTrackedStream> stream);
  // At the limit: ends the stream idle longest if it has been idle for
  // evict_after; true when one was ended.
  bool evict_idlest();
  // Ends the streams past their limits now (the sweeper's work, once a second).
  void sweep(std::chrono::steady_clock::time_point now);

 private:
  void run();
  // The streams still open (the ended ones forgotten); ended outside the lock,
  // since ending takes the stream's own lock.
  std::vector<std::shared_ptr<IdleTrackedStream>> live();

  const IdlePolicy policy_;
  const std::function<void(bool evicted)> on_ended_;
  std::mutex mutex_;
  std::list<std::weak_ptr<IdleTrackedStream>> streams_;  // pruned as they end
  std::condition_variable stop_signal_;
  bool stopping_ = false;
  std::thread sweeper_;
};

}  // namespace castscope::collector
