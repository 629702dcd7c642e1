#include "server/src/analysis/finding_catalog.h"

namespace castscope::collector {
namespace {

using K = FindingKind;

constexpr std::array<FindingKindInfo, kFindingKinds> kCatalog{{
    {K::kStaleCacheHit, "stale-cache-hit", "critical", "cache",
     "A cached low-precision weight was served after the weight changed in place.",
     "The forward pass used old weights: training is silently wrong."},
    {K::kCacheGrowth, "cache-growth", "warning", "cache", "Live cached casts grew across iterations.",
     "An autocast region that never exits and meets new leaves each step grows memory without bound."},
    {K::kBackwardUnderAutocast, "backward-under-autocast", "warning", "modes", "Backward ops ran with autocast enabled.",
     "Not recommended by PyTorch; the backward pass may get unexpected dtypes."},
    {K::kModeMismatch, "mode-mismatch", "warning", "modes",
     "The same line computes in different dtypes in eager, scripted or traced execution.",
     "What was tested is not numerically what ships."},
    {K::kScriptDisableIgnored, "script-disable-ignored", "error", "modes",
     "Scripted autocast(enabled=False) did not keep full precision under eager autocast.",
     "Code meant to run in float32 runs in lower precision, silently."},
    {K::kTraceDroppedAutocast, "trace-dropped-autocast", "error", "modes",
     "autocast(enabled=False) inside a traced function was not kept in the graph.",
     "The traced graph computes in lower precision where the source asked for float32."},
    {K::kScriptUnderTrace, "script-under-trace", "error", "modes",
     "A traced function calls TorchScript with autocast enabled.",
     "PyTorch does not support this combination; the recorded dtypes may not be what runs."},
    {K::kLowPrecisionEscape, "low-precision-escape", "warning", "precision",
     "A low-precision tensor made inside an autocast region met float32 outside it.",
     "It causes 'expected scalar type' errors or silent type promotion."},
    {K::kCastChurn, "cast-churn", "warning", "precision", "The same tensor was cast down and up again repeatedly.",
     "Wasted memory bandwidth and kernel time."},
    {K::kNotAutocast, "not-autocast", "warning", "precision",
     "In-place, out=, float64 or unlisted custom ops ran without autocast.",
     "The op computed in the dtype it was handed, uncast, inside a region where the code around it is cast."},
    {K::kCompileMismatch, "compile-mismatch", "warning", "modes",
     "A line computes in different dtypes compiled with torch.compile and eagerly.",
     "What was debugged eagerly is not numerically what runs compiled."},
    {K::kCastShare, "cast-share", "warning", "precision", "Cast kernels take a large share of a site's GPU time.",
     "The casts may cost more than the lower precision saves."},
    {K::kTf32Matmul, "tf32-matmul", "info", "precision", "float32 matmuls ran on tensor cores as TF32.",
     "A precision the code did not ask for."},
    {K::kCastOverflow, "cast-overflow", "error", "numerics", "Casting to a lower precision turned finite values into inf.",
     "The op computes on inf: its result, the loss and the gradients go non-finite."},
    {K::kCastUnderflow, "cast-underflow", "warning", "numerics", "Casting to a lower precision turned nonzero values into 0.",
     "Epsilons and small gradients vanish silently."},
    {K::kNonfiniteOutput, "nonfinite-output", "error", "numerics", "An autocast op produced inf or NaN from finite inputs.",
     "Its lower-precision output overflowed; the loss and gradients follow."},
    {K::kScalerSkips, "scaler-skips", "warning", "numerics",
     "GradScaler skipped optimizer steps after its scale had settled.",
     "Each skip throws a training step away; something overflows again and again."},
    {K::kCastRoundTrip, "cast-round-trip", "warning", "precision",
     "A line converted a tensor and straight back to the dtype it came from.",
     "Two copies of its bytes for nothing, and down and back up rounds every value on the way."},
    {K::kExplicitUpcastDominates, "explicit-upcast-dominates", "info", "precision",
     "The code's own upcasts moved more bytes than autocast's casts.",
     "The memory traffic mixed precision saves is spent converting back to float32."},
    {K::kFp8Saturation, "fp8-saturation", "warning", "numerics",
     "Converting to float8 clipped values beyond the format's largest.",
     "Every clipped value is off by what lay beyond 448 (e4m3) or 57344 (e5m2): outliers flattened, silently."},
    {K::kFp8ZeroAmax, "fp8-zero-amax", "warning", "numerics",
     "A tensor converted to float8 was all zero: its amax was 0.",
     "Its scale is infinite or undefined (torchao clamps it to the 1e-12 floor's): the float8 matmul computes on "
     "nothing, and a zero gradient means the layer is not learning."},
}};

// Each entry at its kind's index: finding_kind_info is an index.
constexpr bool catalog_in_kind_order() {
  for (size_t i = 0; i < kCatalog.size(); ++i)
    if (static_cast<size_t>(kCatalog[i].kind) != i) return false;
  return true;
}
static_assert(catalog_in_kind_order(), "kCatalog lists the kinds in FindingKind's order");

}  // namespace

const std::array<FindingKindInfo, kFindingKinds>& finding_catalog() { return kCatalog; }

const FindingKindInfo& finding_kind_info(FindingKind kind) { return kCatalog.at(static_cast<size_t>(kind)); }

nlohmann::json finding_catalog_json() {
  nlohmann::json out = nlohmann::json::array();
  for (const auto& entry : kCatalog)
    out.push_back({{"kind", entry.name},
                   {"severity", entry.severity},
                   {"family", entry.family},
                   {"title", entry.title},
                   {"why", entry.why}});
  return out;
}

}  // namespace castscope::collector
