#include "agent/forwarder/forwarder_status.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>

namespace castscope {

std::string forwarder_status_path(const std::string& agent_dir) {
  std::filesystem::path dir(agent_dir);
  if (!dir.has_filename()) dir = dir.parent_path();  // "…/agent/"
  return (dir.parent_path() / (dir.filename().string() + ".forwarder.json")).string();
}

ForwarderStatusFile::ForwarderStatusFile(const std::string& agent_dir, std::string collector, int agent_pid,
                                         int give_up_after_s)
    : agent_dir_(agent_dir),
      path_(forwarder_status_path(agent_dir)),
      collector_(std::move(collector)),
      agent_pid_(agent_pid),
      give_up_after_s_(give_up_after_s) {}

void ForwarderStatusFile::update(const ForwarderState& state, std::chrono::milliseconds min_interval) {
  const auto now = std::chrono::steady_clock::now();
  if (state.state == last_state_ && state.message == last_message_ && now - last_write_ < min_interval) return;
  last_state_ = state.state;
  last_message_ = state.message;
  last_write_ = now;
  write(state);
}

void ForwarderStatusFile::write(const ForwarderState& state) {
  using json = nlohmann::json;
  json out = {{"pid", static_cast<int>(::getpid())},
              {"agent_pid", agent_pid_},
              {"agent_dir", agent_dir_},
              {"collector", collector_},
              {"state", state.state},
              {"give_up_after_s", give_up_after_s_},
              {"unreachable_for_s", state.unreachable_for_s ? json(*state.unreachable_for_s) : json(nullptr)},
              {"batches_acknowledged", state.batches_acknowledged},
              {"batches_pending", state.batches_pending},
              {"exit_code", state.exit_code ? json(*state.exit_code) : json(nullptr)},
              {"message", state.message},
              {"updated_unix_ms", std::chrono::duration_cast<std::chrono::milliseconds>(
                                      std::chrono::system_clock::now().time_since_epoch())
                                      .count()}};
  const std::string text = out.dump(-1, ' ', false, json::error_handler_t::replace) + "\n";
  const std::string temporary = path_ + ".tmp";
  const int fd = ::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return;  // a status file is a courtesy: delivery goes on without it
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  ::close(fd);
  if (!written || std::rename(temporary.c_str(), path_.c_str()) != 0) ::unlink(temporary.c_str());
}

}  // namespace castscope
