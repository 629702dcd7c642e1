// The collector's logger ("castscope.collector") on stderr, quiet by default:
// CASTSCOPE_LOG=debug|info|warn|error|off sets the level. Rejections of
// clients are warnings, so they show by default.
#pragma once

#include <spdlog/logger.h>

namespace castscope::collector {

spdlog::logger& collector_log();

}  // namespace castscope::collector
