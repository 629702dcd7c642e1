// The forwarder's state for whoever waits on it (`castscope run`): a small
// JSON file beside the agent's spool folder, <spool>/<agent id>.forwarder.json,
// replaced atomically (write, then rename) on every change of state and at
// most every half second otherwise. Readers never parse log text.
//
//   {"pid", "agent_pid", "agent_dir", "collector", "state", "give_up_after_s",
//    "unreachable_for_s", "batches_acknowledged", "batches_pending",
//    "exit_code" (final states only), "message", "updated_unix_ms"}
//
// state: "starting", "waiting-for-lock" (another forwarder serves the
// folder), "streaming", "unreachable", and the final ones "delivered"
// (exit 0), "refused" (3), "gave-up" (4).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>

namespace castscope {

struct ForwarderState {
  std::string state = "starting";
  std::optional<double> unreachable_for_s;
  uint64_t batches_acknowledged = 0;
  uint64_t batches_pending = 0;
  std::optional<int> exit_code;
  std::string message;
};

class ForwarderStatusFile {
 public:
  ForwarderStatusFile(const std::string& agent_dir, std::string collector, int agent_pid, int give_up_after_s);

  // Writes when the state or message changed, or `min_interval` has passed.
  void update(const ForwarderState& state,
              std::chrono::milliseconds min_interval = std::chrono::milliseconds(500));
  const std::string& path() const { return path_; }

 private:
  void write(const ForwarderState& state);

  std::string agent_dir_;
  std::string path_;
  std::string collector_;
  int agent_pid_ = 0;
  int give_up_after_s_ = 0;
  std::string last_state_;
  std::string last_message_;
  std::chrono::steady_clock::time_point last_write_{};
};

// The status file's path for an agent folder.
std::string forwarder_status_path(const std::string& agent_dir);

}  // namespace castscope
