// The finding rules, one function each, grouped by family: the cast cache
// (cache_findings.cc), execution modes (mode_findings.cc), precision
// (precision_findings.cc, conversion_findings.cc) and numerics (numerics_findings.h). Each appends
// its findings to `out`; analyze_run (analyzers.cc) runs them in a fixed
// order, which is the order of a report's findings.
#pragma once

#include <vector>

#include "server/src/analysis/analyzers.h"
#include "server/src/analysis/run_data.h"

namespace castscope::collector {

// The cast cache.
void stale_cache_hits(const RunData& run, std::vector<Finding>& out);
void cache_growth(const RunData& run, std::vector<Finding>& out);

// Execution modes.
void backward_under_autocast(const RunData& run, std::vector<Finding>& out);
void mode_mismatches(const RunData& run, std::vector<Finding>& out);
void script_disable_ignored(const RunData& run, std::vector<Finding>& out);
void trace_dropped_autocast(const RunData& run, std::vector<Finding>& out);
void script_under_trace(const RunData& run, std::vector<Finding>& out);
void compile_mismatches(const RunData& run, std::vector<Finding>& out);

// Precision.
void low_precision_escape(const RunData& run, std::vector<Finding>& out);
void cast_churn(const RunData& run, std::vector<Finding>& out);
void not_autocast(const RunData& run, std::vector<Finding>& out);
void cast_share(const RunData& run, std::vector<Finding>& out);
void tf32_matmul(const RunData& run, std::vector<Finding>& out);

// Conversions autocast's kernel did not make (conversion_findings.cc).
void cast_round_trip(const RunData& run, std::vector<Finding>& out);
void explicit_upcast_dominates(const RunData& run, std::vector<Finding>& out);
// float8_findings.cc. fp8-saturation is raised at or above this fraction of a
// site's checked values lying beyond the float8 format's largest.
inline constexpr double kFp8SaturationFraction = 0.001;
// A numerics site of casts to float8 (fp8-saturation's; cast-overflow and
// cast-underflow leave them to it).
bool float8_cast_site(const NumericsSiteRow& row);
void fp8_saturation(const RunData& run, std::vector<Finding>& out);
void fp8_zero_amax(const RunData& run, std::vector<Finding>& out);

}  // namespace castscope::collector
