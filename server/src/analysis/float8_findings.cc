// Findings of conversions to float8 (docs/diagnostics.md): fp8-saturation,
// from numerics windows' counts of clipped values, and fp8-zero-amax, from
// the scale torchao passed with each conversion (CastEvent.float8).
#include <cstdio>
#include <map>
#include <set>
#include <string>
#include <tuple>

#include "server/src/analysis/conversion_makers.h"
#include "server/src/analysis/finding_rules.h"
#include "server/src/analysis/finding_text.h"

namespace castscope::collector {

namespace {

bool is_float8(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT8:
    case v1::DTYPE_FLOAT8_E4M3FN:
    case v1::DTYPE_FLOAT8_E5M2:
    case v1::DTYPE_FLOAT8_E4M3FNUZ:
    case v1::DTYPE_FLOAT8_E5M2FNUZ: return true;
    default: return false;
  }
}

// The largest finite value, as the finding's text names it.
std::string float8_max_text(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT8_E4M3FN: return "448";
    case v1::DTYPE_FLOAT8_E4M3FNUZ: return "240";
    case v1::DTYPE_FLOAT8_E5M2:
    case v1::DTYPE_FLOAT8_E5M2FNUZ: return "57344";
    default: return "its largest value";
  }
}

}  // namespace

bool float8_cast_site(const NumericsSiteRow& row) {
  return row.kind == v1::NumericsSummary::KIND_CAST && is_float8(row.dst);
}

void fp8_saturation(const RunData& run, std::vector<Finding>& out) {
  for (const NumericsSiteRow& row : run.numerics_sites) {
    if (!float8_cast_site(row) || row.values == 0) continue;
    // Clipped to the largest, or (e5m2) past it to inf: either way not the value.
    const uint64_t beyond = row.saturated + row.overflowed;
    if (static_cast<double>(beyond) < kFp8SaturationFraction * static_cast<double>(row.values)) continue;
    Finding f = make_finding(FindingKind::kFp8Saturation, {row.site});
    const std::string max = float8_max_text(row.dst);
    f.summary = std::to_string(beyond) + " of " + std::to_string(row.values) + " values (" + percent(beyond, row.values) +
                ") lay beyond ±" + max + " converting " + dtype_name(row.src) + "->" + dtype_name(row.dst) +
                " and were clipped" + (row.overflowed > 0 ? " or became inf" : "");
    f.explanation =
        dtype_name(row.dst) + " ends at ±" + max + ": torch saturates a larger value to it (e4m3fn) or makes it inf "
        "(e5m2 past the rounding edge). The values were not scaled into range first: a static or stale scale, or "
        "none at all. Counted in numerics windows (" + std::to_string(row.tensors) + " conversions checked; " +
        std::to_string(row.underflowed) + " nonzero values flushed to 0 besides).";
    f.fix = "Scale before converting: scale = " + max + " / amax of the tensor itself (dynamic scaling, torchao's "
            "tensorwise or rowwise recipe), or refresh a delayed scale's amax history more often; keep outliers "
            "in a wider dtype if they matter.";
    f.evidence = {{"saturated", row.saturated},     {"overflowed", row.overflowed}, {"values", row.values},
                  {"underflowed", row.underflowed}, {"conversions_checked", row.tensors},
                  {"max_abs_log2", row.max_abs_log2}, {"src", dtype_name(row.src)}, {"dst", dtype_name(row.dst)},
                  {"threshold", kFp8SaturationFraction}};
    out.push_back(std::move(f));
  }
}

void fp8_zero_amax(const RunData& run, std::vector<Finding>& out) {
  struct Line {
    SiteRef site;
    uint64_t zero = 0, scaled = 0;
    std::set<std::string> dtypes;
    std::string maker;
  };
  std::map<std::tuple<std::string, uint32_t, std::string, v1::Role>, Line> lines;  // file, line, op, role
  for (const auto& row : run.conversions) {
    if (row.float8.zero_amax_casts == 0) continue;
    Line& line = lines[{row.site.file, row.site.line, row.site.op, row.role}];
    if (line.site.file.empty()) {
      line.site = row.site;
      line.maker = maker_label(row.maker, row.site.file);
    }
    line.zero += row.float8.zero_amax_casts;
    line.scaled += row.float8.scaled;
    line.dtypes.insert(dtype_name(row.dst));
  }
  for (const auto& [key, line] : lines) {
    const std::string role = role_name(std::get<3>(key));
    Finding f = make_finding(FindingKind::kFp8ZeroAmax, {line.site});
    f.summary = std::to_string(line.zero) + " of " + std::to_string(line.scaled) + " float8 conversions of the " + role +
                " here (" + line.maker + ", to " + joined(line.dtypes) + ") converted an all-zero tensor or row: amax 0";
    f.explanation =
        "Float8 scaling divides the format's largest value by the tensor's amax. An all-zero tensor has amax 0, so "
        "its scale is infinite or undefined; torchao clamps amax to 1e-12, which keeps the zeros zero. Either way the "
        "float8 matmul computes on nothing: a weight still at its zero init (a LoRA B, a zero-initialized "
        "projection), or a grad_output of zeros, which means the layer gets no gradient.";
    f.fix = role == "gradient"
                ? "Find why no gradient reaches the layer (a branch the loss does not use, a detached output); until "
                  "it learns, keep it out of float8 (convert_to_float8_training's module_filter_fn)."
                : "Keep zero-initialized layers out of float8 until their weights move (convert_to_float8_training's "
                  "module_filter_fn), or initialize them with small nonzero values.";
    f.evidence = {{"zero_amax_conversions", line.zero}, {"scaled_conversions", line.scaled}, {"role", role},
                  {"maker", line.maker}, {"dtypes", line.dtypes}};
    out.push_back(std::move(f));
  }
}

}  // namespace castscope::collector
