// The cast cache's findings: stale-cache-hit and cache-growth.
#include "server/src/analysis/finding_rules.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "server/src/analysis/finding_text.h"

namespace castscope::collector {

using json = nlohmann::json;

void stale_cache_hits(const RunData& run, std::vector<Finding>& out) {
  struct Total {
    SiteRef site;
    uint64_t stale = 0, served = 0, first_seq = UINT64_MAX;
    int64_t gap = 0;
    std::set<std::string> modes;
    std::string dst;
  };
  std::map<std::tuple<std::string, uint32_t, std::string, std::string>, Total> by_site;
  for (const auto& row : run.sites) {
    if (row.stale_hits == 0) continue;
    Total& t = by_site[row.site.key()];
    t.site = row.site;
    t.stale += row.stale_hits;
    t.served += row.hits + row.stale_hits;
    t.gap = std::max(t.gap, row.max_version_gap);
    t.first_seq = std::min(t.first_seq, row.first_seq);
    t.modes.insert(mode_name(row.mode));
    t.dst = dtype_name(row.dst);
  }
  for (const auto& [key, t] : by_site) {
    Finding f = make_finding(FindingKind::kStaleCacheHit, {t.site});
    f.summary = std::to_string(t.stale) + " uses of " + (t.site.arg.empty() ? "a weight" : "`" + t.site.arg + "`") +
                " by " + t.site.op + " got a cached " + t.dst + " copy made before the weight changed (up to " +
                std::to_string(t.gap) + " versions old)";
    f.explanation =
        "Autocast caches the low-precision copy of each weight until the outermost autocast region exits. Here the "
        "weight was changed in place (for example by optimizer.step()) while the region stayed open, and the cache "
        "kept serving the copy made before the change: the forward pass ran with old weights. Training goes wrong "
        "without any error.";
    f.fix =
        "Open torch.autocast around the forward pass and the loss only, so the region (and its cache) ends before "
        "optimizer.step(); or call torch.clear_autocast_cache() after every in-place update.";
    f.evidence = {{"stale_hits", t.stale}, {"cached_uses", t.served}, {"max_version_gap", t.gap},
                  {"first_event_seq", t.first_seq}, {"modes", t.modes}};
    out.push_back(std::move(f));
  }
}

namespace {

// The sites whose cacheable misses made the growth: the busiest three.
std::vector<SiteRef> missing_sites(const RunData& run) {
  std::vector<const SiteRow*> missing;
  for (const auto& row : run.sites)
    if (row.misses > 0) missing.push_back(&row);
  std::sort(missing.begin(), missing.end(), [](const SiteRow* a, const SiteRow* b) { return a->misses > b->misses; });
  std::vector<SiteRef> sites;
  for (size_t i = 0; i < missing.size() && i < 3; ++i) sites.push_back(missing[i]->site);
  return sites;
}

// Step rule: the samples taken at optimizer steps grow in most steps, not a
// one-off warm-up: new cached casts every iteration.
std::optional<Finding> growth_across_steps(const RunData& run, const std::string& agent,
                                           const std::vector<const CacheSampleRow*>& all) {
  std::vector<const CacheSampleRow*> samples;
  for (const auto* sample : all)
    if (sample->trigger == v1::CacheSample::TRIGGER_ITERATION) samples.push_back(sample);
  if (samples.size() < 3) return std::nullopt;
  size_t grew = 0;
  for (size_t i = 1; i < samples.size(); ++i) grew += samples[i]->live_casts > samples[i - 1]->live_casts ? 1 : 0;
  const auto* first = samples.front();
  const auto* last = samples.back();
  if (last->live_casts <= first->live_casts || grew * 2 < samples.size() - 1) return std::nullopt;
  Finding f = make_finding(FindingKind::kCacheGrowth, missing_sites(run));
  f.summary = "the autocast cast cache grew from " + std::to_string(first->live_casts) + " to " +
              std::to_string(last->live_casts) + " live casts (" + std::to_string(first->live_bytes) + " to " +
              std::to_string(last->live_bytes) + " bytes) over " + std::to_string(samples.size()) + " iterations";
  f.explanation =
      "Cached low-precision casts stay alive until the outermost autocast region exits. This region stays open "
      "across iterations, and every iteration casts new leaf tensors that require grad (new parameters, or tensors "
      "re-created with requires_grad=True), so each adds an entry that is never reused or freed: memory grows "
      "with the length of the run.";
  f.evidence = {{"agent_id", agent},
                {"detected_by", "iteration samples"},
                {"iterations", {first->iteration, last->iteration}},
                {"live_casts", {first->live_casts, last->live_casts}},
                {"live_bytes", {first->live_bytes, last->live_bytes}},
                {"iterations_that_grew", grew}};
  return f;
}

// Step-free rule, from any samples in seq order. Between two samples of one
// region (the cache let go of nothing: its `released_casts` total did not
// move, so the region stayed open) the cache
// - grew in use: it served cached casts again (a loop inside the region)
//   while holding more, or holds more casts of sources already gone;
// - filled: holds more but served nothing again, as a big model's first
//   forward pass does over several samples;
// - or held as many: nothing cast, or part of a pass (a timed sample inside a
//   slow pass), which neither extends nor ends a run.
// A run of growing intervals, held-as-many ones allowed between them, of at
// least kGrowingIntervals is a loop that adds entries each pass, unless the
// cache then, in the same region, served twice as many casts as it holds
// without holding one more: a loop that leaks adds an entry every pass, so
// that was a cache that filled over several passes (branches first taken
// later) and stopped. Step-free samples come about once a pass (at a miss,
// after as many cacheable casts as the cache holds: cast_cache_watch.h),
// so three intervals are a few passes once the weights are cached.
constexpr size_t kGrowingIntervals = 3;

enum class CacheInterval { kGrew, kHeld, kFilled, kLetGo };

CacheInterval cache_interval(const CacheSampleRow& a, const CacheSampleRow& b) {
  // Totals that went back: the observer was cleared, a new count.
  if (b.released_casts != a.released_casts || b.cache_hits < a.cache_hits) return CacheInterval::kLetGo;
  const bool reused = b.cache_hits > a.cache_hits;
  if ((reused && b.live_casts > a.live_casts) || b.orphaned_casts > a.orphaned_casts) return CacheInterval::kGrew;
  return b.live_casts > a.live_casts ? CacheInterval::kFilled : CacheInterval::kHeld;
}

std::optional<Finding> growth_within_region(const RunData& run, const std::string& agent,
                                            const std::vector<const CacheSampleRow*>& samples) {
  // The run [begin, end] with the most growing intervals; `end` its last growing sample.
  size_t best_begin = 0, best_end = 0, best_grew = 0;
  size_t begin = 0, end = 0, grew = 0;
  uint64_t hits_at_end = 0;  // cache_hits at `end`: what it served since without growing
  auto close_run = [&](bool stopped_growing) {
    if (!stopped_growing && grew > best_grew) {
      best_begin = begin;
      best_end = end;
      best_grew = grew;
    }
    grew = 0;
  };
  for (size_t i = 1; i < samples.size(); ++i) {
    const CacheSampleRow& b = *samples[i];
    switch (cache_interval(*samples[i - 1], b)) {
      case CacheInterval::kGrew:
        if (grew == 0) begin = i - 1;
        ++grew;
        end = i;
        hits_at_end = b.cache_hits;
        break;
      case CacheInterval::kHeld:
        if (grew > 0 && b.cache_hits - hits_at_end >= 2 * std::max<uint64_t>(b.live_casts, 1)) close_run(true);
        break;
      case CacheInterval::kFilled:
      case CacheInterval::kLetGo:
        close_run(false);
        break;
    }
  }
  close_run(false);
  if (best_grew < kGrowingIntervals) return std::nullopt;
  const CacheSampleRow& first = *samples[best_begin];
  const CacheSampleRow& last = *samples[best_end];
  std::set<std::string> triggers;
  for (size_t i = best_begin; i <= best_end; ++i)
    triggers.insert(std::string(value_name(samples[i]->trigger)));
  Finding f = make_finding(FindingKind::kCacheGrowth, missing_sites(run));
  f.summary = "the autocast cast cache grew from " + std::to_string(first.live_casts) + " to " +
              std::to_string(last.live_casts) + " live casts (" + std::to_string(first.live_bytes) + " to " +
              std::to_string(last.live_bytes) + " bytes) over " + std::to_string(best_end - best_begin + 1) +
              " samples inside one autocast region";
  if (last.orphaned_casts > 0)
    f.summary += ", " + std::to_string(last.orphaned_casts) + " of them for tensors already freed";
  f.explanation =
      "Cached low-precision casts stay alive until the outermost autocast region exits. This region stays open "
      "around a loop: the cache kept serving the same cached casts pass after pass while new leaf tensors that "
      "require grad (inputs re-created with requires_grad=True, as in input-gradient saliency or adversarial "
      "examples) added an entry each pass, and nothing was let go. Each entry keeps its cast, and the autograd graph "
      "behind it, alive until the region exits: memory grows with the number of passes.";
  f.evidence = {{"agent_id", agent},
                {"detected_by", "samples inside one region"},
                {"sample_seqs", {first.seq, last.seq}},
                {"samples", best_end - best_begin + 1},
                {"intervals_that_grew", best_grew},
                {"triggers", triggers},
                {"iterations", {first.iteration, last.iteration}},
                {"live_casts", {first.live_casts, last.live_casts}},
                {"live_bytes", {first.live_bytes, last.live_bytes}},
                {"orphaned_casts", {first.orphaned_casts, last.orphaned_casts}},
                {"orphaned_bytes", {first.orphaned_bytes, last.orphaned_bytes}},
                {"cache_hits_between", last.cache_hits - first.cache_hits},
                {"released_between", 0}};
  return f;
}

}  // namespace

void cache_growth(const RunData& run, std::vector<Finding>& out) {
  std::map<std::string, std::vector<const CacheSampleRow*>> by_agent;  // each in seq order
  for (const auto& sample : run.cache_samples) by_agent[sample.agent_id].push_back(&sample);
  for (auto& [agent, samples] : by_agent) {
    std::stable_sort(samples.begin(), samples.end(),
                     [](const CacheSampleRow* a, const CacheSampleRow* b) { return a->seq < b->seq; });
    std::optional<Finding> f = growth_across_steps(run, agent, samples);
    if (!f) f = growth_within_region(run, agent, samples);
    if (!f) continue;
    f->fix =
        "Enter torch.autocast inside the loop, around the forward pass and the loss; or call "
        "torch.clear_autocast_cache() every iteration; or use torch.autocast(..., cache_enabled=False) for this "
        "region.";
    out.push_back(std::move(*f));
  }
}

}  // namespace castscope::collector
