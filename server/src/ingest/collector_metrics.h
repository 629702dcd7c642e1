// Counters the collector keeps for operators (/metrics, docs/metrics.md)
// beside the core's own (CollectorCounters): what the transports refused and
// what the live analyzer spent. Each is a relaxed atomic: writers on the
// gRPC, writer and analyzer threads only add, and a scrape reads each value
// on its own (no snapshot across counters is promised, as Prometheus
// expects of counters). No labels beyond the fixed reasons below, so that
// cardinality never grows with runs, agents or sources.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace castscope::collector {

// Why a batch or a stream was refused; the label values of the metrics.
enum class RejectReason : size_t {
  kUnauthenticated,  // no or a wrong token
  kTooManyStreams,   // past --max-streams
  kIdle,             // ended by the idle-stream policy (service/idle_streams.h)
  kProtocol,         // no Hello first, an unknown protocol version, Hello repeated
  kMalformed,        // not a valid IngestRequest
  kInvalidBatch,     // failed validate_batch (limits, dangling ids, ...)
  kOutOfOrder,       // an agent's sequence did not increase within a stream
  kStoreFailed,      // the store could not commit it
  kCount,
};

constexpr const char* reject_reason_name(RejectReason reason) {
  switch (reason) {
    case RejectReason::kUnauthenticated: return "unauthenticated";
    case RejectReason::kTooManyStreams: return "too_many_streams";
    case RejectReason::kIdle: return "idle";
    case RejectReason::kProtocol: return "protocol";
    case RejectReason::kMalformed: return "malformed";
    case RejectReason::kInvalidBatch: return "invalid_batch";
    case RejectReason::kOutOfOrder: return "out_of_order";
    case RejectReason::kStoreFailed: return "store_failed";
    case RejectReason::kCount: break;
  }
  return "unknown";
}

struct CollectorMetrics {
  static constexpr size_t kReasons = static_cast<size_t>(RejectReason::kCount);

  std::array<std::atomic<uint64_t>, kReasons> streams_rejected{};
  std::array<std::atomic<uint64_t>, kReasons> batches_rejected{};
  std::array<std::atomic<uint64_t>, kReasons> events_rejected{};
  std::atomic<uint64_t> ingest_streams{0};  // open now
  std::atomic<uint64_t> analyzer_passes{0};
  std::atomic<uint64_t> analyzer_ns{0};
  // Fleet shipping (docs/fleet.md), written by the shipper thread.
  struct Shipping {
    std::atomic<bool> enabled{false};
    std::atomic<bool> up{false};                // the last attempt landed (or had nothing to send)
    std::atomic<uint64_t> shipments{0};         // landed by this process
    std::atomic<uint64_t> rollup_rows{0};       // rows they carried
    std::atomic<uint64_t> resent{0};            // found landed already (sent before a restart)
    std::atomic<uint64_t> failures{0};          // failed attempts
    std::atomic<int64_t> backlog_rows{0};       // rollup rows waiting in the store
    std::atomic<int64_t> lag_seconds{0};        // age of the oldest waiting row's minute; 0: none waits
    std::atomic<uint64_t> events_not_shipped{0};  // cast decisions left out past the backlog's bound (the store's count)
  } shipping;

  void reject_stream(RejectReason reason) { add(streams_rejected, reason, 1); }
  // A batch refused (its events with it; 0 when they could not be counted).
  void reject_batch(RejectReason reason, uint64_t events) {
    add(batches_rejected, reason, 1);
    add(events_rejected, reason, events);
  }

 private:
  static void add(std::array<std::atomic<uint64_t>, kReasons>& counters, RejectReason reason, uint64_t n) {
    counters[static_cast<size_t>(reason)].fetch_add(n, std::memory_order_relaxed);
  }
};

}  // namespace castscope::collector
