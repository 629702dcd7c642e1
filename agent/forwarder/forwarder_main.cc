// castscope-forwarder: started by the agent, one per training process.
//   castscope-forwarder --spool AGENT_DIR --collector HOST:PORT [--parent-pid PID]
//                       [--token-env NAME] [--tls-ca FILE] [--give-up-after-s N]
// Exit code 2: a bad command line (CLI11 throws; caught here, once).
#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "agent/forwarder/forwarder.h"
#include "common/cli/validators.h"
#include "common/log/log.h"
#include "common/version/castscope_version.h"

namespace {

constexpr int kExitUsage = 2;

int usage(const std::string& problem) {
  std::cerr << "castscope-forwarder: " << problem << "\n(castscope-forwarder --help lists the options)\n";
  return kExitUsage;
}

}  // namespace

int main(int argc, char** argv) {
  castscope::ForwarderConfig config;
  std::string token_env;
  std::string tls_ca;
  int give_up_after_s = static_cast<int>(config.give_up_after.count());

  CLI::App app("castscope-forwarder: streams one agent's spool folder to a collector (started by the agent)",
               "castscope-forwarder");
  app.option_defaults()->take_last();
  app.set_version_flag("--version", std::string("castscope-forwarder ") + castscope::kCastscopeVersion);
  app.add_option("--spool", config.agent_dir, "the agent's spool folder")->required();
  app.add_option("--collector", config.collector, "HOST:PORT of the collector")
      ->required()
      ->check(castscope::cli::address(/*port_zero_ok=*/false, /*unix_ok=*/true));
  app.add_option("--parent-pid", config.parent_pid,
                 "the agent's process: once it is gone, deliver what is left and exit (0 or none: it is gone)")
      ->transform(castscope::cli::decimal_number(10))
      ->check(CLI::Range(0, 1 << 30));
  app.add_option("--token-env", token_env, "name of the environment variable holding the collector's token");
  app.add_option("--tls-ca", tls_ca, "CA certificate (PEM) of a collector that serves TLS");
  app.add_option("--give-up-after-s", give_up_after_s,
                 "once the agent is gone, how long the collector may stay unreachable before the spool is left for "
                 "`castscope load`")
      ->transform(castscope::cli::decimal_number(10))
      ->check(CLI::Range(0, 1 << 30))
      ->capture_default_str();
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    return 0;
  } catch (const CLI::CallForVersion& e) {
    std::cout << e.what() << "\n";
    return 0;
  } catch (const CLI::ParseError& e) {
    return usage(e.what());
  }
  if (config.agent_dir.empty()) return usage("--spool is required");
  if (config.collector.empty()) return usage("--collector is required");
  if (!token_env.empty()) {
    const char* token = std::getenv(token_env.c_str());
    config.token = token != nullptr ? token : "";
  }
  if (!tls_ca.empty()) {
    std::ifstream in(tls_ca);
    if (!in) return usage("--tls-ca: cannot read " + tls_ca);
    std::stringstream pem;
    pem << in.rdbuf();
    config.tls_ca_pem = pem.str();
  }
  config.give_up_after = std::chrono::seconds(give_up_after_s);

  castscope::log::info("forwarding " + config.agent_dir + " to " + config.collector);
  const int code = castscope::Forwarder(config).run();
  // For people reading the log; castscope run reads the status file.
  std::cerr << "castscope-forwarder: forwarder exit " << code << std::endl;
  return code;
}
