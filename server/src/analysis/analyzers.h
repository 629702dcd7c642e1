// Findings: turns one run's aggregated events into the catalog's findings
// (docs/diagnostics.md has an example of each). Pure functions of RunData,
// so they run the same live (while events arrive) and when the run ends.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <vector>

#include "castscope/v1/events.names.h"
#include "server/src/analysis/finding_catalog.h"
#include "server/src/analysis/run_data.h"

namespace castscope::collector {

struct Finding {
  std::string id;        // "<kind>/<16 hex digits>": stable for the same kind at the same sites
  std::string kind;      // catalog name, e.g. "stale-cache-hit"
  std::string severity;  // info, warning, error, critical
  std::string summary;
  std::string explanation;
  std::string fix;
  std::vector<SiteRef> sites;
  nlohmann::json evidence = nlohmann::json::object();
  // The ranks (RANK) whose processes ran the code at its sites; every rank
  // of the run for a finding without sites. Empty when no process set RANK.
  std::vector<int32_t> ranks;
};

std::vector<Finding> analyze_run(const RunData& run);

// "<kind>/<16 hex digits>": FNV-1a over the kind and the sites, so the same
// problem keeps its id between analyses of a growing run and between runs.
std::string finding_id(const std::string& kind, const std::vector<SiteRef>& sites);

// A finding of `kind` at `sites` with its stable id and the catalog's
// severity (or `severity`, for kinds whose severity depends on the case);
// the caller fills in the rest.
Finding make_finding(FindingKind kind, std::vector<SiteRef> sites);
Finding make_finding(FindingKind kind, std::string_view severity, std::vector<SiteRef> sites);

// A finding as the report and the findings table have it (report schema).
nlohmann::json finding_json(const Finding& finding);
nlohmann::json site_json(const SiteRef& site);

// What a cuBLASLt description (OpEvent.gemm) says in classify_kernel's words
// (server/src/analysis/kernel_precision.h): the type the multiplier consumed ("tf32"
// for COMPUTE_32F_FAST_TF32, A's type for plain COMPUTE_32F) and the
// accumulator; "" where it does not say.
struct GemmWords {
  std::string inputs, accumulate;
};
GemmWords gemm_words(v1::GemmCompute compute, v1::DType a_type);

// Lower-case names of the schema's enum values as reports and the viewer
// write them ("bfloat16", "weight", "eager"): the generated table
// (castscope/v1/events.names.h); "unspecified" for a value the schema does not
// define (proto3 enums are open).
template <typename Enum>
  requires requires(Enum value) { v1::names::short_name(value); }
std::string_view value_name(Enum value) {
  const std::string_view name = v1::names::short_name(value);
  return name.empty() ? std::string_view("unspecified") : name;
}
// As strings, for map keys and joined pairs ("float32->bfloat16").
inline std::string dtype_name(v1::DType dtype) { return std::string(value_name(dtype)); }
inline std::string policy_name(v1::CastPolicy policy) { return std::string(value_name(policy)); }
inline std::string mode_name(v1::ExecutionMode mode) { return std::string(value_name(mode)); }
inline std::string role_name(v1::Role role) { return std::string(value_name(role)); }
inline std::string outcome_name(v1::CastOutcome outcome) { return std::string(value_name(outcome)); }
inline std::string device_name(v1::DeviceType device) { return std::string(value_name(device)); }
inline std::string gemm_compute_name(v1::GemmCompute compute) { return std::string(value_name(compute)); }

}  // namespace castscope::collector
