#include "server/src/service/metrics_page.h"

#include <filesystem>

#include "server/src/service/prometheus_text.h"

namespace castscope::collector {

namespace {

// The database and its WAL: what the store takes on disk now.
uint64_t store_bytes(const std::string& db_path) {
  uint64_t bytes = 0;
  for (const std::string& path : {db_path, db_path + "-wal"}) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(path, ec);
    if (!ec) bytes += size;
  }
  return bytes;
}

void reasons(PrometheusText& text, const std::array<std::atomic<uint64_t>, CollectorMetrics::kReasons>& counts) {
  for (size_t i = 0; i < counts.size(); ++i)
    text.sample(counts[i].load(std::memory_order_relaxed), {{"reason", reject_reason_name(static_cast<RejectReason>(i))}});
}

}  // namespace

Status metrics_page(CollectorCore* core, viewer::ViewerQueryPool& store, const std::string& db_path,
                    uint64_t live_viewers, std::string& out) {
  StoreReader::Totals totals;
  if (Status s = store.with([&](viewer::ViewerQueries& q) { return q.totals(totals); }); !s.ok()) return s;
  PrometheusText text;
  if (core != nullptr) {
    const CollectorCounters c = core->counters();
    CollectorMetrics& m = core->metrics();
    text.family("castscope_events_ingested_total", "counter", "Events stored from new batches (duplicates not counted).")
        .sample(c.events_stored);
    text.family("castscope_batches_total", "counter", "New batches stored.").sample(c.batches_stored);
    text.family("castscope_duplicate_batches_total", "counter",
                "Batches received again (a forwarder's replay) and acknowledged without storing.")
        .sample(c.batches_duplicate);
    text.family("castscope_commits_total", "counter", "Store transactions committed by the writer.").sample(c.commits);
    text.family("castscope_batches_rejected_total", "counter", "Batches refused, by reason.");
    reasons(text, m.batches_rejected);
    text.family("castscope_events_rejected_total", "counter",
                "Events in refused batches, by reason (a malformed message's events cannot be counted).");
    reasons(text, m.events_rejected);
    text.family("castscope_streams_rejected_total", "counter", "Ingest streams refused before any batch, by reason.");
    reasons(text, m.streams_rejected);
    text.family("castscope_queue_bytes", "gauge", "Bytes of batches queued for the store or being written.")
        .sample(c.queue_bytes);
    text.family("castscope_ingest_streams", "gauge", "Open gRPC ingest streams.")
        .sample(m.ingest_streams.load(std::memory_order_relaxed));
    text.family("castscope_live_streams", "gauge", "Live followers: viewer pages (SSE) and gRPC Follow calls.")
        .sample(c.subscribers);
    text.family("castscope_analyzer_passes_total", "counter", "Analyses of a run by the live analyzer.")
        .sample(m.analyzer_passes.load(std::memory_order_relaxed));
    text.family("castscope_analyzer_seconds_total", "counter", "Time the live analyzer spent reading and analyzing runs.")
        .sample(static_cast<double>(m.analyzer_ns.load(std::memory_order_relaxed)) / 1e9);
    if (const CollectorMetrics::Shipping& ship = m.shipping; ship.enabled.load(std::memory_order_relaxed)) {
      const auto load = [](const auto& value) { return value.load(std::memory_order_relaxed); };
      text.family("castscope_ship_up", "gauge", "Fleet shipping: 1 when the last attempt landed or had nothing to send.")
          .sample(uint64_t{load(ship.up) ? 1u : 0u});
      text.family("castscope_ship_shipments_total", "counter", "Fleet shipping: shipments PostgreSQL committed.")
          .sample(load(ship.shipments));
      text.family("castscope_ship_rollup_rows_total", "counter", "Fleet shipping: rollup rows those shipments carried.")
          .sample(load(ship.rollup_rows));
      text.family("castscope_ship_resent_total", "counter",
                  "Fleet shipping: shipments found landed already when sent again (after a restart); not stored twice.")
          .sample(load(ship.resent));
      text.family("castscope_ship_failures_total", "counter",
                  "Fleet shipping: failed attempts (the last error is in `castscope query shipping`).")
          .sample(load(ship.failures));
      text.family("castscope_ship_backlog_rows", "gauge", "Fleet shipping: rollup rows waiting in the store.")
          .sample(static_cast<uint64_t>(load(ship.backlog_rows)));
      text.family("castscope_ship_lag_seconds", "gauge",
                  "Fleet shipping: age of the oldest waiting row's minute (0 when none waits).")
          .sample(static_cast<uint64_t>(load(ship.lag_seconds)));
      text.family("castscope_ship_events_not_shipped_total", "counter",
                  "Fleet shipping: cast decisions stored here but left out of the rollups while the backlog was past "
                  "its bound (--ship-backlog-max-rows).")
          .sample(load(ship.events_not_shipped));
    }
  } else {
    text.family("castscope_live_streams", "gauge", "Live followers: viewer pages (SSE).").sample(live_viewers);
  }
  text.family("castscope_store_bytes", "gauge", "Size of the store on disk: the database and its WAL.")
      .sample(store_bytes(db_path));
  text.family("castscope_runs", "gauge", "Runs in the store.").sample(static_cast<uint64_t>(totals.runs));
  text.family("castscope_agents", "gauge", "Agents (processes) in the store.").sample(static_cast<uint64_t>(totals.agents));
  text.family("castscope_agent_events_dropped_total", "counter",
              "Events the agents dropped before sending (ring full), summed over every stored agent.")
      .sample(static_cast<uint64_t>(totals.agent_events_dropped));
  text.family("castscope_findings", "gauge", "Findings stored now, by kind and severity.");
  for (const auto& [key, count] : totals.findings)
    text.sample(static_cast<uint64_t>(count), {{"kind", key.first}, {"severity", key.second}});
  out = text.text();
  return {};
}

}  // namespace castscope::collector
