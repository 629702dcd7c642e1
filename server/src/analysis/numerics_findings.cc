#include "server/src/analysis/numerics_findings.h"

#include <cmath>
#include <cstdio>
#include <map>
#include <string>

#include "common/numerics/no_magnitude.h"
#include "server/src/analysis/finding_rules.h"
#include "server/src/analysis/finding_text.h"

namespace castscope::collector {
namespace {

using json = nlohmann::json;

std::string at_site(const SiteRef& site) {
  return site.file.empty() ? std::string("<no source location>") : site.file + ":" + std::to_string(site.line);
}

// "2^17 (about 131072)": a magnitude as the agent reports it.
std::string magnitude(int32_t log2) {
  if (log2 == kNoMagnitude) return "none finite";
  char text[64];
  std::snprintf(text, sizeof text, "2^%d (about %.3g)", log2, std::ldexp(1.0, log2));
  return text;
}

std::string device_name(v1::DeviceType device) {
  const std::string_view name = value_name(device);
  return name == "unspecified" ? "cpu" : std::string(name);
}

// A ready policy overlay (docs/policies.md) that runs `op` in float32 on its
// device, everywhere: the blunt remedy when the line cannot change.
json fp32_overlay(const std::string& op, v1::DeviceType device) {
  return {{"castscope_policy", 1}, {"device", device_name(device)}, {"ops", {{op, "fp32"}}}};
}

// The remedy at the line for values too large for the lower precision.
constexpr const char* kScaleDown =
    "scale the values down first (a normalization before it). bfloat16 has float32's range and does not overflow.";

// `rescale`: the other remedy at the line, which differs by direction (values
// too large are scaled down, values too small up).
std::string fp32_fix(const SiteRef& site, v1::DeviceType device, const std::string& what, const std::string& rescale) {
  return "Keep " + what + " in float32: at " + at_site(site) + ", wrap it in `with torch.autocast(\"" +
         device_name(device) + "\", enabled=False):` with float32 inputs (`.float()`), or " + rescale +
         " Without changing the code, the overlay in evidence.overlay runs " + site.op + " in float32 everywhere: "
         "save it as a file and pass `castscope run --overlay FILE` (or attach(overlays=[FILE])).";
}

void cast_overflow(const RunData& run, std::vector<Finding>& out) {
  for (const NumericsSiteRow& row : run.numerics_sites) {
    // Backward casts of scaled gradients overflow by design under GradScaler:
    // scaler-skips speaks for them.
    if (row.kind != v1::NumericsSummary::KIND_CAST || row.overflowed == 0 || row.phase == v1::PHASE_BACKWARD ||
        float8_cast_site(row))
      continue;
    Finding f = make_finding(FindingKind::kCastOverflow, {row.site});
    f.summary = std::to_string(row.overflowed) + " of " + std::to_string(row.values) + " values of `" + row.site.arg +
                "` became inf casting " + dtype_name(row.src) + "->" + dtype_name(row.dst) + " for " + row.site.op +
                " (largest |x| " + magnitude(row.max_abs_log2) + ")";
    f.explanation = dtype_name(row.dst) + " ends at 65504: autocast cast " + std::to_string(row.overflowed) +
                    " finite values above that to inf before " + row.site.op + " ran, so its result holds inf (and "
                    "NaN where inf meets 0 or -inf). Native autocast does the same; nothing warns. Counted in "
                    "numerics windows (" + std::to_string(row.tensors) + " casts checked), so a run overflows at "
                    "least this often.";
    f.fix = fp32_fix(row.site, row.device, "this computation", kScaleDown);
    f.evidence = {{"overflowed", row.overflowed},         {"values", row.values},
                  {"casts_checked", row.tensors},         {"max_abs_log2", row.max_abs_log2},
                  {"src", dtype_name(row.src)},           {"dst", dtype_name(row.dst)},
                  {"overlay", fp32_overlay(row.site.op, row.device)}};
    out.push_back(std::move(f));
  }
}

void cast_underflow(const RunData& run, std::vector<Finding>& out) {
  for (const NumericsSiteRow& row : run.numerics_sites) {
    // Float8's flushes to 0 are its scaling's business: fp8-saturation's evidence counts them.
    if (row.kind != v1::NumericsSummary::KIND_CAST || row.underflowed == 0 || row.values == 0 || float8_cast_site(row))
      continue;
    if (static_cast<double>(row.underflowed) < kUnderflowWarningFraction * static_cast<double>(row.values)) continue;
    Finding f = make_finding(FindingKind::kCastUnderflow, {row.site});
    f.summary = std::to_string(row.underflowed) + " of " + std::to_string(row.values) + " values of `" + row.site.arg +
                "` (" + percent(row.underflowed, row.values) + ") became 0 casting " + dtype_name(row.src) + "->" +
                dtype_name(row.dst) + " for " + row.site.op;
    f.explanation = "Nonzero values too small for " + dtype_name(row.dst) +
                    " (float16 flushes magnitudes below about 6e-8 to 0) were lost in the cast: an epsilon becomes "
                    "0, small gradients vanish. castscope warns at " + percent(1, 100) +
                    " of a site's values; this site lost " + percent(row.underflowed, row.values) + ".";
    f.fix = fp32_fix(row.site, row.device, "the small values",
                     "scale the values up first (for gradients, GradScaler does); for an epsilon, add it in float32 "
                     "after the lower-precision op. bfloat16 has float32's range and keeps magnitudes down to "
                     "about 1e-38.");
    f.evidence = {{"underflowed", row.underflowed}, {"values", row.values}, {"casts_checked", row.tensors},
                  {"src", dtype_name(row.src)},     {"dst", dtype_name(row.dst)},
                  {"warning_fraction", kUnderflowWarningFraction},
                  {"overlay", fp32_overlay(row.site.op, row.device)}};
    out.push_back(std::move(f));
  }
}

void nonfinite_output(const RunData& run, std::vector<Finding>& out) {
  for (const NumericsSiteRow& row : run.numerics_sites) {
    // Backward ops of scaled losses produce inf by design under GradScaler.
    if (row.kind != v1::NumericsSummary::KIND_OP_OUTPUT || row.nonfinite == 0 || row.phase == v1::PHASE_BACKWARD)
      continue;
    Finding f = make_finding(FindingKind::kNonfiniteOutput, {row.site});
    f.summary = row.site.op + " produced " + std::to_string(row.nonfinite) + " inf/NaN values from finite inputs under "
                "autocast (" + dtype_name(row.src) + " output)";
    f.explanation = "Its inputs held no inf or NaN, its " + dtype_name(row.src) +
                    " output did: the op itself overflowed the output's range (float16 ends at 65504), e.g. a "
                    "matmul's sums or an exp. From here the loss and gradients go non-finite; under GradScaler the "
                    "step is skipped. Counted in numerics windows (" + std::to_string(row.tensors) + " calls checked).";
    f.fix = fp32_fix(row.site, row.device, "this op", kScaleDown);
    f.evidence = {{"nonfinite", row.nonfinite}, {"values", row.values}, {"calls_checked", row.tensors},
                  {"output", dtype_name(row.src)}, {"max_abs_log2", row.max_abs_log2},
                  {"overlay", fp32_overlay(row.site.op, row.device)}};
    out.push_back(std::move(f));
  }
}

std::string scale_text(double scale) {
  char text[32];
  std::snprintf(text, sizeof text, "%g", scale);
  return text;
}

void scaler_skips(const RunData& run, std::vector<Finding>& out) {
  std::map<std::string, std::vector<const ScalerUpdateRow*>> by_agent;
  for (const ScalerUpdateRow& update : run.scaler_updates) by_agent[update.agent_id].push_back(&update);
  for (const auto& [agent_id, updates] : by_agent) {
    uint64_t skipped = 0, calibrating = 0;
    bool settled = false;
    json path = json::array();
    double last_scale = -1;
    for (const ScalerUpdateRow* update : updates) {
      if (update->found_inf) {
        ++skipped;
        if (!settled) ++calibrating;
      } else {
        settled = true;
      }
      if (update->scale != last_scale && path.size() < 32) {
        path.push_back({{"update", update->updates}, {"scale", update->scale}, {"skipped", update->found_inf}});
        last_scale = update->scale;
      }
    }
    if (skipped == 0) continue;
    const uint64_t total = updates.size();
    const uint64_t recurring = skipped - calibrating;
    const bool warning = recurring >= kSkipsWarningCount &&
                         static_cast<double>(recurring) >= kSkipsWarningFraction * static_cast<double>(total);
    const FirstNonfinite* first = nullptr;
    for (const FirstNonfinite& f : run.first_nonfinite)
      if (f.agent_id == agent_id) first = &f;
    std::vector<SiteRef> sites;
    if (first != nullptr) sites.push_back(first->site);
    sites.push_back(updates.front()->site);
    Finding f = make_finding(FindingKind::kScalerSkips, warning ? "warning" : "info", sites);
    std::string path_text;
    for (size_t i = 0; i < path.size() && i < 6; ++i)
      path_text += (i > 0 ? " -> " : "") + scale_text(path[i]["scale"].get<double>());
    if (path.size() > 6) path_text += " -> ...";
    f.summary = "GradScaler skipped " + std::to_string(skipped) + " of " + std::to_string(total) + " steps (scale " +
                path_text + ")" +
                (first != nullptr ? "; the first non-finite value came from " + first->site.op + " at " +
                                        at_site(first->site)
                                  : "");
    f.explanation =
        "GradScaler skips an optimizer step when the scaled gradients hold inf or NaN and halves the scale. " +
        (calibrating > 0 ? std::to_string(calibrating) + " leading skip(s) calibrated the initial scale (normal). "
                         : std::string()) +
        (recurring > 0 ? std::to_string(recurring) + " skip(s) came after the scale had settled: something "
                         "overflows again and again, and each skip throws a step away. "
                       : std::string()) +
        (first != nullptr
             ? "In castscope's numerics windows the first value to turn non-finite was " +
                   std::string(first->kind == v1::NumericsSummary::KIND_CAST ? "a cast for " : "the output of ") +
                   first->site.op + " at " + at_site(first->site) + "."
             : "No numerics window saw where the non-finite values began (the overflow happened outside autocast "
               "ops, e.g. in backward-only code).");
    f.fix = first != nullptr
                ? "Look at " + at_site(first->site) + ": " +
                      (first->kind == v1::NumericsSummary::KIND_CAST ? "its input exceeds float16's range; "
                                                                     : "it overflows float16; ") +
                      "keep it in float32 (autocast(enabled=False) with .float() inputs, or the overlay in "
                      "evidence.overlay), scale its input down, or use bfloat16, which needs no GradScaler."
                : "Run with numerics windows on (the default) so castscope can name the first non-finite op; "
                  "check the loss for inf/NaN, or use bfloat16.";
    f.evidence = {{"skipped", skipped},
                  {"updates", total},
                  {"calibration_skips", calibrating},
                  {"scale_path", path},
                  {"agent", agent_id}};
    if (first != nullptr) {
      f.evidence["first_nonfinite"] = {{"kind", first->kind == v1::NumericsSummary::KIND_CAST ? "cast" : "op_output"},
                                       {"site", site_json(first->site)},
                                       {"event_seq", first->seq},
                                       {"window_from_step", first->iteration}};
      f.evidence["overlay"] = fp32_overlay(first->site.op, v1::DEVICE_TYPE_UNSPECIFIED);
    }
    out.push_back(std::move(f));
  }
}

}  // namespace

void numerics_findings(const RunData& run, std::vector<Finding>& out) {
  cast_overflow(run, out);
  cast_underflow(run, out);
  nonfinite_output(run, out);
  scaler_skips(run, out);
}

}  // namespace castscope::collector
