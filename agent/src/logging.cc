#include "logging.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>

namespace castscope::log {
namespace {

spdlog::logger& logger() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto created = spdlog::stderr_color_mt("castscope.agent");
    const char* level = std::getenv("CASTSCOPE_LOG");
    created->set_level(level != nullptr ? spdlog::level::from_str(level) : spdlog::level::warn);
    created->set_pattern("[%n] %l: %v");
    return created;
  }();
  return *instance;
}

}  // namespace

void debug(const std::string& message) { logger().debug(message); }
void info(const std::string& message) { logger().info(message); }
void warn(const std::string& message) { logger().warn(message); }
void error(const std::string& message) { logger().error(message); }

}  // namespace castscope::log
