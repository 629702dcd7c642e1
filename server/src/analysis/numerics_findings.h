// The numerics findings (docs/diagnostics.md, docs/numerics.md): cast-overflow,
// cast-underflow, nonfinite-output and scaler-skips, from the run's numerics
// summaries and GradScaler updates.
#pragma once

#include <vector>

#include "server/src/analysis/analyzers.h"
#include "server/src/analysis/run_data.h"

namespace castscope::collector {

// Underflow raised as a warning at or above this fraction of a site's checked
// values (nonzero values that became 0 / values); below it, nothing.
inline constexpr double kUnderflowWarningFraction = 0.01;
// scaler-skips is a warning when the skips after the scale first settled
// (the leading run of skips calibrates it) are at least this many and this
// fraction of the updates; otherwise info.
inline constexpr uint64_t kSkipsWarningCount = 2;
inline constexpr double kSkipsWarningFraction = 0.01;

void numerics_findings(const RunData& run, std::vector<Finding>& out);

}  // namespace castscope::collector
