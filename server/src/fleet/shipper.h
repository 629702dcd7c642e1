// The node collector's shipper (docs/fleet.md): sends the store's
// per-minute rollups, agents, job ends and findings to the fleet's
// PostgreSQL, each shipment exactly once.
//
// Design. One thread of its own (never the writer's). Each cycle it asks
// the writer (a writer task) to seal the open rollups of closed minutes into
// shipment S, recording S's job ends beside it, then reads S from its own
// read-only connection and sends it in one PostgreSQL transaction that
// starts with castscope.begin_shipment(collector, S): false means S landed
// before (the shipper died after PostgreSQL's commit), so it is only
// forgotten here. After the commit, a writer task forgets S locally. So a
// kill -9 of either side at any point leaves S sealed in the store and sent
// again, landing once. The backlog is the store's rows, never memory. What
// it did goes to CollectorMetrics::shipping (/metrics) and to the store's
// ship_state (`castscope query shipping`: last error, last success).
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>

#include "server/src/fleet/pg_connection.h"
#include "server/src/status.h"

namespace castscope::collector {
class CollectorCore;
}

namespace castscope::collector::fleet {

struct ShipperOptions {
  PgTarget target;
  std::chrono::milliseconds interval{10000};
  // Seal the open minute too (more rows in PostgreSQL, less lag): for
  // dashboards that must see a running job within seconds, and for tests.
  bool partial_minutes = false;
  std::string node;        // this node's name in the fleet (default: the host name)
  std::string viewer_url;  // this collector's viewer, linked from the fleet page ('' none)
  int64_t max_shipment_rows = 200000;  // rollup rows per shipment (one PostgreSQL transaction)
  // The backlog's bound: past it, new casts are counted (events_not_shipped)
  // and not rolled up until the backlog is below 90 % of it again.
  int64_t backlog_max_rows = 10000000;
};

class Shipper {
 public:
  // The URL and password file are checked when connecting
  // (ShipOptions::resolve checks them first on the command line).
  static Status start(CollectorCore& core, const ShipperOptions& options, std::unique_ptr<Shipper>& out);
  ~Shipper();  // stop()
  Shipper(const Shipper&) = delete;
  Shipper& operator=(const Shipper&) = delete;

  // A run was analyzed after an agent of it finished, its findings stored
  // (the live analyzer, on the writer thread): its end may be due.
  void run_analyzed(const std::string& run_id);
  // Ships what is left (every minute sealed; one try: what PostgreSQL does
  // not take now waits in the store), then stops the thread. Call before
  // CollectorCore::shutdown.
  void stop();

 private:
  Shipper(CollectorCore& core, ShipperOptions options);
  void loop();
  struct State;  // the connection, what was shipped, what waits to be shipped
  std::unique_ptr<State> state_;
  std::thread thread_;
};

}  // namespace castscope::collector::fleet
