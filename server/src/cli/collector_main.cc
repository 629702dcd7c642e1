// castscope-collector: serve (gRPC ingest, query, subscribe), load (spool
// directories) and query (JSON out of a store). Exit codes: 0 ok, 1 a
// failure at run time (or `load` skipped frames), 2 a bad command line or a
// refused configuration.
#include <grpcpp/grpcpp.h>
#include <grpcpp/security/server_credentials.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "server/src/ingest/collector_core.h"
#include "server/src/service/grpc_services.h"
#include "server/src/cli/query_command.h"
#include "server/src/report/run_report.h"
#include "server/src/analysis/live_analyzer.h"
#include "server/src/ingest/spool_import.h"

namespace castscope::collector {
namespace {

constexpr const char* kUsage =
    "usage: castscope-collector serve --db FILE [--listen HOST:PORT] [--token T | --token-file F]\n"
    "                                 [--tls-cert F --tls-key F] [--max-message-bytes N] [--ready-file F]\n"
    "                                 [--queue-budget-bytes N] [--analyze-interval-ms N (0: off)]\n"
    "       castscope-collector load --db FILE SPOOL_DIR...\n"
    "       castscope-collector query (--db FILE | --collector HOST:PORT [--token T | --token-file F])\n"
    "                                 runs|events|sequences|findings [--run R] [--agent A] [--kind cast|op|cache_sample]\n"
    "                                 [--op NAME] [--file F] [--line N] [--after-seq N] [--limit N]\n"
    "       castscope-collector report --db FILE --run R     (the JSON audit report, findings included)\n";

constexpr int kExitUsage = 2;

// Options of one subcommand: every option takes a value; other words are positional.
struct Arguments {
  std::map<std::string, std::string> options;
  std::vector<std::string> positional;

  std::string get(const std::string& name) const {
    auto it = options.find(name);
    return it == options.end() ? std::string() : it->second;
  }
  bool has(const std::string& name) const { return options.count(name) != 0; }
};

int usage_error(const std::string& command, const std::string& what) {
  std::cerr << "castscope-collector " << command << ": " << what << "\n" << kUsage;
  return kExitUsage;
}

std::optional<Arguments> parse(const std::string& command, int argc, char** argv,
                               const std::vector<std::string>& known, int& exit_code) {
  Arguments arguments;
  for (int i = 2; i < argc; ++i) {
    const std::string word = argv[i];
    if (!word.starts_with("--")) {
      arguments.positional.push_back(word);
      continue;
    }
    if (std::find(known.begin(), known.end(), word) == known.end()) {
      exit_code = usage_error(command, "unknown option " + word);
      return std::nullopt;
    }
    if (i + 1 >= argc) {
      exit_code = usage_error(command, "option " + word + " needs a value");
      return std::nullopt;
    }
    arguments.options[word] = argv[++i];
  }
  return arguments;
}

bool parse_number(const std::string& text, uint64_t& value) {
  if (text.empty() || text.find_first_not_of("0123456789") != std::string::npos || text.size() > 19) return false;
  value = std::stoull(text);
  return true;
}

bool read_file(const std::string& path, std::string& contents) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream buffer;
  buffer << in.rdbuf();
  contents = buffer.str();
  return true;
}

// The token from --token or --token-file (trailing whitespace dropped); false on a bad combination.
bool resolve_token(const std::string& command, const Arguments& arguments, std::string& token, int& exit_code) {
  if (arguments.has("--token") && arguments.has("--token-file")) {
    exit_code = usage_error(command, "--token and --token-file exclude each other");
    return false;
  }
  token = arguments.get("--token");
  if (arguments.has("--token-file")) {
    if (!read_file(arguments.get("--token-file"), token)) {
      exit_code = usage_error(command, "--token-file " + arguments.get("--token-file") + ": cannot read");
      return false;
    }
    while (!token.empty() && std::isspace(static_cast<unsigned char>(token.back()))) token.pop_back();
  }
  if (arguments.has("--token") || arguments.has("--token-file")) {
    if (token.empty()) {
      exit_code = usage_error(command, "the token is empty");
      return false;
    }
  }
  return true;
}

// "HOST:PORT" → HOST ("[::1]:0" → "[::1]").
std::string host_of(const std::string& address) {
  const size_t colon = address.rfind(':');
  return colon == std::string::npos ? address : address.substr(0, colon);
}

bool is_loopback(const std::string& address) {
  if (address.starts_with("unix:")) return true;
  const std::string host = host_of(address);
  return host == "localhost" || host.starts_with("127.") || host == "[::1]" || host == "::1";
}

bool write_ready_file(const std::string& path, const std::string& address) {
  const std::string temporary = path + ".tmp." + std::to_string(::getpid());
  {
    std::ofstream out(temporary, std::ios::trunc);
    out << address << "\n";
    if (!out.flush()) return false;
  }
  std::error_code ec;
  std::filesystem::rename(temporary, path, ec);
  return !ec;
}

int serve(int argc, char** argv) {
  int exit_code = 0;
  const auto arguments = parse("serve", argc, argv,
                               {"--db", "--listen", "--token", "--token-file", "--tls-cert", "--tls-key",
                                "--max-message-bytes", "--ready-file", "--queue-budget-bytes", "--analyze-interval-ms"},
                               exit_code);
  if (!arguments) return exit_code;
  if (!arguments->positional.empty()) return usage_error("serve", "unexpected argument " + arguments->positional[0]);
  if (arguments->get("--db").empty()) return usage_error("serve", "--db FILE is required");
  std::string token;
  if (!resolve_token("serve", *arguments, token, exit_code)) return exit_code;
  const std::string listen = arguments->has("--listen") ? arguments->get("--listen") : "127.0.0.1:0";
  if (!is_loopback(listen) && token.empty())
    return usage_error("serve", "--listen " + listen +
                                    " is not a loopback address: give --token or --token-file so that only your "
                                    "agents can send and read");
  if (arguments->has("--tls-cert") != arguments->has("--tls-key"))
    return usage_error("serve", "--tls-cert and --tls-key go together");
  uint64_t max_message_bytes = 16u << 20;
  if (arguments->has("--max-message-bytes") &&
      (!parse_number(arguments->get("--max-message-bytes"), max_message_bytes) || max_message_bytes == 0 ||
       max_message_bytes > INT32_MAX))
    return usage_error("serve", "--max-message-bytes " + arguments->get("--max-message-bytes") +
                                    ": expected a number of bytes from 1 to 2147483647");
  CollectorOptions core_options;
  if (arguments->has("--queue-budget-bytes")) {
    uint64_t budget = 0;
    if (!parse_number(arguments->get("--queue-budget-bytes"), budget) || budget == 0)
      return usage_error("serve", "--queue-budget-bytes " + arguments->get("--queue-budget-bytes") +
                                      ": expected a positive number of bytes");
    core_options.queue_budget_bytes = budget;
  }
  uint64_t analyze_interval_ms = 2000;
  if (arguments->has("--analyze-interval-ms") &&
      (!parse_number(arguments->get("--analyze-interval-ms"), analyze_interval_ms) || analyze_interval_ms > 3600000))
    return usage_error("serve", "--analyze-interval-ms " + arguments->get("--analyze-interval-ms") +
                                    ": expected milliseconds from 0 (no live analysis) to 3600000");

  std::shared_ptr<grpc::ServerCredentials> credentials = grpc::InsecureServerCredentials();
  if (arguments->has("--tls-cert")) {
    grpc::SslServerCredentialsOptions tls;
    grpc::SslServerCredentialsOptions::PemKeyCertPair pair;
    if (!read_file(arguments->get("--tls-key"), pair.private_key))
      return usage_error("serve", "--tls-key " + arguments->get("--tls-key") + ": cannot read");
    if (!read_file(arguments->get("--tls-cert"), pair.cert_chain))
      return usage_error("serve", "--tls-cert " + arguments->get("--tls-cert") + ": cannot read");
    tls.pem_key_cert_pairs.push_back(pair);
    credentials = grpc::SslServerCredentials(tls);
  }

  // Every thread started from here on inherits the mask; main waits for the signals.
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  const std::string db = arguments->get("--db");
  std::unique_ptr<CollectorCore> core;
  if (Status s = CollectorCore::open(db, core_options, core); !s.ok()) {
    std::cerr << "castscope-collector serve: " << s.message() << "\n";
    return 1;
  }
  std::unique_ptr<LiveAnalyzer> analyzer;
  if (analyze_interval_ms > 0) {
    analyzer = std::make_unique<LiveAnalyzer>(*core, std::chrono::milliseconds(analyze_interval_ms));
    core->set_commit_listener([&analyzer](const std::vector<CommittedRun>& runs) { analyzer->committed(runs); });
  }
  ServiceOptions service_options;
  service_options.token = token;
  std::unique_ptr<CollectorServices> services;
  if (Status s = CollectorServices::create(*core, service_options, services); !s.ok()) {
    std::cerr << "castscope-collector serve: " << s.message() << "\n";
    return 1;
  }
  grpc::ServerBuilder builder;
  int port = 0;
  builder.AddListeningPort(listen, credentials, &port);
  builder.SetMaxReceiveMessageSize(static_cast<int>(max_message_bytes));
  services->register_with(builder);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (!server || (port == 0 && !listen.starts_with("unix:"))) {
    std::cerr << "castscope-collector serve: cannot listen on " << listen << "\n";
    return 1;
  }
  const std::string bound = listen.starts_with("unix:") ? listen : host_of(listen) + ":" + std::to_string(port);
  std::cerr << "castscope-collector: listening on " << bound << " db " << db << (token.empty() ? "" : " (token required)")
            << (arguments->has("--tls-cert") ? " (TLS)" : "") << std::endl;
  if (arguments->has("--ready-file") && !write_ready_file(arguments->get("--ready-file"), bound)) {
    std::cerr << "castscope-collector serve: cannot write --ready-file " << arguments->get("--ready-file") << "\n";
    server->Shutdown();
    if (analyzer) analyzer->stop();
    core->shutdown();
    return 1;
  }

  int signal = 0;
  sigwait(&stop_signals, &signal);
  std::cerr << "castscope-collector: " << (signal == SIGINT ? "SIGINT" : "SIGTERM")
            << ": stopping; committing what is queued" << std::endl;
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  core->drain();                   // everything received is committed...
  if (analyzer) analyzer->stop();  // ...and analyzed once more; shutdown() then stores the findings
  core->shutdown();
  const CollectorCounters counters = core->counters();
  std::cerr << "castscope-collector: stopped; " << counters.batches_stored << " batches stored ("
            << counters.events_stored << " events), " << counters.batches_duplicate << " duplicates" << std::endl;
  return 0;
}

int load(int argc, char** argv) {
  int exit_code = 0;
  const auto arguments = parse("load", argc, argv, {"--db"}, exit_code);
  if (!arguments) return exit_code;
  if (arguments->get("--db").empty()) return usage_error("load", "--db FILE is required");
  if (arguments->positional.empty()) return usage_error("load", "give at least one SPOOL_DIR");
  for (const std::string& dir : arguments->positional)
    if (!std::filesystem::is_directory(dir)) return usage_error("load", dir + ": not a directory");
  std::unique_ptr<CollectorCore> core;
  if (Status s = CollectorCore::open(arguments->get("--db"), CollectorOptions(), core); !s.ok()) {
    std::cerr << "castscope-collector load: " << s.message() << "\n";
    return 1;
  }
  LiveAnalyzer analyzer(*core, std::chrono::hours(1), /*analyze_on_agent_end=*/false);  // once per run, at the end
  core->set_commit_listener([&analyzer](const std::vector<CommittedRun>& runs) { analyzer.committed(runs); });
  const SpoolImportReport report = import_spool(*core, arguments->positional, BatchLimits());
  analyzer.stop();
  core->shutdown();
  for (const std::string& problem : report.problems) std::cerr << "castscope-collector load: " << problem << "\n";
  std::cerr << "castscope-collector load: " << report.agent_dirs << " agents, " << report.segments << " segments: "
            << report.batches_stored << " batches stored (" << report.events_stored << " events), "
            << report.batches_duplicate << " already stored, " << report.frames_skipped << " frames skipped"
            << (report.batches_failed ? ", " + std::to_string(report.batches_failed) + " failed to store" : "") << "\n";
  return report.clean() ? 0 : 1;
}

int query(int argc, char** argv) {
  int exit_code = 0;
  const auto arguments =
      parse("query", argc, argv,
            {"--db", "--collector", "--token", "--token-file", "--run", "--agent", "--kind", "--op", "--file", "--line",
             "--after-seq", "--limit"},
            exit_code);
  if (!arguments) return exit_code;
  if (arguments->positional.size() != 1)
    return usage_error("query", "give one of runs, events, sequences");
  if (arguments->has("--db") == arguments->has("--collector"))
    return usage_error("query", "give either --db FILE or --collector HOST:PORT");
  QueryCommand command;
  command.what = arguments->positional[0];
  if (!resolve_token("query", *arguments, command.token, exit_code)) return exit_code;
  command.db = arguments->get("--db");
  command.collector = arguments->get("--collector");
  command.run_id = arguments->get("--run");
  command.agent_id = arguments->get("--agent");
  command.kind = arguments->get("--kind");
  command.op = arguments->get("--op");
  command.file = arguments->get("--file");
  uint64_t number = 0;
  for (const char* name : {"--line", "--after-seq", "--limit"}) {
    if (!arguments->has(name)) continue;
    if (!parse_number(arguments->get(name), number) || (std::string(name) != "--after-seq" && number > UINT32_MAX))
      return usage_error("query", std::string(name) + " " + arguments->get(name) + ": expected a number");
    if (std::string(name) == "--line") command.line = static_cast<uint32_t>(number);
    if (std::string(name) == "--after-seq") command.after_seq = number;
    if (std::string(name) == "--limit") command.limit = static_cast<uint32_t>(number);
  }
  return run_query(command, std::cout, std::cerr);
}

int report(int argc, char** argv) {
  int exit_code = 0;
  const auto arguments = parse("report", argc, argv, {"--db", "--run"}, exit_code);
  if (!arguments) return exit_code;
  if (arguments->get("--db").empty() || arguments->get("--run").empty())
    return usage_error("report", "--db FILE and --run RUN_ID are required");
  if (!arguments->positional.empty()) return usage_error("report", "unexpected argument " + arguments->positional[0]);
  nlohmann::json out;
  if (Status s = build_run_report(arguments->get("--db"), arguments->get("--run"), out); !s.ok()) {
    std::cerr << "castscope-collector report: " << s.message() << "\n";
    return s.code() == StatusCode::kNotFound ? 2 : 1;
  }
  std::cout << out.dump(2) << "\n";
  return 0;
}

}  // namespace
}  // namespace castscope::collector

int main(int argc, char** argv) {
  using namespace castscope::collector;
  const std::string command = argc > 1 ? argv[1] : "";
  if (command == "serve") return serve(argc, argv);
  if (command == "load") return load(argc, argv);
  if (command == "query") return query(argc, argv);
  if (command == "report") return report(argc, argv);
  if (command == "--help" || command == "-h" || command == "help") {
    std::cout << kUsage;
    return 0;
  }
  std::cerr << "castscope-collector: " << (command.empty() ? "no command" : "unknown command " + command) << "\n"
            << kUsage;
  return kExitUsage;
}
