#include "agent/src/runtime/forwarder_launcher.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <vector>

extern char** environ;

namespace castscope {
namespace {

std::string default_executable() {
  Dl_info info{};
  if (dladdr(reinterpret_cast<void*>(&launch_forwarder), &info) == 0 || info.dli_fname == nullptr) return "";
  return (std::filesystem::path(info.dli_fname).parent_path() / "castscope-forwarder").string();
}

}  // namespace

int launch_forwarder(const ForwarderOptions& options, std::string& error) {
  const std::string executable = options.executable.empty() ? default_executable() : options.executable;
  if (executable.empty() || ::access(executable.c_str(), X_OK) != 0) {
    error = "castscope-forwarder not found or not executable at \"" + executable + "\"";
    return -1;
  }
  std::vector<std::string> args = {executable, "--spool", options.agent_spool_dir, "--collector", options.collector,
                                   "--parent-pid", std::to_string(getpid()),
                                   "--give-up-after-s", std::to_string(options.give_up_after_s)};
  if (!options.token_env.empty()) args.insert(args.end(), {"--token-env", options.token_env});
  if (!options.tls_ca.empty()) args.insert(args.end(), {"--tls-ca", options.tls_ca});
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  // Everything but LD_PRELOAD: the forwarder is no training process.
  std::vector<char*> envp;
  for (char** e = environ; e != nullptr && *e != nullptr; ++e)
    if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0) envp.push_back(*e);
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  // Not the job's stderr: a caller reading the job's output through a pipe
  // would wait for the forwarder to close it.
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, options.log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND,
                                   0600);
  posix_spawnattr_t attributes;
  posix_spawnattr_init(&attributes);
  posix_spawnattr_setflags(&attributes, POSIX_SPAWN_SETSID);
  pid_t pid = -1;
  const int rc = posix_spawn(&pid, executable.c_str(), &actions, &attributes, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attributes);
  if (rc != 0) {
    error = "cannot start " + executable + ": " + std::strerror(rc);
    return -1;
  }
  return pid;
}

}  // namespace castscope
