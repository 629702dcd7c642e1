// Findings of the conversions autocast's kernel did not make (RunData's
// conversions; docs/events.md, "Makers"): cast-round-trip and
// explicit-upcast-dominates.
#include <algorithm>
#include <map>
#include <set>
#include <tuple>

#include "server/src/analysis/conversion_makers.h"
#include "server/src/analysis/finding_rules.h"
#include "server/src/analysis/finding_text.h"

namespace castscope::collector {

namespace {

// Bits of a floating dtype (0: not floating).
int float_bits(v1::DType dtype) {
  switch (dtype) {
    case v1::DTYPE_FLOAT64: return 64;
    case v1::DTYPE_FLOAT32: return 32;
    case v1::DTYPE_FLOAT16:
    case v1::DTYPE_BFLOAT16: return 16;
    case v1::DTYPE_FLOAT8:
    case v1::DTYPE_FLOAT8_E4M3FN:
    case v1::DTYPE_FLOAT8_E5M2:
    case v1::DTYPE_FLOAT8_E4M3FNUZ:
    case v1::DTYPE_FLOAT8_E5M2FNUZ:
    case v1::DTYPE_FLOAT8_E8M0FNU: return 8;
    default: return 0;
  }
}

// A conversion the job's code (the user's, a model library's, torchao's, FSDP's) asked for, not autograd's.
bool asked_for(v1::CastMaker maker) {
  return maker != v1::CAST_MAKER_BACKWARD && maker != v1::CAST_MAKER_AUTOCAST_BACKWARD && !autocast_decision(maker);
}

}  // namespace

void cast_round_trip(const RunData& run, std::vector<Finding>& out) {
  struct Line {
    SiteRef site;
    uint64_t round_trips = 0, bytes = 0;
    bool precision_lost = false;  // down and back up, else up and back down
    std::set<std::string> pairs;
  };
  std::map<std::tuple<std::string, uint32_t, std::string>, Line> lines;  // file, line, op
  for (const auto& row : run.conversions) {
    if (row.round_trips == 0 || !asked_for(row.maker)) continue;
    Line& line = lines[{row.site.file, row.site.line, row.site.op}];
    if (line.site.file.empty()) line.site = row.site;
    line.round_trips += row.round_trips;
    line.bytes += row.round_trip_bytes;
    // The row is the way back (src -> dst); the way there was dst -> src.
    const bool lost = float_bits(row.dst) > float_bits(row.src);
    line.precision_lost = line.precision_lost || lost;
    line.pairs.insert(dtype_name(row.dst) + "->" + dtype_name(row.src) + "->" + dtype_name(row.dst));
  }
  for (const auto& [key, line] : lines) {
    Finding f = make_finding(FindingKind::kCastRoundTrip, {line.site});
    f.summary = std::to_string(line.round_trips) + " times a tensor this line converted was converted straight back (" +
                joined(line.pairs) + "), moving " + std::to_string(line.bytes) + " bytes for nothing" +
                (line.precision_lost ? " and rounding the values to the narrower dtype on the way" : "");
    f.explanation =
        "The line converts a tensor and then converts the result back to the dtype it came from, with nothing "
        "computed in between: two copies of its bytes. Down and back up (float32 -> bfloat16 -> float32) also "
        "rounds every value to the narrower dtype, so the float32 result is not what the line started with; up "
        "and back down gains nothing.";
    f.fix = line.precision_lost
                ? "Drop both conversions if the rounding is not wanted; if it is (emulating the narrower dtype), say so "
                  "with a comment and keep it out of the hot loop."
                : "Drop both conversions: the tensor ends in the dtype it started in.";
    f.evidence = {{"round_trips", line.round_trips}, {"bytes", line.bytes}, {"dtype_round_trips", line.pairs},
                  {"precision_lost", line.precision_lost}};
    out.push_back(std::move(f));
  }
}

void explicit_upcast_dominates(const RunData& run, std::vector<Finding>& out) {
  uint64_t autocast_bytes = 0;
  for (const auto& row : run.sites)
    if (row.outcome == v1::CAST_OUTCOME_CAST) autocast_bytes += row.bytes - row.served_bytes;
  if (autocast_bytes == 0) return;  // no autocast conversions to compare with
  struct Line {
    SiteRef site;
    uint64_t bytes = 0, conversions = 0;
    std::string maker;
  };
  std::map<std::tuple<std::string, uint32_t>, Line> lines;
  uint64_t upcast_bytes = 0;
  for (const auto& row : run.conversions) {
    if (!asked_for(row.maker) || row.backward == row.count) continue;
    const int from = float_bits(row.src), to = float_bits(row.dst);
    if (from == 0 || to <= from) continue;  // an upcast of floating values only
    upcast_bytes += row.bytes;
    Line& line = lines[{row.site.file, row.site.line}];
    if (line.site.file.empty()) {
      line.site = row.site;
      line.maker = maker_label(row.maker, row.site.file);
    }
    line.bytes += row.bytes;
    line.conversions += row.count;
  }
  if (upcast_bytes <= autocast_bytes) return;
  std::vector<const Line*> top;
  for (const auto& [key, line] : lines) top.push_back(&line);
  std::sort(top.begin(), top.end(), [](const Line* a, const Line* b) { return a->bytes > b->bytes; });
  if (top.size() > 3) top.resize(3);
  std::vector<SiteRef> sites;
  nlohmann::json top_lines = nlohmann::json::array();
  for (const Line* line : top) {
    SiteRef by_line = line->site;  // the id: the lines alone
    by_line.op.clear();
    by_line.arg.clear();
    sites.push_back(by_line);
    top_lines.push_back({{"file", line->site.file}, {"line", line->site.line}, {"maker", line->maker},
                         {"bytes", line->bytes}, {"conversions", line->conversions}});
  }
  Finding f = make_finding(FindingKind::kExplicitUpcastDominates, sites);
  f.summary = "the code's own upcasts moved " + std::to_string(upcast_bytes) + " bytes, more than autocast's casts (" +
              std::to_string(autocast_bytes) + " bytes); most at " + sites.front().file + ":" +
              std::to_string(sites.front().line);
  f.explanation =
      "Explicit conversions to a wider float dtype (`.float()`, `.to(torch.float32)`) in the forward cost more "
      "memory traffic than all of autocast's casts: the mixed-precision saving is spent converting back. Often a "
      "normalization or loss written to compute in float32, applied to large activations.";
  f.fix =
      "Look at the lines named: compute the upcast part on less data (reduce first, then upcast), let autocast's "
      "fp32 list cover the op, or keep the activation in float32 if it is converted at every use.";
  f.evidence = {{"upcast_bytes", upcast_bytes}, {"autocast_bytes", autocast_bytes}, {"top_lines", top_lines}};
  out.push_back(std::move(f));
}

}  // namespace castscope::collector
