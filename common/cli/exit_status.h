// Exit statuses shared by castscope's command lines.
#pragma once

namespace castscope::cli {

// A usage error (bad argument, unknown run): as CLI11's own parse errors.
inline constexpr int kExitUsage = 2;

}  // namespace castscope::cli
