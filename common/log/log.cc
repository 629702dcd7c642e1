#include "common/log/log.h"

#include "common/log/logger.h"

namespace castscope::log {
namespace {

spdlog::logger& agent_logger() {
  static spdlog::logger& instance = logger("agent");
  return instance;
}

}  // namespace

void debug(const std::string& message) { agent_logger().debug(message); }
void info(const std::string& message) { agent_logger().info(message); }
void warn(const std::string& message) { agent_logger().warn(message); }
void error(const std::string& message) { agent_logger().error(message); }

}  // namespace castscope::log
