#include "server/src/analysis/analyzers.h"

#include "server/src/analysis/finding_rules.h"
#include "server/src/analysis/numerics_findings.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

namespace castscope::collector {
namespace {

using json = nlohmann::json;

Finding make(const std::string& kind, const std::string& severity, std::vector<SiteRef> sites) {
  Finding f;
  f.kind = kind;
  f.severity = severity;
  f.sites = std::move(sites);
  f.id = finding_id(kind, f.sites);
  return f;
}

}  // namespace

std::string finding_id(const std::string& kind, const std::vector<SiteRef>& sites) {
  uint64_t hash = 1469598103934665603ull;
  auto mix = [&](const std::string& text) {
    for (unsigned char c : text) hash = (hash ^ c) * 1099511628211ull;
    hash = (hash ^ 0xff) * 1099511628211ull;
  };
  mix(kind);
  for (const auto& site : sites) {
    mix(site.file);
    mix(std::to_string(site.line));
    mix(site.op);
    mix(site.arg);
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash));
  return kind + "/" + hex;
}

GemmWords gemm_words(v1::GemmCompute compute, v1::DType a_type) {
  std::string a;
  switch (a_type) {
    case v1::DTYPE_FLOAT32: a = "fp32"; break;
    case v1::DTYPE_FLOAT16: a = "fp16"; break;
    case v1::DTYPE_BFLOAT16: a = "bf16"; break;
    case v1::DTYPE_FLOAT64: a = "fp64"; break;
    case v1::DTYPE_FLOAT8:
    case v1::DTYPE_FLOAT8_E4M3FN:
    case v1::DTYPE_FLOAT8_E5M2:
    case v1::DTYPE_FLOAT8_E4M3FNUZ:
    case v1::DTYPE_FLOAT8_E5M2FNUZ:
    case v1::DTYPE_FLOAT8_E8M0FNU: a = "fp8"; break;
    case v1::DTYPE_INT8:
    case v1::DTYPE_UINT8: a = "int8"; break;
    default: break;
  }
  switch (compute) {
    case v1::GEMM_COMPUTE_16F: return {a.empty() ? "fp16" : a, "fp16"};
    case v1::GEMM_COMPUTE_32F: return {a, "fp32"};
    case v1::GEMM_COMPUTE_32F_FAST_16F: return {"fp16", "fp32"};
    case v1::GEMM_COMPUTE_32F_FAST_16BF: return {"bf16", "fp32"};
    case v1::GEMM_COMPUTE_32F_FAST_TF32: return {"tf32", "fp32"};
    case v1::GEMM_COMPUTE_64F: return {"fp64", "fp64"};
    case v1::GEMM_COMPUTE_32I: return {a, "int32"};
    default: return {a, ""};
  }
}

nlohmann::json site_json(const SiteRef& site) {
  return {{"file", site.file}, {"line", site.line}, {"function", site.function}, {"op", site.op}, {"arg", site.arg}};
}

nlohmann::json finding_json(const Finding& f) {
  json where = json::array();
  for (const auto& site : f.sites) where.push_back(site_json(site));
  return {{"id", f.id},           {"kind", f.kind}, {"severity", f.severity}, {"summary", f.summary},
          {"explanation", f.explanation}, {"fix", f.fix},   {"sites", where},         {"evidence", f.evidence},
          {"ranks", f.ranks}};
}

namespace {

// Which ranks raised each finding: those whose processes ran the code at its
// sites (by file and line), or every rank of the run when it names none.
void attribute_ranks(const RunData& run, std::vector<Finding>& findings) {
  std::map<std::pair<std::string, uint32_t>, std::set<int32_t>> by_line;
  auto add = [&](const SiteRef& site, const std::set<int32_t>& ranks) {
    by_line[{site.file, site.line}].insert(ranks.begin(), ranks.end());
  };
  for (const auto& row : run.sites) add(row.site, row.ranks);
  for (const auto& row : run.probe_ops) add(row.site, row.ranks);
  for (const auto& row : run.backward_ops) add(row.site, row.ranks);
  for (const auto& row : run.compile_decisions) add(row.site, row.ranks);
  std::set<int32_t> every;
  for (const auto& agent : run.agents) every.insert(agent.rank);
  for (Finding& f : findings) {
    std::set<int32_t> ranks;
    for (const SiteRef& site : f.sites)
      if (auto it = by_line.find({site.file, site.line}); it != by_line.end()) ranks.insert(it->second.begin(), it->second.end());
    if (ranks.empty()) ranks = every;
    for (int32_t rank : ranks)
      if (rank >= 0) f.ranks.push_back(rank);
  }
}

}  // namespace

Finding make_finding(FindingKind kind, std::vector<SiteRef> sites) {
  return make_finding(kind, finding_kind_info(kind).severity, std::move(sites));
}

Finding make_finding(FindingKind kind, std::string_view severity, std::vector<SiteRef> sites) {
  return make(std::string(finding_kind_info(kind).name), std::string(severity), std::move(sites));
}

std::vector<Finding> analyze_run(const RunData& run) {
  std::vector<Finding> out;
  stale_cache_hits(run, out);
  cache_growth(run, out);
  backward_under_autocast(run, out);
  mode_mismatches(run, out);
  script_disable_ignored(run, out);
  trace_dropped_autocast(run, out);
  script_under_trace(run, out);
  low_precision_escape(run, out);
  cast_churn(run, out);
  compile_mismatches(run, out);
  not_autocast(run, out);
  cast_share(run, out);
  tf32_matmul(run, out);
  cast_round_trip(run, out);
  explicit_upcast_dominates(run, out);
  fp8_saturation(run, out);
  fp8_zero_amax(run, out);
  numerics_findings(run, out);
  attribute_ranks(run, out);
  return out;
}

}  // namespace castscope::collector
