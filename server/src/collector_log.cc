#include "collector_log.h"

#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdlib>

namespace castscope::collector {

spdlog::logger& collector_log() {
  static std::shared_ptr<spdlog::logger> instance = [] {
    auto created = spdlog::stderr_color_mt("castscope.collector");
    const char* level = std::getenv("CASTSCOPE_LOG");
    created->set_level(level != nullptr ? spdlog::level::from_str(level) : spdlog::level::warn);
    created->set_pattern("[%n] %l: %v");
    return created;
  }();
  return *instance;
}

}  // namespace castscope::collector
