// The agent's and the forwarder's logging calls ("castscope.agent"): plain
// strings, so translation units that include libtorch never include spdlog
// (torch ships its own fmt headers, which clash with the fmt spdlog is built
// against). Levels as in logger.h.
#pragma once

#include <string>

namespace castscope::log {

void debug(const std::string& message);
void info(const std::string& message);
void warn(const std::string& message);
void error(const std::string& message);

}  // namespace castscope::log
