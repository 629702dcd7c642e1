#include "server/src/analysis/analyzers.h"

#include "server/src/analysis/numerics_findings.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

namespace castscope::collector {
namespace {

using json = nlohmann::json;

std::string where(const SiteRef& site) {
  std::string arg = site.arg.empty() ? "" : " (" + site.arg + ")";
  return (site.file.empty() ? std::string("<no source location>") : site.file + ":" + std::to_string(site.line)) + " " +
         site.op + arg;
}

// FNV-1a over the kind and the sites: the same problem keeps its id between
// analyses of a growing run and between runs.
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

Finding make(const std::string& kind, const std::string& severity, std::vector<SiteRef> sites) {
  Finding f;
  f.kind = kind;
  f.severity = severity;
  f.sites = std::move(sites);
  f.id = finding_id(kind, f.sites);
  return f;
}

// Site rows gathered by (file, line, op): one finding per line and op, with
// its arguments listed together ("self,mat2").
struct LineSite {
  SiteRef site;
  uint64_t decisions = 0;
  std::set<std::string> dtypes;
};
using LineSites = std::map<std::tuple<std::string, uint32_t, std::string>, LineSite>;

// Takes `row` into `site`: the first row sets it, later ones add their
// argument to the list.
void merge_site(SiteRef& site, const SiteRef& row) {
  if (site.op.empty()) {
    site = row;
  } else if (site.arg.empty()) {
    site.arg = row.arg;
  } else if (!row.arg.empty() && ("," + site.arg + ",").find("," + row.arg + ",") == std::string::npos) {
    site.arg += "," + row.arg;
  }
}

LineSite& gather(LineSites& sites, const SiteRow& row) {
  LineSite& s = sites[{row.site.file, row.site.line, row.site.op}];
  merge_site(s.site, row.site);
  s.decisions += row.count;
  return s;
}

// JIT autocast's own cast ops (inserted into scripted graphs): the
// mechanism, not a line of the user's computation. The agent's graph pass
// gives each the line of the op that consumes it (jit_cast_lines.h); casts
// run before that pass saw their graph (an executor's first, profiling call,
// graphs optimized before attach) are at the Python line that called it.
bool jit_autocast_cast(const std::string& op) { return op.starts_with("aten::_autocast_to_"); }

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
    Finding f = make("stale-cache-hit", "critical", {t.site});
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
  Finding f = make("cache-growth", "warning", missing_sites(run));
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
// after as many cacheable casts as the cache holds: cast_cache_observer.h),
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
  Finding f = make("cache-growth", "warning", missing_sites(run));
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

void backward_under_autocast(const RunData& run, std::vector<Finding>& out) {
  if (run.backward_ops.empty()) return;
  std::vector<const BackwardOpRow*> rows;
  uint64_t calls = 0, graph_runs = 0;  // autocast ops; runs of compiled backward graphs (compiled::backward)
  for (const auto& row : run.backward_ops) {
    rows.push_back(&row);
    (row.site.op.starts_with("compiled::") ? graph_runs : calls) += row.calls;
  }
  std::sort(rows.begin(), rows.end(), [](const BackwardOpRow* a, const BackwardOpRow* b) { return a->calls > b->calls; });
  std::map<std::tuple<std::string, uint32_t>, SiteRef> lines;  // the backward() calls, by line
  json ops = json::object();
  for (const auto* row : rows) {
    SiteRef line = row->site;
    line.op = "backward";
    lines.try_emplace({line.file, line.line}, line);
    ops[row->site.op] = ops.value(row->site.op, uint64_t{0}) + row->calls;
  }
  std::vector<SiteRef> sites;
  for (const auto& [key, site] : lines) sites.push_back(site);
  Finding f = make("backward-under-autocast", "warning", sites);
  std::string what;
  if (calls > 0) what = std::to_string(calls) + " autocast ops";
  if (graph_runs > 0)
    what += (what.empty() ? "" : " and ") + std::to_string(graph_runs) +
            (graph_runs == 1 ? " run" : " runs") + " of a compiled backward graph";
  f.summary = what + " ran in the backward pass with autocast enabled, from " + where(sites.front());
  f.explanation =
      "backward() was called inside a torch.autocast region. Backward ops already run in the dtypes autocast chose "
      "for the forward pass; with autocast still on, the backward ops it covers are cast again by their own "
      "policies, so gradient dtypes can differ from what the forward pass implies. PyTorch recommends against it.";
  f.fix = "Leave the torch.autocast block before calling loss.backward() (keep only forward and loss inside).";
  f.evidence = {{"backward_autocast_ops", calls + graph_runs}, {"ops", ops}};
  out.push_back(std::move(f));
}

// What one mode computed in at a line and op: from cast decisions (the
// dtype each argument was computed in) and from op events (the dtypes the op
// returned), with the first sequence number that saw it.
struct ModeDtypes {
  std::set<std::string> computed;  // from casts
  std::set<std::string> outputs;   // from op events
  std::set<std::tuple<std::string, std::string, std::string, std::string>> casts;  // policy, src, dst, outcome
  bool outputs_probe_only = true;
  uint64_t first_seq = UINT64_MAX;
};

// Whether two modes' dtypes part: compared on what both saw (a mode the
// probe's windows missed has no outputs to compare).
bool dtypes_part(const std::vector<const std::set<std::string>*>& seen) {
  const std::set<std::string>* first = nullptr;
  for (const auto* dtypes : seen) {
    if (dtypes->empty()) continue;
    if (first == nullptr) first = dtypes;
    else if (*dtypes != *first) return true;
  }
  return false;
}

std::string dtype_list(const std::set<std::string>& dtypes) {
  std::string out;
  for (const auto& d : dtypes) out += (out.empty() ? "" : "/") + d;
  return out;
}

void mode_mismatches(const RunData& run, std::vector<Finding>& out) {
  // Per line, op and autocast state (on or off for the op's device): cast
  // rows are all made with autocast on. Script-while-tracing has its own
  // finding (script-under-trace), and so has torch.compile
  // (compile-mismatch); JIT autocast's cast ops are the mechanism, not the
  // user's computation.
  using Key = std::tuple<std::string, uint32_t, std::string, bool>;
  std::map<Key, SiteRef> sites;
  std::map<Key, std::map<std::string, ModeDtypes>> by_mode;
  auto skip = [](const SiteRef& site, v1::ExecutionMode mode) {
    return site.file.empty() || jit_autocast_cast(site.op) || mode == v1::EXECUTION_MODE_SCRIPT_WHILE_TRACING ||
           mode == v1::EXECUTION_MODE_COMPILING || mode == v1::EXECUTION_MODE_COMPILED;
  };
  for (const auto& row : run.sites) {
    if (skip(row.site, row.mode)) continue;
    const Key key{row.site.file, row.site.line, row.site.op, true};
    merge_site(sites[key], row.site);
    ModeDtypes& m = by_mode[key][mode_name(row.mode)];
    const std::string outcome = outcome_name(row.outcome);
    // The dtype this argument was computed in: a cast's target, an input
    // already in it, else the source (a traced graph that recorded its casts
    // and then sees already-cast inputs computes the same way).
    m.computed.insert(outcome == "cast" || outcome == "already_target" || outcome == "dtype_arg_set" ? dtype_name(row.dst)
                                                                                                     : dtype_name(row.src));
    m.casts.insert({policy_name(row.policy), dtype_name(row.src), dtype_name(row.dst), outcome});
    m.first_seq = std::min(m.first_seq, row.first_seq);
  }
  for (const auto& row : run.site_dtypes) {
    if (skip(row.site, row.mode)) continue;
    const Key key{row.site.file, row.site.line, row.site.op, row.autocast};
    merge_site(sites[key], row.site);
    ModeDtypes& m = by_mode[key][mode_name(row.mode)];
    for (auto dtype : row.output_dtypes) m.outputs.insert(dtype_name(dtype));
    m.outputs_probe_only &= row.probe_only;
    m.first_seq = std::min(m.first_seq, row.first_seq);
  }
  std::vector<std::pair<uint64_t, Finding>> found;
  for (const auto& [key, modes_seen] : by_mode) {
    if (modes_seen.size() < 2) continue;
    std::vector<const std::set<std::string>*> computed, outputs;
    uint64_t first_seq = UINT64_MAX;
    bool probe_only = false;
    for (const auto& [mode, m] : modes_seen) {
      computed.push_back(&m.computed);
      outputs.push_back(&m.outputs);
      first_seq = std::min(first_seq, m.first_seq);
      probe_only |= !m.outputs.empty() && m.outputs_probe_only;
    }
    const bool by_casts = dtypes_part(computed);
    if (!by_casts && !dtypes_part(outputs)) continue;
    Finding f = make("mode-mismatch", "warning", {sites[key]});
    json casts = json::object(), returned = json::object();
    std::string described;
    for (const auto& [mode, m] : modes_seen) {
      if (!m.casts.empty()) {
        json list = json::array();
        for (const auto& [policy, src, dst, outcome] : m.casts)
          list.push_back({{"policy", policy}, {"src_dtype", src}, {"dst_dtype", dst}, {"outcome", outcome}});
        casts[mode] = list;
      }
      if (!m.outputs.empty()) returned[mode] = m.outputs;
      const auto& shown = by_casts ? m.computed : m.outputs;
      if (!shown.empty()) described += (described.empty() ? "" : "; ") + mode + ": " + dtype_list(shown);
    }
    f.summary = std::string("the same line ") + (by_casts ? "computes in" : "returns") +
                " different dtypes by mode (" + described + ")";
    f.explanation =
        "This line ran in more than one execution mode (eager, scripted, traced) and computed in a different dtype "
        "in each, so what was tested in one mode is not what runs in the other. Typical causes: JIT autocast casts "
        "the operands of ops outside the autocast lists (add, mul, cat...) to the widest dtype where eager code "
        "keeps the lower precision; an autocast context inside scripted code (JIT autocast applies it with its own "
        "casts, and eager autocast around the call then casts again); a traced graph that fixed the dtypes it saw "
        "while tracing; or autocast state that differs between the calls.";
    f.fix =
        "Run and test the model in the mode it ships in; make the dtype explicit at this line in every mode (cast "
        "with .to(dtype) before the op), or trace or script under the same torch.autocast settings it will run "
        "with.";
    f.evidence = {{"autocast", std::get<3>(key)}, {"first_event_seq", first_seq}};
    if (!casts.empty()) f.evidence["behaviour_by_mode"] = casts;
    if (!returned.empty()) f.evidence["outputs_by_mode"] = returned;
    if (probe_only) f.evidence["observed"] = "op probe windows only";
    found.emplace_back(first_seq, std::move(f));
  }
  // Ordered by first execution: the first place the modes part leads.
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [seq, f] : found) out.push_back(std::move(f));
}

void script_disable_ignored(const RunData& run, std::vector<Finding>& out) {
  LineSites sites;
  for (const auto& row : run.sites) {
    if (!row.site.inside_disabled_autocast || row.outcome != v1::CAST_OUTCOME_CAST) continue;
    if (row.mode != v1::EXECUTION_MODE_SCRIPT) continue;
    gather(sites, row).dtypes.insert(dtype_name(row.src) + "->" + dtype_name(row.dst));
  }
  for (const auto& [key, s] : sites) {
    Finding f = make("script-disable-ignored", "error", {s.site});
    f.summary = std::to_string(s.decisions) + " autocast conversions (" + *s.dtypes.begin() + ") at a scripted line " +
                "inside `autocast(enabled=False)`: the disable did not hold";
    f.explanation =
        "This line is inside a `with torch.autocast(..., enabled=False)` block of scripted (TorchScript) code, and "
        "the scripted function was called while eager autocast was on. TorchScript does not turn eager autocast "
        "off for the block, so the op still went through autocast and was cast to lower precision, although the "
        "code asks for full precision. Eagerly the same code would not cast.";
    f.fix =
        "Call the scripted function outside the eager autocast region (or leave it unscripted); or cast explicitly "
        "inside it (`a.float()`, `b.float()`) so the op gets fp32 inputs whatever autocast does.";
    f.evidence = {{"conversions", s.decisions}, {"dtype_pairs", s.dtypes}};
    out.push_back(std::move(f));
  }
}

void trace_dropped_autocast(const RunData& run, std::vector<Finding>& out) {
  LineSites sites;
  for (const auto& row : run.sites) {
    // Computed in lower precision: cast here, or handed inputs that JIT
    // autocast's own cast ops had already converted.
    const bool lowered = (row.outcome == v1::CAST_OUTCOME_CAST || row.outcome == v1::CAST_OUTCOME_ALREADY_TARGET) &&
                         (row.dst == v1::DTYPE_BFLOAT16 || row.dst == v1::DTYPE_FLOAT16);
    if (row.mode != v1::EXECUTION_MODE_TRACED || !lowered) continue;
    if (!run.traced_with_autocast_off.contains({row.site.file, row.site.line, row.site.op})) continue;
    gather(sites, row).dtypes.insert(dtype_name(row.dst));
  }
  for (const auto& [key, s] : sites) {
    Finding f = make("trace-dropped-autocast", "error", {s.site});
    f.summary = "a traced graph ran " + s.site.op + " in " + *s.dtypes.begin() +
                " at a line that ran with autocast off when it was traced (" + std::to_string(s.decisions) +
                " argument decisions)";
    f.explanation =
        "When this code was traced it ran inside `autocast(enabled=False)` (or with autocast otherwise off), so the "
        "tracer recorded the op at full precision. The traced graph keeps no record of the disable: run under "
        "autocast, the op goes through autocast again and is cast to lower precision, unlike the code that was "
        "traced. PyTorch cannot warn about this.";
    f.fix =
        "Make the precision explicit in the traced code (`a.float()`, `b.float()` before the op, or `.to(dtype)`), "
        "or script the function instead of tracing it, or run the traced graph outside autocast.";
    f.evidence = {{"lower_precision_decisions", s.decisions}, {"computed_dtypes", s.dtypes}};
    out.push_back(std::move(f));
  }
}

std::string joined(const std::set<std::string>& items) {
  std::string out;
  for (const auto& item : items) out += (out.empty() ? "" : ", ") + item;
  return out;
}

void script_under_trace(const RunData& run, std::vector<Finding>& out) {
  // One finding per traced line that called into TorchScript (where the user
  // combined the two), naming it first and then the scripted lines; per
  // scripted line when the calling line is unknown (no Python frame reader).
  struct Call {
    LineSites scripted;
    SiteRef caller;
  };
  // Keyed by the calling line (op "") or, when unknown, the scripted line and op.
  std::map<std::tuple<std::string, uint32_t, std::string>, Call> calls;
  for (const auto& row : run.sites) {
    if (row.mode != v1::EXECUTION_MODE_SCRIPT_WHILE_TRACING || jit_autocast_cast(row.site.op)) continue;
    const bool cast = row.outcome == v1::CAST_OUTCOME_CAST || row.outcome == v1::CAST_OUTCOME_ALREADY_TARGET;
    const bool known = !row.site.called_from_file.empty();
    Call& call = calls[{known ? row.site.called_from_file : row.site.file,
                        known ? row.site.called_from_line : row.site.line, known ? "" : row.site.op}];
    if (known) {
      call.caller.file = row.site.called_from_file;
      call.caller.line = row.site.called_from_line;
      call.caller.function = row.site.called_from_function;
      call.caller.op = "call into TorchScript";
    }
    gather(call.scripted, row).dtypes.insert(dtype_name(cast ? row.dst : row.src));
  }
  for (const auto& [key, call] : calls) {
    std::vector<SiteRef> named;
    if (!call.caller.file.empty()) named.push_back(call.caller);
    std::set<std::string> dtypes;
    uint64_t decisions = 0;
    for (const auto& [line, s] : call.scripted) {
      named.push_back(s.site);
      dtypes.insert(s.dtypes.begin(), s.dtypes.end());
      decisions += s.decisions;
    }
    const std::string computed = joined(dtypes);
    const SiteRef& first_scripted = call.caller.file.empty() ? named.front() : named[1];
    Finding f = make("script-under-trace", "error", named);
    f.summary = "torch.jit.trace recorded a call into scripted code that ran " + first_scripted.op +
                " under autocast (in " + computed + ")" +
                (call.caller.file.empty() ? "" : ", called from " + call.caller.file + ":" + std::to_string(call.caller.line));
    f.explanation =
        "The code being traced called a scripted (TorchScript) function while autocast was on. The tracer does not "
        "look inside the scripted call: it records the call, not the casts eager autocast made in it, and the "
        "scripted graph later runs with TorchScript's own autocast handling (off by default). So the traced graph "
        "need not compute in the dtypes the traced code did, under autocast or not. PyTorch does not support this "
        "combination and does not warn.";
    f.fix =
        "Trace the function without scripting the part it calls (or script the whole model instead of tracing "
        "it); or cast explicitly inside the scripted function so its dtypes do not depend on autocast.";
    f.evidence = {{"decisions_while_tracing", decisions}, {"computed_dtypes", dtypes}};
    out.push_back(std::move(f));
  }
}

std::set<std::string> dtype_names(const std::set<v1::DType>& dtypes) {
  std::set<std::string> names;
  for (const auto dtype : dtypes) names.insert(dtype_name(dtype));
  return names;
}

void low_precision_escape(const RunData& run, std::vector<Finding>& out) {
  struct Line {
    SiteRef site;
    uint64_t calls = 0;
    std::set<std::string> ops, inputs, outputs;
  };
  std::map<std::tuple<std::string, uint32_t>, Line> lines;  // every op of one line: one finding
  for (const auto& row : run.probe_ops) {
    if (row.reason != v1::PROBE_REASON_LOW_PRECISION_MEETS_FP32) continue;
    Line& line = lines[{row.site.file, row.site.line}];
    if (line.site.op.empty()) line.site = row.site;
    line.calls += row.calls;
    line.ops.insert(row.site.op);
    for (const auto& name : dtype_names(row.input_dtypes)) line.inputs.insert(name);
    for (const auto& name : dtype_names(row.output_dtypes)) line.outputs.insert(name);
  }
  for (auto& [key, line] : lines) {
    SiteRef by_line = line.site;  // the id: the line alone, so a new op there is not a new finding
    by_line.op.clear();
    line.site.op = joined(line.ops);
    Finding f = make("low-precision-escape", "warning", {line.site});
    f.id = finding_id(f.kind, {by_line});
    f.summary = "a lower-precision tensor made under autocast met float32 outside the region in " + line.site.op +
                " (" + std::to_string(line.calls) + " calls; inputs " + joined(line.inputs) + ", result " +
                joined(line.outputs) + ")";
    f.explanation =
        "A tensor computed inside a torch.autocast region (here in " + joined(line.inputs) +
        ") was used after the region ended, together with a float32 tensor. Outside the region no autocast policy "
        "applies: ops either promote silently to float32 (computing on values already rounded to lower precision) "
        "or fail with 'expected scalar type' errors, depending on the op.";
    f.fix =
        "Cast the region's outputs back when they leave it (`out.float()`), as PyTorch's autocast docs advise; or "
        "move this computation (for example the loss) inside the region.";
    f.evidence = {{"calls", line.calls}, {"ops", line.ops}, {"input_dtypes", line.inputs}, {"output_dtypes", line.outputs},
                  {"observed", "op probe windows only (docs/diagnostics.md)"}};
    out.push_back(std::move(f));
  }
}

void cast_churn(const RunData& run, std::vector<Finding>& out) {
  struct Site {
    SiteRef site;
    uint64_t round_trips = 0, bytes = 0;
    std::set<std::string> pairs;
  };
  std::map<std::tuple<std::string, uint32_t, std::string>, Site> sites;
  for (const auto& row : run.sites) {
    if (row.round_trips == 0) continue;
    Site& s = sites[{row.site.file, row.site.line, row.site.op}];
    merge_site(s.site, row.site);
    s.round_trips += row.round_trips;
    s.bytes += row.round_trip_bytes;
    s.pairs.insert(dtype_name(row.dst) + "->" + dtype_name(row.src) + "->" + dtype_name(row.dst));
  }
  for (const auto& [key, s] : sites) {
    if (s.round_trips < 2) continue;  // once is a choice; repeated, it is churn
    Finding f = make("cast-churn", "warning", {s.site});
    f.summary = std::to_string(s.round_trips) + " times autocast cast a tensor back to the dtype it had just been " +
                "cast from (" + joined(s.pairs) + ") for " + s.site.op + ", moving " + std::to_string(s.bytes) +
                " bytes for nothing";
    f.explanation =
        "An explicit cast (`.float()`, `.to(dtype)`) turned a tensor into another dtype, and autocast then cast it "
        "straight back for this op: the data went down and up (or up and down) again, paying two copies of its "
        "bytes and gaining no precision, since the values were already rounded. It repeats every iteration.";
    f.fix =
        "Drop the explicit cast before this op (autocast casts what the op needs), or keep the tensor in the dtype "
        "the op runs in.";
    f.evidence = {{"round_trips", s.round_trips}, {"bytes_cast_back", s.bytes}, {"dtype_round_trips", s.pairs},
                  {"observed", "op probe windows only (docs/diagnostics.md)"}};
    out.push_back(std::move(f));
  }
}

// Shares of a site's GPU time in its casts' kernels (docs/gpu.md) that make
// a finding, and the least GPU time a site needs before its share means much.
constexpr double kCastShareWarning = 0.20, kCastShareInfo = 0.05;
constexpr uint64_t kCastShareMinimumNs = 100'000;

std::string milliseconds(uint64_t ns) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.3f ms", static_cast<double>(ns) / 1e6);
  return text;
}

void cast_share(const RunData& run, std::vector<Finding>& out) {
  for (const auto& row : run.gpu_sites) {
    const uint64_t total = row.cast_ns + row.compute_ns;
    if (total < kCastShareMinimumNs || row.cast_ns == 0) continue;
    const double share = static_cast<double>(row.cast_ns) / static_cast<double>(total);
    if (share < kCastShareInfo) continue;
    Finding f = make("cast-share", share >= kCastShareWarning ? "warning" : "info", {row.site});
    char percent[16];
    std::snprintf(percent, sizeof(percent), "%.0f %%", share * 100);
    f.summary = "casts for " + row.site.op + " took " + percent + " of its GPU time (" + milliseconds(row.cast_ns) +
                " casting, " + milliseconds(row.compute_ns) + " computing)";
    f.explanation =
        "The kernels that converted this op's arguments to its autocast dtype ran for a large share of the time the "
        "op itself ran on the GPU: the lower precision saves less than the conversions cost. Typical causes: small "
        "ops whose inputs are cast on every call, float32 weights cast again every iteration outside the cast cache "
        "(no grad, or a cache cleared by leaving autocast), or activations that go back and forth between dtypes.";
    f.fix =
        "Keep the tensors in the dtype the op runs in (cast weights once, or keep activations in the autocast "
        "dtype), let several ops share one cast inside one autocast region, or run small ops outside autocast.";
    f.evidence = {{"cast_ns", row.cast_ns},
                  {"compute_ns", row.compute_ns},
                  {"cast_share", share},
                  {"cast_kernels", row.cast_kernels},
                  {"compute_kernels", row.compute_kernels},
                  {"thresholds", {{"warning", kCastShareWarning}, {"info", kCastShareInfo}}}};
    out.push_back(std::move(f));
  }
}

// classify_kernel's confidence words, and "exact" (cuBLASLt's logger) above them.
int confidence_rank(const std::string& confidence) {
  if (confidence == "exact") return 3;
  if (confidence == "high") return 2;
  return confidence == "medium" ? 1 : 0;
}

const char* kTf32Explanation =
    "TF32 keeps float32's range but rounds each multiplication's inputs to a 10-bit mantissa (float16's "
    "precision) and accumulates in float32: on Ampere and later GPUs it is several times faster than full float32, "
    "and results differ from float32 from about the third or fourth significant digit. PyTorch runs float32 "
    "matmuls as TF32 when torch.backends.cuda.matmul.allow_tf32 is True or torch.set_float32_matmul_precision() "
    "is \"high\" or \"medium\" (off by default), and float32 convolutions while torch.backends.cudnn.allow_tf32 "
    "is True (on by default). Autocast does not decide this: it applies to every float32 matmul, inside an "
    "autocast region (an op autocast keeps in float32, or one it does not cast) or outside one.";

std::string tf32_fix(bool convolution, bool matmul) {
  std::string off;
  if (matmul)
    off = "torch.backends.cuda.matmul.allow_tf32 = False (or torch.set_float32_matmul_precision(\"highest\"))";
  if (convolution) off += std::string(off.empty() ? "" : " and ") + "torch.backends.cudnn.allow_tf32 = False";
  return "Nothing to do if TF32 is what you want: it is expected with these settings, and fast. If this computation "
         "needs full float32 precision, set " +
         off + " before it runs (or only around it), and expect it to run slower.";
}

// Float32 matmuls and convolutions that ran as TF32: exact where cuBLASLt's
// logger described the op's matmuls, else read from the kernels' names.
void tf32_matmul(const RunData& run, std::vector<Finding>& out) {
  struct Site {
    SiteRef site;
    uint64_t op_calls = 0, matmuls = 0, kernels = 0, gpu_ns = 0, example_ns = 0;
    std::set<std::string> sources;
    std::string confidence, example;
  };
  std::map<std::tuple<std::string, uint32_t, std::string>, Site> sites;
  for (const auto& row : run.gemm_exact) {
    if (row.compute != v1::GEMM_COMPUTE_32F_FAST_TF32) continue;
    Site& s = sites[{row.site.file, row.site.line, row.site.op}];
    s.site = row.site;
    s.op_calls += row.ops;
    s.matmuls += row.matmuls;
    s.sources.insert("cublaslt");
    s.confidence = "exact";
  }
  for (const auto& row : run.gemm_kernels) {
    if (row.inputs != "tf32") continue;
    Site& s = sites[{row.site.file, row.site.line, row.site.op}];
    s.site = row.site;
    s.kernels += row.kernels;
    s.gpu_ns += row.gpu_ns;
    s.sources.insert("kernel_name");
    if (confidence_rank(row.confidence) > confidence_rank(s.confidence) || s.confidence.empty())
      s.confidence = row.confidence;
    if (row.gpu_ns >= s.example_ns) {
      s.example_ns = row.gpu_ns;
      s.example = row.example;
    }
  }
  for (const auto& [key, s] : sites) {
    Finding f = make("tf32-matmul", "info", {s.site});
    std::string how;
    if (s.op_calls > 0) how = std::to_string(s.op_calls) + " calls as cuBLASLt reported them";
    if (s.kernels > 0)
      how += (how.empty() ? "" : "; ") + std::to_string(s.kernels) + " TF32 kernels, " + milliseconds(s.gpu_ns) +
             " on the GPU" + (s.op_calls > 0 ? "" : " (read from kernel names, " + s.confidence + " confidence)");
    const bool convolution = s.site.op.find("conv") != std::string::npos;
    f.summary = s.site.op + " ran float32 " + (convolution ? "convolutions" : "matmuls") +
                " as TF32 on tensor cores: " + how;
    f.explanation = kTf32Explanation;
    f.fix = tf32_fix(convolution, !convolution);
    std::string source;
    for (const auto& name : s.sources) source += (source.empty() ? "" : "+") + name;
    f.evidence = {{"source", source},   {"confidence", s.confidence}, {"op_calls", s.op_calls},
                  {"matmuls", s.matmuls}, {"kernels", s.kernels},     {"gpu_ns", s.gpu_ns},
                  {"example_kernel", s.example}};
    out.push_back(std::move(f));
  }
  // Launched outside autocast ops (the backward pass, float32 code outside
  // autocast regions): no op, so no site; one finding for the run.
  uint64_t kernels = 0, gpu_ns = 0, example_ns = 0;
  std::string confidence, example;
  for (const auto& row : run.gemm_unattributed) {
    if (row.inputs != "tf32") continue;
    kernels += row.kernels;
    gpu_ns += row.gpu_ns;
    if (confidence_rank(row.confidence) > confidence_rank(confidence) || confidence.empty()) confidence = row.confidence;
    if (row.gpu_ns >= example_ns) {
      example_ns = row.gpu_ns;
      example = row.example;
    }
  }
  if (kernels == 0) return;
  Finding f = make("tf32-matmul", "info", {});
  f.summary = std::to_string(kernels) + " GEMM kernels launched outside autocast ops ran float32 as TF32 (" +
              milliseconds(gpu_ns) + " on the GPU; read from kernel names, " + confidence +
              " confidence): backward passes, or float32 code outside autocast regions";
  f.explanation = std::string(kTf32Explanation) +
                  " These kernels were launched by no op castscope recorded, so no source line is known; the "
                  "report's gpu.gemm_precision.outside_autocast_ops lists them by precision.";
  f.fix = tf32_fix(true, true);
  f.evidence = {{"source", "kernel_name"}, {"confidence", confidence}, {"kernels", kernels},
                {"gpu_ns", gpu_ns},        {"example_kernel", example}, {"launched", "outside autocast ops"}};
  out.push_back(std::move(f));
}

bool lower_precision(v1::DType dtype) { return dtype == v1::DTYPE_BFLOAT16 || dtype == v1::DTYPE_FLOAT16; }

const char* kCompileMismatchFix =
    "set torch._functorch.config.backward_pass_autocast = \"off\" (or leave this computation out of the compiled "
    "region); see pytorch#179804";

// torch.compile's backward graph is traced under the forward's autocast state
// (backward_pass_autocast = "same_as_forward"), so a line whose forward ran
// with autocast off inside an autocast region gets a backward cast to lower
// precision that eager backward never makes. Seen at compile time: COMPILING
// casts in the backward at a line where no COMPILING forward op had autocast on.
void compile_backward_mismatches(const RunData& run, std::vector<std::pair<uint64_t, Finding>>& found) {
  std::set<std::pair<std::string, uint32_t>> forward_under_autocast;
  for (const auto& row : run.site_dtypes)
    if (row.mode == v1::EXECUTION_MODE_COMPILING && row.autocast) forward_under_autocast.insert({row.site.file, row.site.line});
  struct Line {
    std::map<std::tuple<std::string, std::string>, SiteRef> sites;  // op, arg
    std::set<std::string> ops, compiled, eager;
    uint64_t casts = 0, first_seq = UINT64_MAX;
  };
  std::map<std::pair<std::string, uint32_t>, Line> lines;
  for (const auto& row : run.compile_decisions) {
    if (row.backward == 0 || row.outcome != v1::CAST_OUTCOME_CAST || !lower_precision(row.dst)) continue;
    if (row.site.file.empty() || forward_under_autocast.contains({row.site.file, row.site.line})) continue;
    Line& line = lines[{row.site.file, row.site.line}];
    line.sites.try_emplace({row.site.op, row.site.arg}, row.site);
    line.ops.insert(row.site.op);
    line.compiled.insert(dtype_name(row.dst));
    line.eager.insert(dtype_name(row.src));
    line.casts += row.count;
    line.first_seq = std::min(line.first_seq, row.first_seq);
  }
  for (const auto& [key, line] : lines) {
    std::vector<SiteRef> sites;
    for (const auto& [op_arg, site] : line.sites) sites.push_back(site);
    Finding f = make("compile-mismatch", "warning", sites);
    f.id = finding_id(f.kind, {SiteRef{key.first, key.second, "", "backward", ""}});  // the line: new args keep it
    const std::string compiled = joined(line.compiled), eager = joined(line.eager), ops = joined(line.ops);
    f.summary = "the compiled backward computes " + ops + " at this line in " + compiled + "; eager backward computes it in " +
                eager + ", as the forward did (autocast off here)";
    f.explanation =
        "torch.compile traces the backward graph under the autocast state of the forward pass "
        "(torch._functorch.config.backward_pass_autocast = \"same_as_forward\"), that is the state of the autocast "
        "region around the compiled call. This line's forward ran with autocast off (inside `torch.autocast(..., "
        "enabled=False)`), so it computed in full precision, yet the compiled backward casts its inputs to lower "
        "precision: its gradients differ from eager's, silently (pytorch#179804).";
    f.fix = kCompileMismatchFix;
    f.evidence = {{"phase", "backward"}, {"compiled_dtype", compiled}, {"eager_dtype", eager},
                  {"ops", line.ops},     {"casts", line.casts},       {"first_event_seq", line.first_seq}};
    found.emplace_back(line.first_seq, std::move(f));
  }
}

// The same line, op and autocast dtype computed eagerly and traced by
// torch.compile (COMPILING) in one run, returning different dtypes.
void compile_forward_mismatches(const RunData& run, std::vector<std::pair<uint64_t, Finding>>& found) {
  struct Modes {
    SiteRef site;
    std::set<std::string> eager, compiling;
    uint64_t first_seq = UINT64_MAX;
  };
  std::map<std::tuple<std::string, uint32_t, std::string, v1::DType>, Modes> by_site;
  for (const auto& row : run.site_dtypes) {
    const bool eager = row.mode == v1::EXECUTION_MODE_EAGER;
    if (!row.autocast || row.probe_only || row.site.file.empty() || (!eager && row.mode != v1::EXECUTION_MODE_COMPILING))
      continue;
    Modes& m = by_site[{row.site.file, row.site.line, row.site.op, row.autocast_dtype}];
    m.site = row.site;
    for (auto dtype : row.output_dtypes) (eager ? m.eager : m.compiling).insert(dtype_name(dtype));
    m.first_seq = std::min(m.first_seq, row.first_seq);
  }
  // One finding per line, its ops together.
  std::map<std::pair<std::string, uint32_t>, std::vector<const Modes*>> lines;
  for (const auto& [key, m] : by_site)
    if (!m.eager.empty() && !m.compiling.empty() && m.eager != m.compiling)
      lines[{std::get<0>(key), std::get<1>(key)}].push_back(&m);
  for (const auto& [key, parted] : lines) {
    std::vector<SiteRef> sites;
    std::set<std::string> ops, eager, compiling;
    uint64_t first_seq = UINT64_MAX;
    for (const Modes* m : parted) {
      if (!ops.contains(m->site.op)) sites.push_back(m->site);
      ops.insert(m->site.op);
      eager.insert(m->eager.begin(), m->eager.end());
      compiling.insert(m->compiling.begin(), m->compiling.end());
      first_seq = std::min(first_seq, m->first_seq);
    }
    Finding f = make("compile-mismatch", "warning", sites);
    f.id = finding_id(f.kind, {SiteRef{key.first, key.second, "", "forward", ""}});
    f.summary = "the same line returns different dtypes eagerly and compiled under the same autocast dtype (" +
                joined(ops) + "; eager: " + dtype_list(eager) + "; compiling: " + dtype_list(compiling) + ")";
    f.explanation =
        "This line ran eagerly and was traced by torch.compile in the same run, under the same autocast dtype, and "
        "its autocast ops returned different dtypes: the compiled graph does not compute what the eager code did. "
        "Typical causes: autocast state that differs between the eager call and the compile (a graph compiled "
        "under one region and reused under another), or code whose dtypes depend on something torch.compile "
        "fixed at trace time.";
    f.fix =
        "Make the dtype explicit at this line (cast with .to(dtype) before the op), compile under the same "
        "torch.autocast settings the code runs with, or leave this computation out of the compiled region.";
    f.evidence = {{"phase", "forward"},
                  {"ops", ops},
                  {"outputs_by_mode", {{"eager", eager}, {"compiling", compiling}}},
                  {"first_event_seq", first_seq}};
    found.emplace_back(first_seq, std::move(f));
  }
}

void compile_mismatches(const RunData& run, std::vector<Finding>& out) {
  std::vector<std::pair<uint64_t, Finding>> found;
  compile_backward_mismatches(run, found);
  compile_forward_mismatches(run, found);
  std::stable_sort(found.begin(), found.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (auto& [seq, f] : found) out.push_back(std::move(f));
}

void not_autocast(const RunData& run, std::vector<Finding>& out) {
  struct Site {
    SiteRef site;
    uint64_t calls = 0;
    std::string why;
    std::set<std::string> dtypes;
  };
  std::map<std::tuple<std::string, uint32_t, std::string>, Site> sites;
  for (const auto& row : run.probe_ops) {
    if (row.reason != v1::PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST) continue;
    Site& s = sites[{row.site.file, row.site.line, row.site.op}];
    s.site = row.site;
    s.calls += row.calls;
    // "ns::name.overload", as the probe named it; its out= rule (op_probe.cc): overload "out" or "*_out".
    const std::string& op = row.site.op;
    const size_t dot = op.find('.');
    const std::string name = op.substr(0, dot);
    const std::string overload = dot == std::string::npos ? "" : op.substr(dot + 1);
    if (overload == "out" || overload.ends_with("_out")) {
      s.why = "an out= variant";
    } else if (name.ends_with("_")) {
      s.why = "an in-place variant";
    } else {
      s.why = "a custom op no autocast policy lists";
    }
    for (const auto& d : dtype_names(row.output_dtypes)) s.dtypes.insert(d);
  }
  // Lower-precision ops handed float64: autocast leaves float64 alone.
  for (const auto& row : run.sites) {
    if (row.policy != v1::CAST_POLICY_LOWER_PRECISION_FP || row.outcome != v1::CAST_OUTCOME_FLOAT64) continue;
    Site& s = sites[{row.site.file, row.site.line, row.site.op}];
    merge_site(s.site, row.site);
    s.calls += row.count;
    s.why = "given float64 inputs, which autocast never casts";
    s.dtypes.insert("float64");
  }
  for (const auto& [key, s] : sites) {
    Finding f = make("not-autocast", "warning", {s.site});
    // What it computed in: "full precision" only when that is what it was
    // (an in-place op on a bfloat16 tensor ran uncast, but not at full precision).
    const bool full = std::all_of(s.dtypes.begin(), s.dtypes.end(),
                                  [](const std::string& d) { return d == "float32" || d == "float64"; });
    f.summary = s.site.op + (full ? " ran at full precision (" : " ran without autocast's casts (in ") +
                joined(s.dtypes) + ") under autocast: it is " + s.why + " (" + std::to_string(s.calls) +
                (s.why.starts_with("given") ? " argument decisions)" : " calls)");
    f.explanation =
        "Autocast casts only the functional forms of the ops on its lists, and only float32 inputs. In-place and "
        "out= variants, ops no policy lists (custom ops) and float64 inputs run as they are, so this op computed in "
        "whatever dtype it was handed, uncast, inside a region where the code around it is cast.";
    f.fix =
        "Use the functional form (`c = torch.mm(a, b)` rather than `out=` or `addmm_`), cast the inputs to the "
        "dtype you want, keep float64 out of the region, or list a custom op in a castscope policy overlay (and "
        "give it an autocast kernel of its own).";
    f.evidence = {{"calls", s.calls}, {"reason", s.why}, {"computed_dtypes", s.dtypes}};
    out.push_back(std::move(f));
  }
}

}  // namespace

GemmWords gemm_words(v1::GemmCompute compute, v1::DType a_type) {
  std::string a;
  switch (a_type) {
    case v1::DTYPE_FLOAT32: a = "fp32"; break;
    case v1::DTYPE_FLOAT16: a = "fp16"; break;
    case v1::DTYPE_BFLOAT16: a = "bf16"; break;
    case v1::DTYPE_FLOAT64: a = "fp64"; break;
    case v1::DTYPE_FLOAT8: a = "fp8"; break;
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

Finding make_finding(const std::string& kind, const std::string& severity, std::vector<SiteRef> sites) {
  return make(kind, severity, std::move(sites));
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
  numerics_findings(run, out);
  attribute_ranks(run, out);
  return out;
}

}  // namespace castscope::collector
