#include "common/log/logger.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <string>

namespace castscope::log {

spdlog::logger& logger(std::string_view component) {
  // Loggers are made rarely and never destroyed; a lookup takes a mutex, which
  // is fine off the hot path (the agent's kernels never log).
  static std::mutex mutex;
  static std::map<std::string, std::shared_ptr<spdlog::logger>, std::less<>> loggers;
  std::lock_guard lock(mutex);
  auto found = loggers.find(component);
  if (found != loggers.end()) return *found->second;
  auto created = spdlog::stderr_color_mt("castscope." + std::string(component));
  const char* level = std::getenv("CASTSCOPE_LOG");
  created->set_level(level != nullptr ? spdlog::level::from_str(level) : spdlog::level::warn);
  created->set_pattern("[%n] %l: %v");
  return *loggers.emplace(std::string(component), std::move(created)).first->second;
}

}  // namespace castscope::log
