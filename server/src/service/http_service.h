// The HTTP adapter: the viewer's page and its API (docs/viewer.md), beside
// gRPC, over the same core. cpp-httplib (Debian's libcpp-httplib) parses
// HTTP; this file only decides who may ask what.
//
// Security. Every route, static files included, needs the token (the URL
// castscope prints carries it; the page trades it for an HttpOnly,
// SameSite=Strict cookie named per port, since cookies ignore ports), even on
// loopback, where other local users and web pages can reach it. The Host
// header must name the address served (DNS rebinding). No CORS header is
// ever sent; a strict Content-Security-Policy goes with every answer. Static
// files come only from the built UI's folder, by names of one path segment.
// /metrics (metrics_page.h, docs/metrics.md) is one more route under the
// same checks: Prometheus scrapes with Authorization: Bearer.
//
// Live. /api/live follows a run through CollectorCore::subscribe with a
// sampled subscription (per batch: its size, its newest time, its newest
// casts). Each viewer's queue is bounded; a viewer that falls behind is told
// how many events it missed, and ingest never waits for it.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "server/src/ingest/collector_core.h"
#include "server/src/status.h"
#include "server/src/viewer/viewer_queries.h"

namespace httplib {
class Server;
}

namespace castscope::collector {

// The fleet page's answers (castscope-collector fleet view, docs/fleet.md):
// `what` is jobs, sites, findings or job; `params` the request's query
// parameters. Given in HttpOptions, the service serves /api/fleet/WHAT.
using FleetAnswer =
    std::function<Status(const std::string& what, const std::map<std::string, std::string>& params, nlohmann::json& out)>;

struct HttpOptions {
  std::string host = "127.0.0.1";  // a loopback address unless a token was chosen by the user
  int port = 0;                    // 0: any free port
  std::string token;               // required
  std::string ui_dir;              // the built UI (ui/dist); empty: API only
  size_t max_live_viewers = 16;
  // Newest casts per agent and commit pushed to a live page. A page's queue
  // is a subscriber's (CollectorOptions::subscriber_queue_events).
  size_t live_sample_casts = 64;
  FleetAnswer fleet;               // set: the fleet page's routes
};

class HttpService {
 public:
  // `core` may be null: a read-only viewer of a stored run (castscope view).
  // `db_path` empty: no store at all (the fleet page): only the UI and
  // options.fleet's routes are served.
  HttpService(HttpOptions options, std::string db_path, CollectorCore* core);
  ~HttpService();
  HttpService(const HttpService&) = delete;
  HttpService& operator=(const HttpService&) = delete;

  // Binds and starts serving on a thread of its own.
  Status start();
  // Stops serving (live streams end) and joins. Idempotent.
  void stop();

  int port() const { return port_; }
  // http://HOST:PORT/?token=TOKEN, what a person opens.
  std::string url() const;

 private:
  // Every route, by what it serves: the guards first (headers, Host, method,
  // token), then the UI's files, the fleet page's API, the run API, /metrics
  // and the live stream.
  void install_routes();
  void install_guards();
  void install_static_routes();
  void install_fleet_routes();
  void install_api_routes();
  void install_metrics_route();
  void install_live_route();

  const HttpOptions options_;
  CollectorCore* const core_;
  const std::string db_path_;
  viewer::ViewerQueryPool queries_;
  std::unique_ptr<httplib::Server> server_;
  std::vector<std::string> allowed_hosts_;
  int port_ = 0;
  std::atomic<size_t> live_viewers_{0};
  std::atomic<bool> stopping_{false};
  std::thread thread_;
};

// A token for a URL: 32 random hex characters from /dev/urandom.
std::string random_token();

}  // namespace castscope::collector
