// The finding catalog, declared once: every kind of finding castscope raises,
// with its default severity, its family, what it says and why it matters.
// The rules make their findings from it (make_finding), `castscope-collector
// catalog` prints it for SARIF's rules (agent/python/castscope/sarif.py), and
// test_finding_catalog.py holds the report schema's enum and
// docs/diagnostics.md's sections equal to it. A new kind is added here.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <nlohmann/json.hpp>
#include <string_view>

namespace castscope::collector {

enum class FindingKind : uint8_t {
  kStaleCacheHit,
  kCacheGrowth,
  kBackwardUnderAutocast,
  kModeMismatch,
  kScriptDisableIgnored,
  kTraceDroppedAutocast,
  kScriptUnderTrace,
  kLowPrecisionEscape,
  kCastChurn,
  kNotAutocast,
  kCompileMismatch,
  kCastShare,
  kTf32Matmul,
  kCastOverflow,
  kCastUnderflow,
  kNonfiniteOutput,
  kScalerSkips,
  kCastRoundTrip,
  kExplicitUpcastDominates,
  kFp8Saturation,
  kFp8ZeroAmax,
};
inline constexpr size_t kFindingKinds = static_cast<size_t>(FindingKind::kFp8ZeroAmax) + 1;  // the last kind

struct FindingKindInfo {
  FindingKind kind;
  std::string_view name;      // "stale-cache-hit": the report's kind, SARIF's rule id, the docs' section
  std::string_view severity;  // the default: info, warning, error or critical
  std::string_view family;    // cache, modes, precision or numerics (the rules' files)
  std::string_view title;     // what happened, one sentence
  std::string_view why;       // why it matters, one sentence
};

// In the catalog's order, which is SARIF's rule order.
const std::array<FindingKindInfo, kFindingKinds>& finding_catalog();
const FindingKindInfo& finding_kind_info(FindingKind kind);
// [{"kind", "severity", "family", "title", "why"}, ...] in the catalog's order.
nlohmann::json finding_catalog_json();

}  // namespace castscope::collector
