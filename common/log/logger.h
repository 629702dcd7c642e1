// The one logger factory: spdlog loggers named "castscope.<component>" on
// stderr, quiet by default. CASTSCOPE_LOG=debug|info|warn|error|off sets the
// level of every component. Warnings show by default (a collector's rejection
// of a client, an agent that could not start its forwarder).
#pragma once

#include <spdlog/logger.h>

#include <string_view>

namespace castscope::log {

// The logger of one component ("agent", "collector", ...), made on first use.
spdlog::logger& logger(std::string_view component);

}  // namespace castscope::log
