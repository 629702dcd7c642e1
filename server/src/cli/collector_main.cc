// castscope-collector: serve (gRPC ingest, query, subscribe), load (spool
// directories), query (JSON out of a store), report and export (a run as a
// Perfetto or Chrome trace). Exit codes: 0 ok, 1 a
// failure at run time (or `load` skipped frames), 2 a bad command line or a
// refused configuration. The command line is CLI11's: `--help` on every
// subcommand, `--help-all` for all of them. CLI11 reports a bad command line
// by throwing; main() catches it in one place and turns it into exit code 2.
#include <grpcpp/grpcpp.h>
#include <fcntl.h>
#include <grpcpp/security/server_credentials.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <malloc.h>
#include <sys/prctl.h>
#include <algorithm>
#include <cctype>
#include <csignal>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "common/cli/exit_status.h"
#include "common/cli/validators.h"
#include "common/log/rate_limited.h"
#include "common/version/castscope_version.h"
#include "server/src/analysis/finding_catalog.h"
#include "server/src/analysis/live_analyzer.h"
#include "server/src/cli/progress_meter.h"
#include "server/src/cli/query_command.h"
#include "server/src/cli/fleet_command.h"
#include "server/src/export/export_run.h"
#include "server/src/fleet/shipper.h"
#include "server/src/ingest/collector_core.h"
#include "server/src/ingest/spool_import.h"
#include "server/src/report/run_report.h"
#include "server/src/service/grpc_services.h"
#include "server/src/service/http_service.h"
#include "server/src/viewer/viewer_queries.h"

namespace castscope::collector {
namespace {
using cli::address;
using cli::decimal_number;
using cli::HostPort;
using cli::is_loopback_host;
using cli::non_empty;
using cli::parse_host_port;

using cli::kExitUsage;

constexpr const char* kProgram = "castscope-collector";
// Per-stream HTTP/2 window: enough to keep one forwarder streaming at full
// speed on loopback, small enough that 64 streams hold 16 MiB.
constexpr int kStreamWindowBytes = 256 << 10;

// SIGINT and SIGTERM blocked in this thread and every thread started after
// it, so that main alone takes them, with sigwait.
sigset_t block_stop_signals() {
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);
  return stop_signals;
}

// The viewer commands: serve until SIGINT or SIGTERM, then stop.
void serve_until_stopped(const sigset_t& stop_signals, HttpService& http) {
  int signal = 0;
  sigwait(&stop_signals, &signal);
  http.stop();
}

int usage_error(const std::string& command, const std::string& what) {
  std::cerr << kProgram << (command.empty() ? "" : " " + command) << ": " << what << "\n"
            << "(" << kProgram << (command.empty() ? "" : " " + command) << " --help lists the options)\n";
  return kExitUsage;
}

bool read_file(const std::string& path, std::string& contents) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  contents = buffer.str();
  return true;
}

// --token T | --token-file F, for the subcommands that talk to clients.
struct TokenOptions {
  std::string token;
  std::string token_file;
  CLI::Option* token_option = nullptr;
  CLI::Option* file_option = nullptr;

  void add_to(CLI::App& app) {
    token_option = app.add_option("--token", token, "bearer token every call must carry");
    file_option = app.add_option("--token-file", token_file, "read the token from this file (trailing whitespace dropped)");
    token_option->excludes(file_option);
  }
  bool given() const { return token_option->count() > 0 || file_option->count() > 0; }

  // The token (empty when neither option is given); an error message, empty on success.
  std::string resolve(std::string& out) const {
    out = token;
    if (file_option->count() > 0) {
      if (!read_file(token_file, out)) return "--token-file " + token_file + ": cannot read";
      while (!out.empty() && std::isspace(static_cast<unsigned char>(out.back()))) out.pop_back();
    }
    if (given() && out.empty()) return "the token is empty";
    return "";
  }
};

// The viewer's HTTP side (docs/viewer.md), for serve and view.
struct ViewerOptions {
  std::string listen = "127.0.0.1:0";
  bool off = false;
  std::string ui_dir;
  std::string url_file;

  void add_to(CLI::App& app, bool can_turn_off) {
    app.add_option("--http-listen", listen, "serve the viewer on HOST:PORT (port 0: any free port); other than "
                                            "loopback needs --token")
        ->check(address(/*port_zero_ok=*/true, /*unix_ok=*/false))
        ->capture_default_str();
    if (can_turn_off) app.add_flag("--no-http", off, "serve no viewer");
    app.add_option("--ui-dir", ui_dir,
                   "the built viewer (ui/dist); default: the one installed beside this program, or the source tree's")
        ->check(CLI::ExistingDirectory);
    app.add_option("--viewer-file", url_file, "write the viewer's URL (with its token) here once listening")
        ->check(non_empty());
  }
};

struct ViewOptions {
  std::string db;
  TokenOptions token;
  ViewerOptions viewer;
};

struct ServeOptions {
  std::string db;
  std::string listen = "127.0.0.1:0";
  TokenOptions token;
  std::string tls_cert;
  std::string tls_key;
  uint64_t max_message_bytes = 16u << 20;
  uint64_t queue_budget_bytes = CollectorOptions().queue_budget_bytes;
  size_t max_streams = ServiceOptions().max_streams;
  double stream_hello_s = ServiceOptions().idle.hello_limit.count() / 1e3;
  double stream_idle_s = ServiceOptions().idle.idle_limit.count() / 1e3;
  std::string ready_file;
  uint64_t analyze_interval_ms = 2000;
  ViewerOptions viewer;
  int exit_with_parent = 0;  // pid; 0: outlive the parent
  ShipOptions ship;
};

struct LoadOptions {
  std::string db;
  std::vector<std::string> spool_dirs;
};

struct QueryOptions {
  QueryCommand command;
  TokenOptions token;
  std::string tls_ca;
  CLI::Option* db_option = nullptr;
  CLI::Option* collector_option = nullptr;
};

struct ReportOptions {
  std::string db;
  std::string run_id;
  std::optional<int32_t> rank;
};

struct ExportCommandOptions {
  ExportOptions options;
  CLI::Option* perfetto_option = nullptr;
  CLI::Option* chrome_option = nullptr;
};

CLI::App* add_serve(CLI::App& app, ServeOptions& o) {
  CLI::App* serve = app.add_subcommand("serve", "run the collector: gRPC ingest, query and subscribe");
  serve->add_option("--db", o.db, "SQLite store (one writer per file)")->required()->check(non_empty());
  serve->add_option("--listen", o.listen, "HOST:PORT (port 0: any free port) or unix:PATH; other than loopback "
                                          "needs a token")
      ->check(address(/*port_zero_ok=*/true, /*unix_ok=*/true))
      ->capture_default_str();
  o.token.add_to(*serve);
  CLI::Option* cert =
      serve->add_option("--tls-cert", o.tls_cert, "serve TLS with this certificate chain (PEM)")->check(non_empty());
  CLI::Option* key = serve->add_option("--tls-key", o.tls_key, "and this private key (PEM)")->check(non_empty());
  cert->needs(key);
  key->needs(cert);
  serve->add_option("--max-message-bytes", o.max_message_bytes, "largest request accepted")
      ->transform(decimal_number())
      ->check(CLI::Range(uint64_t{1}, uint64_t{INT32_MAX}))
      ->capture_default_str();
  serve->add_option("--queue-budget-bytes", o.queue_budget_bytes,
                    "memory for ingest: batches queued for the store, batches being read and each stream's "
                    "transport window; past it, streams are pushed back")
      ->transform(decimal_number())
      ->check(CLI::Range(uint64_t{1}, uint64_t{UINT64_MAX}))
      ->capture_default_str();
  serve->add_option("--max-streams", o.max_streams,
                    "concurrent ingest streams; more are refused with UNAVAILABLE (forwarders retry) (0: no limit)")
      ->transform(decimal_number())
      ->check(CLI::Range(size_t{0}, size_t{1} << 20))
      ->capture_default_str();
  serve->add_option("--stream-hello-s", o.stream_hello_s,
                    "an ingest stream that sends no Hello within this many seconds is ended")
      ->check(CLI::Range(0.1, 86400.0))
      ->capture_default_str();
  serve->add_option("--stream-idle-s", o.stream_idle_s,
                    "an ingest stream that sends nothing for this many seconds is ended (its forwarder reconnects "
                    "when it has batches); at --max-streams the stream idle longest gives its place to a new one "
                    "(0: never ended for idling)")
      ->check(CLI::Range(0.0, 86400.0 * 365))
      ->capture_default_str();
  serve->add_option("--ready-file", o.ready_file, "write the bound HOST:PORT here once listening")->check(non_empty());
  serve->add_option("--exit-with-parent", o.exit_with_parent,
                    "the PID of the process that started this collector: stop (committing what is queued, as on "
                    "SIGTERM) when it is gone, even if it was killed")
      ->check(CLI::Range(1, 1 << 30));
  o.viewer.add_to(*serve, /*can_turn_off=*/true);
  o.ship.add_to(*serve);
  serve->add_option("--analyze-interval-ms", o.analyze_interval_ms,
                    "re-analyze a run with new events at most this often (0: no live analysis)")
      ->transform(decimal_number())
      ->check(CLI::Range(uint64_t{0}, uint64_t{3600000}))
      ->capture_default_str();
  return serve;
}

CLI::App* add_view(CLI::App& app, ViewOptions& o) {
  CLI::App* view = app.add_subcommand("view", "serve the viewer over a stored database, read-only, until interrupted");
  view->add_option("--db", o.db, "SQLite store")->required()->check(CLI::ExistingFile);
  o.token.add_to(*view);
  o.viewer.add_to(*view, /*can_turn_off=*/false);
  return view;
}

CLI::App* add_load(CLI::App& app, LoadOptions& o) {
  CLI::App* load = app.add_subcommand("load", "import spool folders into a store (batches stored before are skipped)");
  load->add_option("--db", o.db, "SQLite store")->required()->check(non_empty());
  load->add_option("SPOOL_DIR", o.spool_dirs, "spool folders (of castscope run, or an agent's spool_dir)")
      ->required()
      ->check(CLI::ExistingDirectory);
  return load;
}

CLI::App* add_query(CLI::App& app, QueryOptions& o) {
  QueryCommand& c = o.command;
  CLI::App* query = app.add_subcommand("query", "print what a store or a running collector holds, as JSON");
  o.db_option = query->add_option("--db", c.db, "read this store (read-only; fine while a collector writes it)")
                    ->check(non_empty());
  o.collector_option = query->add_option("--collector", c.collector, "or ask the collector at HOST:PORT")
                           ->check(address(/*port_zero_ok=*/false, /*unix_ok=*/true));
  o.db_option->excludes(o.collector_option);
  o.token.add_to(*query);
  query->add_option("--tls-ca", o.tls_ca, "the --collector serves TLS: trust this CA certificate (PEM)")
      ->check(non_empty())
      ->needs(o.collector_option);
  query->add_option("WHAT", c.what, "runs, events, sequences, findings or shipping (fleet shipping's state; --db)")
      ->check(CLI::IsMember({"runs", "events", "sequences", "findings", "shipping"}));
  query->add_option("--run", c.run_id, "run id (events and sequences need it)");
  query->add_option("--agent", c.agent_id, "only this agent's events");
  query->add_option("--kind", c.kind, "only events of this kind")->check(CLI::IsMember({"cast", "op", "cache_sample"}));
  query->add_option("--op", c.op, "only events of this op");
  query->add_option("--file", c.file, "only events at this source file");
  query->add_option("--line", c.line, "only events at this line")
      ->transform(decimal_number())
      ->check(CLI::Range(uint32_t{0}, uint32_t{UINT32_MAX}));
  query->add_option("--after-seq", c.after_seq, "events after this sequence (paging, with --agent)")
      ->transform(decimal_number());
  query->add_option("--limit", c.limit, "at most this many events (0: the store's default)")
      ->transform(decimal_number())
      ->check(CLI::Range(uint32_t{0}, uint32_t{UINT32_MAX}));
  return query;
}

CLI::App* add_report(CLI::App& app, ReportOptions& o) {
  CLI::App* report = app.add_subcommand("report", "print the JSON audit report of a stored run, findings included");
  report->add_option("--db", o.db, "SQLite store")->required()->check(non_empty());
  report->add_option("--run", o.run_id, "run id (query runs lists them)")->required()->check(non_empty());
  report->add_option("--rank", o.rank, "only the processes of this rank (RANK)")->check(CLI::Range(0, 1 << 30));
  return report;
}

CLI::App* add_export(CLI::App& app, ExportCommandOptions& o) {
  CLI::App* command = app.add_subcommand("export", "write a stored run as a Perfetto trace, a Chrome trace or both");
  command->add_option("--db", o.options.db_path, "SQLite store (read-only; fine while a collector writes it)")
      ->required()
      ->check(non_empty());
  command->add_option("--run", o.options.run_id, "run id (query runs lists them)")->required()->check(non_empty());
  o.perfetto_option = command->add_option("--perfetto", o.options.perfetto_path,
                                          "write Perfetto's protobuf trace here (ui.perfetto.dev opens it)")
                          ->check(non_empty());
  o.chrome_option = command->add_option("--chrome", o.options.chrome_path,
                                        "write a Chrome trace (JSON) here (chrome://tracing opens it)")
                        ->check(non_empty());
  return command;
}

// "HOST:PORT" → HOST ("[::1]:0" → "[::1]").
std::string host_of(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

bool is_loopback(const std::string& address) {
  if (address.starts_with("unix:")) return true;
  HostPort parsed;
  return parse_host_port(address, /*port_zero_ok=*/true, parsed).empty() && is_loopback_host(parsed.host);
}

// Written whole and renamed into place (a reader never sees half an
// address), 0600 like every file castscope creates.
bool write_ready_file(const std::string& path, const std::string& address) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return false;
  const std::string line = address + "\n";
  const bool written = ::write(fd, line.data(), line.size()) == static_cast<ssize_t>(line.size());
  if (::close(fd) != 0 || !written) {
    ::unlink(temporary.c_str());
    return false;
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  if (ec) ::unlink(temporary.c_str());
  return !ec;
}

// The built UI: --ui-dir, else ui/ beside this program (installed from the
// wheel: site-packages/castscope/ui), else ui/dist of the source tree it was
// built in (build/server/castscope-collector), else none (API only).
std::string find_ui_dir(const std::string& given) {
  if (!given.empty()) return given;
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) return {};
  const std::filesystem::path here = exe.parent_path();
  for (const auto& candidate : {here / "ui", here / ".." / ".." / "ui" / "dist", here / ".." / "ui" / "dist"})
    if (std::filesystem::is_regular_file(candidate / "index.html", ec)) return std::filesystem::weakly_canonical(candidate, ec);
  return {};
}

// Starts the viewer for serve (core set) or view (core null); prints its URL.
// An error message, empty on success.
std::string start_viewer(const ViewerOptions& o, const std::string& token, const std::string& db, CollectorCore* core,
                         std::unique_ptr<HttpService>& out, FleetAnswer fleet = nullptr) {
  HttpOptions options;
  HostPort bind;
  if (std::string error = parse_host_port(o.listen, /*port_zero_ok=*/true, bind); !error.empty())
    return "--http-listen " + o.listen + ": " + error;
  options.host = bind.host;
  options.port = bind.port;
  if (!is_loopback(o.listen) && token.empty())
    return "--http-listen " + o.listen + " is not a loopback address: give --token or --token-file";
  options.token = token.empty() ? random_token() : token;
  options.ui_dir = find_ui_dir(o.ui_dir);
  options.fleet = std::move(fleet);
  auto service = std::make_unique<HttpService>(options, db, core);
  if (Status s = service->start(); !s.ok()) return s.message();
  std::cerr << "castscope: viewer at " << service->url() << std::endl;
  if (options.ui_dir.empty())
    std::cerr << "castscope-collector: no built UI found (give --ui-dir; scripts/setup.sh builds ui/dist): API only"
              << std::endl;
  if (!o.url_file.empty() && !write_ready_file(o.url_file, service->url()))
    return "cannot write --viewer-file " + o.url_file;
  out = std::move(service);
  return {};
}

int view(const ViewOptions& o) {
  std::string token;
  if (std::string error = o.token.resolve(token); !error.empty()) return usage_error("view", error);
  {
    std::unique_ptr<viewer::ViewerQueries> probe;  // a clear error now rather than on the first request
    if (Status s = viewer::ViewerQueries::open(o.db, probe); !s.ok()) {
      std::cerr << "castscope-collector view: " << s.message() << "\n";
      return 1;
    }
  }
  const sigset_t stop_signals = block_stop_signals();
  std::unique_ptr<HttpService> http;
  if (std::string error = start_viewer(o.viewer, token, o.db, nullptr, http); !error.empty()) {
    std::cerr << "castscope-collector view: " << error << "\n";
    return 1;
  }
  serve_until_stopped(stop_signals, *http);
  return 0;
}

struct FleetViewOptions {
  std::string url;
  std::string password_file;
  TokenOptions token;
  ViewerOptions viewer;
};

CLI::App* add_fleet_view(CLI::App& fleet, FleetViewOptions& o) {
  CLI::App* view = fleet.add_subcommand("view", "serve the fleet page (the viewer over the fleet's PostgreSQL, "
                                                "read with the reader role) until interrupted");
  view->add_option("url", o.url, "libpq URL of the fleet database (no password in it)")->required();
  view->add_option("--password-file", o.password_file, "the password, from this file (mode 600; else PGPASSWORD or "
                                                       "~/.pgpass)");
  o.token.add_to(*view);
  o.viewer.add_to(*view, /*can_turn_off=*/false);
  return view;
}

// `fleet view`: the viewer's security (token, Host, CSP), the fleet's answers.
int fleet_view(const FleetViewOptions& o) {
  std::string token;
  if (std::string error = o.token.resolve(token); !error.empty()) return usage_error("fleet view", error);
  FleetAnswer answers;
  if (Status s = fleet_page_answers(o.url, o.password_file, answers); !s.ok()) {
    std::cerr << "castscope-collector fleet view: " << s.message() << "\n";
    return s.code() == StatusCode::kInvalidArgument ? kExitUsage : 1;
  }
  const sigset_t stop_signals = block_stop_signals();
  std::unique_ptr<HttpService> http;
  if (std::string error = start_viewer(o.viewer, token, "", nullptr, http, std::move(answers)); !error.empty()) {
    std::cerr << "castscope-collector fleet view: " << error << "\n";
    return 1;
  }
  serve_until_stopped(stop_signals, *http);
  return 0;
}

int serve(const ServeOptions& o) {
  // Batches live in arena blocks of about a megabyte, freed in whatever order
  // their commits end. From glibc's heaps they fragment (RSS at twice what is
  // in use, never given back); mapped and unmapped, they come and go whole.
  // Two heaps instead of one per core times eight: the gRPC threads' small
  // allocations do not need more.
  ::mallopt(M_MMAP_THRESHOLD, 256 << 10);
  ::mallopt(M_ARENA_MAX, 2);
  std::string token;
  if (std::string error = o.token.resolve(token); !error.empty()) return usage_error("serve", error);
  if (!is_loopback(o.listen) && token.empty())
    return usage_error("serve", "--listen " + o.listen +
                                    " is not a loopback address: give --token or --token-file so that only your "
                                    "agents can send and read");
  const bool tls = !o.tls_cert.empty() || !o.tls_key.empty();
  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (tls) {
    grpc::SslServerCredentialsOptions tls_options;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    if (!read_file(o.tls_key, pair.private_key)) return usage_error("serve", "--tls-key " + o.tls_key + ": cannot read");
    if (!read_file(o.tls_cert, pair.cert_chain))
      return usage_error("serve", "--tls-cert " + o.tls_cert + ": cannot read");
    tls_options.pem_key_cert_pairs.push_back(pair);
    credentials = grpc::SslServerCredentials(tls_options);
  }
  CollectorOptions core_options;
  core_options.queue_budget_bytes = o.queue_budget_bytes;
  core_options.stream_window_bytes = kStreamWindowBytes;
  fleet::ShipperOptions ship_options;
  if (std::string error = o.ship.resolve(ship_options); !error.empty()) return usage_error("serve", error);
  core_options.ship_rollups = !ship_options.target.url.empty();

  // Every thread started from here on inherits the mask; main waits for the signals.
  const sigset_t stop_signals = block_stop_signals();
  // An embedded collector (castscope run) must not outlive a killed `castscope
  // run`: the kernel sends SIGTERM when the parent goes, and it waits below
  // like any other. A parent gone before this line: the same, now.
  if (o.exit_with_parent != 0) {
    prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (getppid() != o.exit_with_parent) kill(getpid(), SIGTERM);
  }

  std::unique_ptr<CollectorCore> core;
  if (Status s = CollectorCore::open(o.db, core_options, core); !s.ok()) {
    std::cerr << "castscope-collector serve: " << s.message() << "\n";
    return 1;
  }
  std::unique_ptr<LiveAnalyzer> analyzer;
  if (o.analyze_interval_ms > 0) {
    analyzer = std::make_unique<LiveAnalyzer>(*core, std::chrono::milliseconds(o.analyze_interval_ms));
    core->set_commit_listener([&analyzer](const std::vector<CommittedRun>& runs) { analyzer->committed(runs); });
  }
  std::unique_ptr<fleet::Shipper> shipper;
  if (core_options.ship_rollups) {
    if (Status s = fleet::Shipper::start(*core, ship_options, shipper); !s.ok()) {
      std::cerr << "castscope-collector serve: --ship: " << s.message() << "\n";
      if (analyzer) analyzer->stop();
      core->shutdown();
      return s.code() == StatusCode::kInvalidArgument ? kExitUsage : 1;
    }
    if (analyzer) analyzer->set_analyzed_listener([&shipper](const std::string& run) { shipper->run_analyzed(run); });
  }
  ServiceOptions service_options;
  service_options.token = token;
  service_options.max_streams = o.max_streams;
  service_options.idle.hello_limit = std::chrono::milliseconds(static_cast<int64_t>(o.stream_hello_s * 1e3));
  service_options.idle.idle_limit = std::chrono::milliseconds(static_cast<int64_t>(o.stream_idle_s * 1e3));
  std::unique_ptr<CollectorServices> services;
  if (Status s = CollectorServices::create(*core, service_options, services); !s.ok()) {
    std::cerr << "castscope-collector serve: " << s.message() << "\n";
    return 1;
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(o.listen, credentials, &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(o.max_message_bytes));
  // Fixed HTTP/2 flow-control windows: gRPC's bandwidth probe grows each
  // connection's window to megabytes, which a collector with many busy
  // streams holds on top of its queue budget (docs/operations.md: memory).
  builder.AddChannelArgument(GRPC_ARG_HTTP2_BDP_PROBE, 0);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kStreamWindowBytes);
  services->register_with(builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || (port == 0 && !o.listen.starts_with("unix:"))) {
    std::cerr << "castscope-collector serve: cannot listen on " << o.listen << "\n";
    return 1;
  }
  const std::string bound = o.listen.starts_with("unix:") ? o.listen : host_of(o.listen) + ":" + std::to_string(port);
  std::cerr << "castscope-collector: listening on " << bound << " db " << o.db << (token.empty() ? "" : " (token required)")
            << (tls ? " (TLS)" : "") << std::endl;
  std::unique_ptr<HttpService> http;
  if (!o.viewer.off)
    if (std::string error = start_viewer(o.viewer, token, o.db, core.get(), http); !error.empty()) {
      std::cerr << "castscope-collector serve: " << error << "\n";
      server->Shutdown();
      if (analyzer) analyzer->stop();
      if (shipper) shipper->stop();
      core->shutdown();
      return 1;
    }
  if (!o.ready_file.empty() && !write_ready_file(o.ready_file, bound)) {
    std::cerr << "castscope-collector serve: cannot write --ready-file " << o.ready_file << "\n";
    server->Shutdown();
    if (analyzer) analyzer->stop();
    if (shipper) shipper->stop();
    core->shutdown();
    return 1;
  }

  int signal = 0;
  sigwait(&stop_signals, &signal);
  std::cerr << "castscope-collector: " << (signal == SIGINT ? "SIGINT" : "SIGTERM")
            << ": stopping; committing what is queued" << std::endl;
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  if (http) http->stop();
  core->drain();                   // everything received is committed...
  if (analyzer) analyzer->stop();  // ...and analyzed once more; shutdown() then stores the findings
  if (shipper) shipper->stop();    // ...and shipped (what PostgreSQL takes in time; the rest waits in the store)
  core->shutdown();
  const CollectorCounters counters = core->counters();
  log::flush_rate_limited();  // what rate-limited warnings held back, told before the last line
  std::cerr << "castscope-collector: stopped; " << counters.batches_stored << " batches stored ("
            << counters.events_stored << " events), " << counters.batches_duplicate << " duplicates" << std::endl;
  return 0;
}

int load(const LoadOptions& o) {
  std::unique_ptr<CollectorCore> core;
  if (Status s = CollectorCore::open(o.db, CollectorOptions(), core); !s.ok()) {
    std::cerr << "castscope-collector load: " << s.message() << "\n";
    return 1;
  }
  LiveAnalyzer analyzer(*core, std::chrono::hours(1), /*analyze_on_agent_end=*/false);  // once per run, at the end
  core->set_commit_listener([&analyzer](const std::vector<CommittedRun>& runs) { analyzer.committed(runs); });
  ProgressMeter meter("castscope-collector load", ProgressMeter::Unit::kBytes);
  const SpoolImportReport report = import_spool(*core, o.spool_dirs, BatchLimits(),
                                                [&meter](uint64_t done, uint64_t total) { meter.update(done, total); });
  meter.finish();
  analyzer.stop();
  core->shutdown();
  for (const std::string& problem : report.problems) std::cerr << "castscope-collector load: " << problem << "\n";
  std::cerr << "castscope-collector load: " << report.agent_dirs << " agents, " << report.segments << " segments: "
            << report.batches_stored << " batches stored (" << report.events_stored << " events), "
            << report.batches_duplicate << " already stored, " << report.frames_skipped << " frames skipped"
            << (report.batches_failed ? ", " + std::to_string(report.batches_failed) + " failed to store" : "") << "\n";
  return report.clean() ? 0 : 1;
}

int query(QueryOptions& o) {
  if (o.command.what.empty()) return usage_error("query", "give one of runs, events, sequences, findings");
  if (o.db_option->count() == 0 && o.collector_option->count() == 0)
    return usage_error("query", "give either --db FILE or --collector HOST:PORT");
  if (std::string error = o.token.resolve(o.command.token); !error.empty()) return usage_error("query", error);
  if (!o.tls_ca.empty()) {
    std::error_code ec;
    if (!std::filesystem::is_regular_file(o.tls_ca, ec) || !read_file(o.tls_ca, o.command.tls_ca_pem) ||
        o.command.tls_ca_pem.empty())
      return usage_error("query", "--tls-ca " + o.tls_ca + ": cannot read a certificate there; give the CA "
                                  "certificate (PEM) that signed the collector's --tls-cert");
  }
  return run_query(o.command, std::cout, std::cerr);
}

int report(const ReportOptions& o) {
  nlohmann::json out;
  ProgressMeter meter("castscope-collector report", ProgressMeter::Unit::kEvents);
  const Status s = build_run_report(o.db, o.run_id, out, o.rank,
                                    [&meter](uint64_t done, uint64_t total) { meter.update(done, total); });
  meter.finish();
  if (!s.ok()) {
    std::cerr << "castscope-collector report: " << s.message() << "\n";
    return s.code() == StatusCode::kNotFound ? 2 : 1;
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}

int export_command(const ExportCommandOptions& o) {
  if (o.perfetto_option->count() == 0 && o.chrome_option->count() == 0)
    return usage_error("export", "give --perfetto FILE, --chrome FILE or both");
  if (o.options.perfetto_path == o.options.chrome_path)
    return usage_error("export", "--perfetto and --chrome name the same file " + o.options.chrome_path);
  ExportSummary summary;
  if (Status s = export_run(o.options, summary); !s.ok()) {
    std::cerr << "castscope-collector export: " << s.message() << "\n";
    return s.code() == StatusCode::kNotFound || s.code() == StatusCode::kInvalidArgument ? kExitUsage : 1;
  }
  const auto describe = [](const char* format, const std::string& path, const TraceCounts& c) {
    std::cerr << "castscope-collector export: " << format << " " << path << ": " << c.processes << " processes, "
              << c.threads << " threads, " << c.op_slices << " ops, " << c.cast_instants << " casts, "
              << c.counter_samples << " cache samples, " << c.kernel_slices << " GPU activities, "
              << c.cast_flows + c.launch_flows << " flows"
              << (c.scaler_samples > 0 ? ", " + std::to_string(c.scaler_samples) + " GradScaler updates (" +
                                             std::to_string(c.skipped_steps) + " skipped steps)"
                                       : std::string())
              << (c.numerics_instants > 0 ? ", " + std::to_string(c.numerics_instants) + " numerics problems"
                                          : std::string())
              << "\n";
  };
  if (!o.options.perfetto_path.empty()) describe("Perfetto trace", o.options.perfetto_path, summary.perfetto);
  if (!o.options.chrome_path.empty()) describe("Chrome trace", o.options.chrome_path, summary.chrome);
  return 0;
}

}  // namespace
}  // namespace castscope::collector

int main(int argc, char** argv) {
  using namespace castscope::collector;
  CLI::App app("castscope-collector: stores, analyzes and serves castscope's events", kProgram);
  app.option_defaults()->take_last();  // a repeated option: the last one counts
  app.set_help_all_flag("--help-all", "print the options of every subcommand and exit");
  app.set_version_flag("--version", std::string(kProgram) + " " + castscope::kCastscopeVersion);
  app.require_subcommand(1);
  ServeOptions serve_options;
  LoadOptions load_options;
  QueryOptions query_options;
  ReportOptions report_options;
  ViewOptions view_options;
  ExportCommandOptions export_options;
  CLI::App* serve_app = add_serve(app, serve_options);
  CLI::App* load_app = add_load(app, load_options);
  CLI::App* query_app = add_query(app, query_options);
  CLI::App* report_app = add_report(app, report_options);
  CLI::App* view_app = add_view(app, view_options);
  CLI::App* export_app = add_export(app, export_options);
  CLI::App* catalog_app = app.add_subcommand("catalog", "print the finding catalog as JSON: every kind, its default "
                                                        "severity, family, title and why (docs/diagnostics.md)");
  FleetCommand fleet_options;
  CLI::App* fleet_app = add_fleet(app, fleet_options);
  FleetViewOptions fleet_view_options;
  CLI::App* fleet_view_app = add_fleet_view(*fleet_app, fleet_view_options);

  const std::string first = argc > 1 ? argv[1] : "";
  if (argc <= 1) return usage_error("", "no command: give serve, view, load, query, report, export, catalog or fleet");
  if (first == "help") {  // as `--help`
    std::cout << app.help();
    return 0;
  }
  const auto known = {serve_app, load_app, query_app, report_app, view_app, export_app, catalog_app, fleet_app};
  if (!first.empty() && !first.starts_with("-") &&
      std::none_of(known.begin(), known.end(), [&](const CLI::App* sub) { return sub->get_name() == first; }))
    return usage_error("", "unknown command " + first);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();  // the help of the subcommand given, if any
    return 0;
  } catch (const CLI::CallForAllHelp&) {
    std::cout << app.help("", CLI::AppFormatMode::All);
    return 0;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    const auto parsed = app.get_subcommands();
    return usage_error(parsed.empty() ? "" : parsed.front()->get_name(), e.what());
  }
  if (serve_app->parsed()) return serve(serve_options);
  if (load_app->parsed()) return load(load_options);
  if (query_app->parsed()) return query(query_options);
  if (report_app->parsed()) return report(report_options);
  if (view_app->parsed()) return view(view_options);
  if (export_app->parsed()) return export_command(export_options);
  if (catalog_app->parsed()) {
    std::cout << finding_catalog_json().dump(2) << "\n";
    return 0;
  }
  if (fleet_view_app->parsed()) return fleet_view(fleet_view_options);
  if (fleet_app->parsed()) return run_fleet(fleet_options);
  return usage_error("", "no command");
}
