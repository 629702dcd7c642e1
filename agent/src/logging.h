// castscope's logger ("castscope.agent"), quiet by default: CASTSCOPE_LOG=
// debug|info|warn|error|off sets the level. A thin wrapper so translation
// units that include libtorch never include spdlog: torch ships its own fmt
// headers, which clash with the fmt spdlog is built against.
#pragma once

#include <string>

namespace castscope::log {

void debug(const std::string& message);
void info(const std::string& message);
void warn(const std::string& message);
void error(const std::string& message);

}  // namespace castscope::log
