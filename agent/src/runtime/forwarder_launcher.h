// Starts castscope-forwarder, the process that streams this agent's spool
// folder to the collector over gRPC. gRPC and protobuf live there, not in the
// training process (libtorch exports protobuf symbols of its own).
#pragma once

#include <string>

namespace castscope {

struct ForwarderOptions {
  std::string executable;  // empty: castscope-forwarder next to libcastscope_agent.so
  std::string agent_spool_dir;
  std::string collector;   // host:port
  std::string token_env;   // name of the variable holding the token (the token never goes on argv)
  std::string tls_ca;      // CA file: use TLS
  std::string log_path;    // the forwarder's stderr
  int give_up_after_s = 60; // once the agent is gone: how long the collector may stay unreachable
};

// Returns the forwarder's pid, or -1 with `error` set. The forwarder runs in
// its own session (a Ctrl-C for the job does not cut its drain short) and
// exits by itself once the agent's final batch is acknowledged, or when this
// process is gone and its spool is drained (or the collector stays away for
// give_up_after_s). Its stderr goes to log_path; its state, for castscope
// run, to the status file beside it (forwarder_status.h).
int launch_forwarder(const ForwarderOptions& options, std::string& error);

}  // namespace castscope
