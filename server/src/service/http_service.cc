#include "server/src/service/http_service.h"

#include <httplib.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdlib>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>

#include "common/log/logger.h"
#include "server/src/service/export_download.h"
#include "server/src/service/metrics_page.h"
#include "server/src/service/prometheus_text.h"
#include "server/src/store/row_id.h"
#include "server/src/viewer/event_json.h"

namespace castscope::collector {

namespace v1 = castscope::v1;
using nlohmann::json;

namespace {

constexpr const char* kContentSecurityPolicy =
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'";
constexpr auto kKeepAlive = std::chrono::seconds(10);
// At most one live write every kLiveInterval, or kBusyLiveInterval after a
// write of kBusyLiveEvents or more (all its runs and agents, skipped events
// included). A page draws pushed casts at most 10 frames a second, 5 under
// heavy ingest (ui/src/timeline/pacing.ts): under heavy ingest, 20 messages a
// second only made it parse more (~1 MB/s of JSON per page), on the cores
// ingest needs; under light ingest the shorter wait keeps a cast's way to the
// screen short (5 k events in 50 ms: 100 k events/s; the live target is
// measured at 30 k).
constexpr auto kLiveInterval = std::chrono::milliseconds(50);
constexpr auto kBusyLiveInterval = std::chrono::milliseconds(100);
constexpr uint64_t kBusyLiveEvents = 5'000;
// One run and agent's message of kBusyLiveEvents or more carries at most
// this many casts (the newest), not live_sample_casts; the page slows its
// frames on the same count. Under heavy ingest a page shows density bars and
// these marks on top; drawing 64 of them per message took ~0.03 CPU s/s of a
// following page's 0.17-0.21, receiving and parsing them ~0.02, on the cores
// ingest needs (docs/performance.md, "A following page under heavy ingest").
constexpr size_t kBusyLiveSampleCasts = 16;

bool equal_in_constant_time(const std::string& a, const std::string& b) {
  if (a.size() != b.size()) return false;
  unsigned char diff = 0;
  for (size_t i = 0; i < a.size(); ++i) diff |= static_cast<unsigned char>(a[i] ^ b[i]);
  return diff == 0;
}

std::string lower(std::string text) {
  for (char& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

bool is_loopback(const std::string& host) {
  return host == "127.0.0.1" || host == "::1" || host == "localhost" || host.rfind("127.", 0) == 0;
}

// The value of cookie `name` in a Cookie header, or empty.
std::string cookie_value(const std::string& header, const std::string& name) {
  size_t at = 0;
  while (at < header.size()) {
    while (at < header.size() && (header[at] == ' ' || header[at] == ';')) ++at;
    const size_t end = std::min(header.find(';', at), header.size());
    const std::string pair = header.substr(at, end - at);
    const size_t eq = pair.find('=');
    if (eq != std::string::npos && pair.substr(0, eq) == name) return pair.substr(eq + 1);
    at = end + 1;
  }
  return {};
}

int http_status(const Status& status) {
  switch (status.code()) {
    case StatusCode::kInvalidArgument: return 400;
    case StatusCode::kNotFound: return 404;
    case StatusCode::kResourceExhausted:
    case StatusCode::kUnavailable: return 503;
    default: return 500;
  }
}

// The viewer's request threads run 10 nice levels below the rest of the
// collector: when the machine is busy, the store's writer and the gRPC
// threads get the CPU first, so ingest does not wait on viewers' queries and
// JSON. Linux keeps a nice value per thread (setpriority(2), NOTES); done
// once per pool thread, on its first request.
void lower_this_thread_priority() {
  thread_local const bool lowered = [] {
    const auto tid = static_cast<id_t>(syscall(SYS_gettid));
    errno = 0;
    const int now = getpriority(PRIO_PROCESS, tid);
    return errno == 0 && setpriority(PRIO_PROCESS, tid, std::min(19, now + 10)) == 0;
  }();
  (void)lowered;
}

// Whether the request's Accept-Encoding takes gzip (not as "gzip;q=0").
bool accepts_gzip(const httplib::Request& req) {
  std::stringstream header(req.get_header_value("Accept-Encoding"));
  std::string item;
  while (std::getline(header, item, ',')) {
    std::string token;
    for (char c : item)
      if (c != ' ' && c != '\t') token += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    if (token == "gzip" || (token.rfind("gzip;q=", 0) == 0 && std::strtod(token.c_str() + 7, nullptr) > 0)) return true;
  }
  return false;
}

// `in` as a gzip member at zlib's fastest level; false when zlib fails.
bool gzip(const std::string& in, std::string& out) {
  z_stream z{};
  if (deflateInit2(&z, 1, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK) return false;
  out.resize(deflateBound(&z, static_cast<uLong>(in.size())));
  z.next_in = reinterpret_cast<Bytef*>(const_cast<char*>(in.data()));
  z.avail_in = static_cast<uInt>(in.size());
  z.next_out = reinterpret_cast<Bytef*>(out.data());
  z.avail_out = static_cast<uInt>(out.size());
  const bool done = deflate(&z, Z_FINISH) == Z_STREAM_END;
  out.resize(z.total_out);
  deflateEnd(&z);
  return done;
}

// Every answer body of size leaves here: gzip at level 1 when the client
// takes it, else as is. Not left to cpp-httplib, whose Debian build picks
// brotli at quality 11 whenever a browser offers "br": 0.4 s of CPU for a
// 200 kB timeline answer, 0.16 s for app.js, on this project's 2-core
// machine (docs/performance.md, "The viewer"). A sized content provider is
// never compressed by cpp-httplib.
void send_body(const httplib::Request& req, httplib::Response& res, std::string body, const std::string& type) {
  res.set_header("Vary", "Accept-Encoding");
  if (body.size() >= 1024 && accepts_gzip(req)) {
    std::string packed;
    if (gzip(body, packed)) {
      body.swap(packed);
      res.set_header("Content-Encoding", "gzip");
    }
  }
  auto shared = std::make_shared<const std::string>(std::move(body));
  res.set_content_provider(shared->size(), type, [shared](size_t offset, size_t length, httplib::DataSink& sink) {
    return sink.write(shared->data() + offset, length);
  });
}

void send_json(const httplib::Request& req, httplib::Response& res, const json& body) {
  res.status = 200;
  res.set_header("Cache-Control", "no-store");
  send_body(req, res, body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_json(httplib::Response& res, const json& body, int status) {
  res.status = status;
  res.set_header("Cache-Control", "no-store");
  res.set_content(body.dump(-1, ' ', false, json::error_handler_t::replace), "application/json");
}

void send_error(httplib::Response& res, int status, const std::string& message) {
  send_json(res, {{"error", message}}, status);
}

std::string content_type(const std::filesystem::path& file) {
  const std::string ext = lower(file.extension().string());
  if (ext == ".html") return "text/html; charset=utf-8";
  if (ext == ".js") return "text/javascript; charset=utf-8";
  if (ext == ".css") return "text/css; charset=utf-8";
  if (ext == ".json" || ext == ".map") return "application/json";
  if (ext == ".svg") return "image/svg+xml";
  if (ext == ".png") return "image/png";
  if (ext == ".woff2") return "font/woff2";
  return "application/octet-stream";
}

// A query parameter as a whole decimal number within [low, high].
bool integer_param(const httplib::Request& req, const char* name, int64_t low, int64_t high, int64_t& out,
                   std::string& error) {
  if (!req.has_param(name)) {
    error = std::string("missing parameter ") + name;
    return false;
  }
  const std::string text = req.get_param_value(name);
  size_t i = text.size() > 0 && text[0] == '-' ? 1 : 0;
  bool ok = i < text.size() && text.size() <= 19;
  for (; ok && i < text.size(); ++i) ok = std::isdigit(static_cast<unsigned char>(text[i])) != 0;
  if (ok) {
    out = std::stoll(text);
    ok = out >= low && out <= high;
  }
  if (!ok) error = std::string("parameter ") + name + ": expected a whole number from " + std::to_string(low) + " to " +
                   std::to_string(high);
  return ok;
}

bool text_param(const httplib::Request& req, const char* name, std::string& out, std::string& error,
                size_t max_bytes = 1024) {
  out = req.has_param(name) ? req.get_param_value(name) : std::string();
  if (out.empty() || out.size() > max_bytes) {
    error = std::string("parameter ") + name + ": required, at most " + std::to_string(max_bytes) + " bytes";
    return false;
  }
  return true;
}

// One live page's follow of a run: the subscription's chunks become SSE
// messages on the request's thread.
struct LiveStream {
  std::mutex mutex;
  std::condition_variable wake;
  bool ready = false;
  std::shared_ptr<Subscription> subscription;
  std::string run_id;
  std::map<std::string, int64_t> origins;  // per run: known once it has events
  std::chrono::steady_clock::time_point last_write = std::chrono::steady_clock::now();
  std::chrono::steady_clock::duration interval = kLiveInterval;  // before the next message
};

// What committed since the last message, one message per run and agent: a
// page gets at most ~20 messages a second however fast batches commit, and
// the work per viewer stays small. Sets the wait before the next one.
std::string live_messages(LiveStream& live, viewer::ViewerQueryPool& queries, size_t sample_casts) {
  std::string out;
  struct Pending {
    uint64_t events = 0, max_ts_ns = 0;
    std::vector<const v1::CastEvent*> casts;  // newest last
  };
  std::map<std::pair<std::string, std::string>, Pending> pending;
  uint64_t message_events = 0;
  std::vector<std::shared_ptr<const EventChunk>> held;  // keeps the casts above alive
  std::shared_ptr<const EventChunk> chunk;
  uint64_t skipped = 0, skipped_total = 0;
  while (live.subscription->take(chunk, skipped)) {
    skipped_total += skipped;
    if (!chunk) continue;
    Pending& p = pending[{chunk->run_id, chunk->agent_id}];
    p.events += chunk->batch_events;
    message_events += chunk->batch_events;
    p.max_ts_ns = std::max(p.max_ts_ns, chunk->max_ts_ns);
    for (const v1::StoredEvent& e : chunk->events)
      if (e.event().has_cast()) p.casts.push_back(&e.event().cast());
    if (p.casts.size() > 2 * sample_casts)
      p.casts.erase(p.casts.begin(), p.casts.end() - static_cast<std::ptrdiff_t>(sample_casts));
    held.push_back(std::move(chunk));
  }
  if (skipped_total > 0) out += "event: skipped\ndata: " + json{{"events", skipped_total}}.dump() + "\n\n";
  for (auto& [key, p] : pending) {
    const size_t sample = p.events >= kBusyLiveEvents ? std::min(sample_casts, kBusyLiveSampleCasts) : sample_casts;
    const auto& [run_id, agent_id] = key;
    int64_t& origin = live.origins[run_id];
    if (origin == 0) (void)queries.with([&](viewer::ViewerQueries& q) { return q.origin(run_id, origin); });
    viewer::JsonWriter message;
    message.begin_object();
    message.key("run_id").value(run_id);
    message.key("agent_id").value(agent_id);
    // No origin yet (the run's first batches held only cache samples, which
    // have no tiles): no time to give relative to it.
    message.key("t_max");
    if (origin == 0) message.null();
    else message.value(static_cast<int64_t>(p.max_ts_ns) - origin);
    message.key("events").value(p.events);
    message.key("casts").begin_array();
    const size_t first = p.casts.size() > sample ? p.casts.size() - sample : 0;
    for (size_t i = first; i < p.casts.size(); ++i) viewer::write_cast(message, agent_id, *p.casts[i], origin);
    message.end_array().end_object();
    out += "event: batch\ndata: " + message.text() + "\n\n";
  }
  const bool busy = message_events + skipped_total >= kBusyLiveEvents;
  live.interval = busy ? kBusyLiveInterval : kLiveInterval;
  return out;
}

}  // namespace

std::string random_token() {
  unsigned char bytes[16] = {};
  std::ifstream urandom("/dev/urandom", std::ios::binary);
  urandom.read(reinterpret_cast<char*>(bytes), sizeof bytes);
  std::string token;
  char hex[3];
  for (unsigned char b : bytes) {
    std::snprintf(hex, sizeof hex, "%02x", b);
    token += hex;
  }
  return token;
}

HttpService::HttpService(HttpOptions options, std::string db_path, CollectorCore* core)
    : options_(std::move(options)), core_(core), db_path_(db_path), queries_(std::move(db_path)),
      server_(std::make_unique<httplib::Server>()) {}

HttpService::~HttpService() { stop(); }

std::string HttpService::url() const {
  const std::string host = options_.host.find(':') != std::string::npos ? "[" + options_.host + "]" : options_.host;
  // The fleet page's own address: it opens there with no request for a run's API first.
  const bool fleet_only = options_.fleet && db_path_.empty();
  return "http://" + host + ":" + std::to_string(port_) + "/?token=" + options_.token + (fleet_only ? "#/fleet" : "");
}

Status HttpService::start() {
  if (options_.token.empty()) return Status::invalid_argument("the viewer needs a token");
  server_->new_task_queue = [] { return new httplib::ThreadPool(24); };
  server_->set_payload_max_length(64 << 10);
  server_->set_read_timeout(10, 0);
  server_->set_write_timeout(10, 0);
  install_routes();
  if (options_.port == 0) {
    port_ = server_->bind_to_any_port(options_.host);
    if (port_ < 0) port_ = 0;
  } else if (server_->bind_to_port(options_.host, options_.port)) {
    port_ = options_.port;
  }
  if (port_ == 0)
    return Status::unavailable("cannot listen for the viewer on " + options_.host + ":" + std::to_string(options_.port));
  const std::string port = ":" + std::to_string(port_);
  allowed_hosts_ = {lower(options_.host) + port, "[" + lower(options_.host) + "]" + port};
  if (is_loopback(options_.host))
    for (const char* name : {"127.0.0.1", "localhost", "[::1]"}) allowed_hosts_.push_back(name + port);
  thread_ = std::thread([this] { server_->listen_after_bind(); });
  return {};
}

void HttpService::stop() {
  stopping_ = true;
  if (server_) server_->stop();
  if (thread_.joinable()) thread_.join();
}

void HttpService::install_routes() {
  install_guards();
  install_static_routes();
  if (options_.fleet) install_fleet_routes();
  if (db_path_.empty()) return;  // no store: the fleet page alone
  install_api_routes();
  install_metrics_route();
  install_live_route();
}

// Headers on every answer; Host, method, then token, before any route runs.
void HttpService::install_guards() {
  httplib::Server& server = *server_;
  server.set_default_headers({{"Content-Security-Policy", kContentSecurityPolicy},
                              {"X-Content-Type-Options", "nosniff"},
                              {"X-Frame-Options", "DENY"},
                              {"Referrer-Policy", "no-referrer"},
                              {"Cross-Origin-Resource-Policy", "same-origin"}});

  // Host, then token, before any route runs.
  server.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
    lower_this_thread_priority();
    const std::string host = lower(req.get_header_value("Host"));
    if (std::find(allowed_hosts_.begin(), allowed_hosts_.end(), host) == allowed_hosts_.end()) {
      send_error(res, 403, "Host header not allowed: the viewer answers only for the address it listens on");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (req.method != "GET") {
      send_error(res, 405, "only GET is served");
      return httplib::Server::HandlerResponse::Handled;
    }
    const std::string cookie = "castscope_" + std::to_string(port_);
    const std::string authorization = req.get_header_value("Authorization");
    const bool bearer = authorization.rfind("Bearer ", 0) == 0 &&
                        equal_in_constant_time(authorization.substr(7), options_.token);
    const bool has_cookie = equal_in_constant_time(cookie_value(req.get_header_value("Cookie"), cookie), options_.token);
    const bool in_url = req.has_param("token") && equal_in_constant_time(req.get_param_value("token"), options_.token);
    if (in_url && req.path == "/") {
      // Trade the URL's token for a cookie, and take it out of the address bar.
      res.status = 303;
      res.set_header("Set-Cookie", cookie + "=" + options_.token + "; HttpOnly; SameSite=Strict; Path=/");
      res.set_header("Location", "/");
      return httplib::Server::HandlerResponse::Handled;
    }
    if (!bearer && !has_cookie && !in_url) {
      if (req.path.rfind("/api/", 0) == 0)
        send_error(res, 401, "the viewer needs its token: open the URL castscope printed, or send Authorization: Bearer");
      else if (req.path == "/metrics") {
        res.status = 401;
        res.set_content("castscope: /metrics needs the collector's token: send Authorization: Bearer TOKEN.\n",
                        "text/plain; charset=utf-8");
      } else {
        res.status = 401;
        res.set_content("castscope: open the URL that castscope printed (it carries the access token).\n",
                        "text/plain; charset=utf-8");
      }
      return httplib::Server::HandlerResponse::Handled;
    }
    return httplib::Server::HandlerResponse::Unhandled;
  });

  server.set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.body.empty()) send_error(res, res.status, res.status == 404 ? "not found" : "error");
  });
  server.set_exception_handler([](const httplib::Request&, httplib::Response& res, std::exception_ptr) {
    send_error(res, 500, "internal error");
  });
}

void HttpService::install_static_routes() {
  httplib::Server& server = *server_;
  // Static files: index.html and assets/<one segment>, from the UI folder only.
  auto serve_file = [this](const std::filesystem::path& relative, const httplib::Request& req, httplib::Response& res) {
    if (options_.ui_dir.empty()) {
      send_error(res, 404, "this collector serves no UI (no --ui-dir)");
      return;
    }
    std::error_code ec;
    const std::filesystem::path root = std::filesystem::weakly_canonical(options_.ui_dir, ec);
    const std::filesystem::path file = std::filesystem::weakly_canonical(root / relative, ec);
    const auto [end, _] = std::mismatch(root.begin(), root.end(), file.begin(), file.end());
    if (ec || end != root.end() || !std::filesystem::is_regular_file(file, ec)) {
      send_error(res, 404, "not found");
      return;
    }
    std::ifstream in(file, std::ios::binary);
    std::ostringstream body;
    body << in.rdbuf();
    res.set_header("Cache-Control", "no-cache");
    send_body(req, res, body.str(), content_type(file));
  };
  server.Get("/", [serve_file](const httplib::Request& req, httplib::Response& res) { serve_file("index.html", req, res); });
  server.Get("/index.html",
             [serve_file](const httplib::Request& req, httplib::Response& res) { serve_file("index.html", req, res); });
  server.Get(R"(/assets/([A-Za-z0-9_-][A-Za-z0-9_.-]{0,127}))",
             [serve_file](const httplib::Request& req, httplib::Response& res) {
               const std::string name = req.matches[1];
               if (name.find("..") != std::string::npos) return send_error(res, 404, "not found");
               serve_file(std::filesystem::path("assets") / name, req, res);
             });
}

void HttpService::install_fleet_routes() {
  httplib::Server& server = *server_;
  // The fleet page's API: PostgreSQL's answers, through options_.fleet.
  server.Get(R"(/api/fleet/(jobs|sites|findings|job))", [this](const httplib::Request& req, httplib::Response& res) {
    std::map<std::string, std::string> params;
    for (const auto& [key, value] : req.params) params[key] = value;
    json body;
    const Status status = options_.fleet(req.matches[1], params, body);
    if (!status.ok()) return send_error(res, http_status(status), status.message());
    send_json(req, res, body);
  });
}

void HttpService::install_api_routes() {
  httplib::Server& server = *server_;
  // The API: each route parses its parameters, asks ViewerQueries, answers JSON.
  auto answer = [this](const httplib::Request& req, httplib::Response& res, auto&& query) {
    json body;
    const Status status = queries_.with([&](viewer::ViewerQueries& q) { return query(q, body); });
    if (!status.ok()) return send_error(res, http_status(status), status.message());
    send_json(req, res, body);
  };
  server.Get("/api/runs", [answer](const httplib::Request& req, httplib::Response& res) {
    answer(req, res, [](viewer::ViewerQueries& q, json& body) { return q.runs(body); });
  });
  server.Get("/api/tracks", [answer](const httplib::Request& req, httplib::Response& res) {
    std::string run, error;
    if (!text_param(req, "run", run, error)) return send_error(res, 400, error);
    answer(req, res, [&](viewer::ViewerQueries& q, json& body) { return q.tracks(run, body); });
  });
  server.Get("/api/timeline", [this](const httplib::Request& req, httplib::Response& res) {
    viewer::StepRequest range;
    int64_t px = 0;
    std::string tracks, error;
    if (!text_param(req, "run", range.run_id, error) || !text_param(req, "tracks", tracks, error, 8192) ||
        !integer_param(req, "t0", -(int64_t{1} << 53), int64_t{1} << 53, range.t0, error) ||
        !integer_param(req, "t1", -(int64_t{1} << 53), int64_t{1} << 53, range.t1, error) ||
        !integer_param(req, "px", 1, 20000, px, error))
      return send_error(res, 400, error);
    range.pixels = static_cast<int>(px);
    for (size_t at = 0; at <= tracks.size();) {
      const size_t comma = std::min(tracks.find(',', at), tracks.size());
      range.tracks.push_back(tracks.substr(at, comma - at));
      at = comma + 1;
    }
    std::string body;
    const Status status = queries_.with([&](viewer::ViewerQueries& q) { return q.timeline_text(range, body); });
    if (!status.ok()) return send_error(res, http_status(status), status.message());
    res.set_header("Cache-Control", "no-store");
    send_body(req, res, std::move(body), "application/json");
  });
  server.Get("/api/event", [answer](const httplib::Request& req, httplib::Response& res) {
    std::string run, agent, error;
    int64_t seq = 0;
    if (!text_param(req, "run", run, error) || !text_param(req, "agent", agent, error) ||
        !integer_param(req, "seq", 0, static_cast<int64_t>(kMaxRowSeq), seq, error))
      return send_error(res, 400, error);
    answer(req, res, [&](viewer::ViewerQueries& q, json& body) { return q.event(run, agent, static_cast<uint64_t>(seq), body); });
  });
  server.Get("/api/counters", [answer](const httplib::Request& req, httplib::Response& res) {
    std::string run, error;
    int64_t t0 = 0, t1 = 0, points = 0;
    if (!text_param(req, "run", run, error) ||
        !integer_param(req, "t0", -(int64_t{1} << 53), int64_t{1} << 53, t0, error) ||
        !integer_param(req, "t1", -(int64_t{1} << 53), int64_t{1} << 53, t1, error) ||
        !integer_param(req, "points", 1, 20000, points, error))
      return send_error(res, 400, error);
    answer(req, res, [&](viewer::ViewerQueries& q, json& body) {
      return q.counters(run, t0, t1, static_cast<int>(points), body);
    });
  });
  server.Get("/api/findings", [answer](const httplib::Request& req, httplib::Response& res) {
    std::string run, error;
    if (!text_param(req, "run", run, error)) return send_error(res, 400, error);
    answer(req, res, [&](viewer::ViewerQueries& q, json& body) { return q.findings(run, body); });
  });
  server.Get("/api/sites", [answer](const httplib::Request& req, httplib::Response& res) {
    std::string run, error;
    if (!text_param(req, "run", run, error)) return send_error(res, 400, error);
    answer(req, res, [&](viewer::ViewerQueries& q, json& body) { return q.sites(run, body); });
  });
  server.Get("/api/modules", [answer](const httplib::Request& req, httplib::Response& res) {
    std::string run, error;
    if (!text_param(req, "run", run, error)) return send_error(res, 400, error);
    answer(req, res, [&](viewer::ViewerQueries& q, json& body) { return q.modules(run, body); });
  });
  // The export buttons: a run's report or trace as a file to save.
  server.Get("/api/export", [this](const httplib::Request& req, httplib::Response& res) {
    std::string run, format, error;
    if (!text_param(req, "run", run, error) || !text_param(req, "format", format, error, 16))
      return send_error(res, 400, error);
    auto download = std::make_shared<Download>();
    if (Status s = make_download(db_path_, run, format, *download); !s.ok())
      return send_error(res, http_status(s), s.message());
    res.status = 200;
    res.set_header("Cache-Control", "no-store");
    res.set_header("Content-Disposition", "attachment; filename=\"" + download->filename + "\"");
    if (download->file.empty()) return send_body(req, res, std::move(download->body), download->content_type);
    std::error_code size_error;
    const uintmax_t size = std::filesystem::file_size(download->file, size_error);
    auto file = std::make_shared<std::ifstream>(download->file, std::ios::binary);
    auto remove_folder = [download] {
      std::error_code ignored;
      std::filesystem::remove_all(download->folder, ignored);
    };
    if (size_error || !*file) {
      remove_folder();
      return send_error(res, 500, "export: cannot read the trace it wrote");
    }
    // Streamed from the file (a trace can be gigabytes), which goes with the answer.
    res.set_content_provider(
        static_cast<size_t>(size), download->content_type,
        [file](size_t offset, size_t length, httplib::DataSink& sink) {
          char chunk[1 << 16];
          file->seekg(static_cast<std::streamoff>(offset));
          file->read(chunk, static_cast<std::streamsize>(std::min(length, sizeof chunk)));
          return file->gcount() > 0 && sink.write(chunk, static_cast<size_t>(file->gcount()));
        },
        [remove_folder](bool) { remove_folder(); });
  });
  server.Get("/api/numerics", [answer](const httplib::Request& req, httplib::Response& res) {
    std::string run, error;
    if (!text_param(req, "run", run, error)) return send_error(res, 400, error);
    answer(req, res, [&](viewer::ViewerQueries& q, json& body) { return q.numerics(run, body); });
  });
}

void HttpService::install_metrics_route() {
  httplib::Server& server = *server_;
  // Prometheus scrapes: the same Host and token checks as the rest
  // (a scraper sends Authorization: Bearer TOKEN).
  server.Get("/metrics", [this](const httplib::Request&, httplib::Response& res) {
    std::string body;
    if (Status s = metrics_page(core_, queries_, db_path_, live_viewers_.load(), body); !s.ok())
      return send_error(res, http_status(s), s.message());
    res.status = 200;
    res.set_header("Cache-Control", "no-store");
    res.set_content(std::move(body), kPrometheusContentType);
  });
}

void HttpService::install_live_route() {
  httplib::Server& server = *server_;
  server.Get("/api/live", [this](const httplib::Request& req, httplib::Response& res) {
    // run: the run to follow; none: every run (each message names its run).
    const std::string run = req.has_param("run") ? req.get_param_value("run") : std::string();
    if (run.size() > 1024) return send_error(res, 400, "parameter run: at most 1024 bytes");
    if (live_viewers_.fetch_add(1) >= options_.max_live_viewers) {
      live_viewers_.fetch_sub(1);
      return send_error(res, 503, "too many live viewers (" + std::to_string(options_.max_live_viewers) + ")");
    }
    auto live = std::make_shared<LiveStream>();
    live->run_id = run;
    if (core_ != nullptr) {
      std::weak_ptr<LiveStream> weak = live;
      live->subscription = core_->subscribe(
          run,
          [weak] {
            if (auto l = weak.lock()) {
              std::lock_guard lock(l->mutex);
              l->ready = true;
              l->wake.notify_one();
            }
          },
          options_.live_sample_casts);
    }
    res.set_header("Cache-Control", "no-store");
    res.set_header("X-Accel-Buffering", "no");
    res.set_chunked_content_provider(
        "text/event-stream",
        [this, live](size_t, httplib::DataSink& sink) {
          if (stopping_) return false;
          {
            // At most one message every live->interval: what commits meanwhile waits in the queue.
            const auto since = std::chrono::steady_clock::now() - live->last_write;
            if (since < live->interval) std::this_thread::sleep_for(live->interval - since);
            std::unique_lock lock(live->mutex);
            live->wake.wait_for(lock, std::chrono::milliseconds(500), [&] { return live->ready || stopping_.load(); });
            live->ready = false;
          }
          std::string out = live->subscription ? live_messages(*live, queries_, options_.live_sample_casts) : "";
          const auto now = std::chrono::steady_clock::now();
          if (out.empty() && now - live->last_write >= kKeepAlive) out = ": keep-alive\n\n";
          if (out.empty()) return sink.is_writable();
          live->last_write = now;
          return sink.write(out.data(), out.size());
        },
        [this, live](bool) {
          if (live->subscription) core_->unsubscribe(live->subscription);
          live_viewers_.fetch_sub(1);
        });
  });
}

}  // namespace castscope::collector
