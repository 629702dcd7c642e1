// castscope-forwarder: started by the agent, one per training process.
//   castscope-forwarder --spool AGENT_DIR --collector HOST:PORT [--parent-pid PID]
//                       [--token-env NAME] [--tls-ca FILE] [--linger-s N]
#include <cstdlib>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>

#include "agent/forwarder/forwarder.h"
#include "common/log/log.h"

namespace {

int usage(const std::string& problem) {
  std::cerr << "castscope-forwarder: " << problem << "\n"
            << "usage: castscope-forwarder --spool AGENT_DIR --collector HOST:PORT [--parent-pid PID] "
               "[--token-env NAME] [--tls-ca FILE] [--linger-s N]\n";
  return 2;
}

bool parse_int(const std::string& text, int& out) {
  char* end = nullptr;
  const long value = std::strtol(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || value < 0 || value > 1 << 30) return false;
  out = static_cast<int>(value);
  return true;
}

}  // namespace

int main(int argc, char** argv) {
  castscope::ForwarderConfig config;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    if (i + 1 >= argc) return usage("missing value after " + flag);
    const std::string value = argv[++i];
    int number = 0;
    if (flag == "--spool") {
      config.agent_dir = value;
    } else if (flag == "--collector") {
      config.collector = value;
    } else if (flag == "--parent-pid") {
      if (!parse_int(value, number)) return usage("--parent-pid: not a pid: " + value);
      config.parent_pid = number;
    } else if (flag == "--token-env") {
      const char* token = std::getenv(value.c_str());
      config.token = token != nullptr ? token : "";
    } else if (flag == "--tls-ca") {
      std::ifstream in(value);
      if (!in) return usage("--tls-ca: cannot read " + value);
      std::stringstream pem;
      pem << in.rdbuf();
      config.tls_ca_pem = pem.str();
    } else if (flag == "--linger-s") {
      if (!parse_int(value, number)) return usage("--linger-s: not a number of seconds: " + value);
      config.linger = std::chrono::seconds(number);
    } else {
      return usage("unknown argument " + flag);
    }
  }
  if (config.agent_dir.empty()) return usage("--spool is required");
  if (config.collector.empty()) return usage("--collector is required");
  castscope::log::info("forwarding " + config.agent_dir + " to " + config.collector);
  const int code = castscope::Forwarder(config).run();
  // castscope run reads this line to stop waiting for this agent.
  std::cerr << "castscope-forwarder: forwarder exit " << code << std::endl;
  return code;
}
