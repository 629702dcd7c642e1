// The analyzers' rules on hand-made run data; the same findings from real
// torch jobs are in tests/integration/test_findings.py.
#include "server/src/analysis/analyzers.h"

#include <gtest/gtest.h>

#include <map>

namespace castscope::collector {
namespace {

SiteRow site(const char* file, uint32_t line, const char* op, const char* arg, v1::ExecutionMode mode, v1::DType src,
             v1::DType dst, v1::CastOutcome outcome = v1::CAST_OUTCOME_CAST) {
  SiteRow row;
  row.site = SiteRef{file, line, "f", op, arg};
  row.mode = mode;
  row.role = v1::ROLE_WEIGHT;
  row.policy = v1::CAST_POLICY_LOWER_PRECISION_FP;
  row.src = src;
  row.dst = dst;
  row.outcome = outcome;
  row.device = v1::DEVICE_TYPE_CPU;
  row.count = 4;
  return row;
}

// m.py:5's aten::mm casting its `self` as decided in `mode`, from `src` to `dst`.
SiteRow mm_at_5(v1::ExecutionMode mode, v1::DType src, v1::DType dst, v1::CastOutcome outcome = v1::CAST_OUTCOME_CAST) {
  return site("m.py", 5, "aten::mm", "self", mode, src, dst, outcome);
}

std::vector<std::string> kinds(const std::vector<Finding>& findings) {
  std::vector<std::string> out;
  for (const auto& f : findings) out.push_back(f.kind);
  return out;
}

// A cache sample taken at optimizer step `i`, the seq following the step.
CacheSampleRow step_sample(uint64_t i, uint64_t live_casts, uint64_t live_bytes) {
  CacheSampleRow row{"a", i, live_casts, live_bytes};
  row.trigger = v1::CacheSample::TRIGGER_ITERATION;
  row.seq = i * 100;
  return row;
}

// A step-free sample: `seq`, what the cache held, and the running totals.
CacheSampleRow miss_sample(uint64_t seq, uint64_t live_casts, uint64_t hits, uint64_t released,
                           uint64_t orphaned_casts = 0) {
  CacheSampleRow row{"a", 0, live_casts, live_casts * 512};
  row.trigger = v1::CacheSample::TRIGGER_MISSES;
  row.seq = seq;
  row.cache_hits = hits;
  row.released_casts = released;
  row.orphaned_casts = orphaned_casts;
  row.orphaned_bytes = orphaned_casts * 512;
  return row;
}

TEST(Analyzers, CleanRunHasNoFindings) {
  RunData run;
  run.sites.push_back(site("train.py", 10, "aten::linear", "weight", v1::EXECUTION_MODE_EAGER, v1::DTYPE_FLOAT32,
                           v1::DTYPE_BFLOAT16));
  for (uint64_t i = 1; i <= 5; ++i) run.cache_samples.push_back(step_sample(i, 0, 0));
  EXPECT_TRUE(analyze_run(run).empty());
}

TEST(Analyzers, StaleHitsAreCriticalAtTheirSite) {
  RunData run;
  auto row = site("train.py", 10, "aten::linear", "weight", v1::EXECUTION_MODE_EAGER, v1::DTYPE_FLOAT32,
                  v1::DTYPE_BFLOAT16);
  row.stale_hits = 3;
  row.max_version_gap = 2;
  run.sites.push_back(row);
  const auto findings = analyze_run(run);
  ASSERT_EQ(kinds(findings), std::vector<std::string>{"stale-cache-hit"});
  EXPECT_EQ(findings[0].severity, "critical");
  EXPECT_EQ(findings[0].sites[0].line, 10u);
  EXPECT_EQ(findings[0].evidence["stale_hits"], 3);
  EXPECT_EQ(findings[0].evidence["max_version_gap"], 2);
  // Stable id: the same problem keeps its id.
  EXPECT_EQ(findings[0].id, analyze_run(run)[0].id);
}

TEST(Analyzers, CacheGrowthNeedsGrowthInMostIterations) {
  RunData steady;
  for (uint64_t i = 1; i <= 6; ++i) steady.cache_samples.push_back(step_sample(i, 10, 1000));  // a warm cache
  EXPECT_TRUE(analyze_run(steady).empty());
  RunData warm_up;  // grows once, then flat
  for (uint64_t i = 1; i <= 6; ++i) warm_up.cache_samples.push_back(step_sample(i, i == 1 ? 5u : 10u, 1000));
  EXPECT_TRUE(analyze_run(warm_up).empty());
  RunData growing;
  for (uint64_t i = 1; i <= 6; ++i) growing.cache_samples.push_back(step_sample(i, i, i * 100));
  const auto findings = analyze_run(growing);
  ASSERT_EQ(kinds(findings), std::vector<std::string>{"cache-growth"});
  EXPECT_EQ(findings[0].evidence["detected_by"], "iteration samples");
  EXPECT_EQ(findings[0].evidence["live_casts"], nlohmann::json({1, 6}));
}

TEST(Analyzers, CacheGrowthWithoutStepsNeedsReuseAndNoReleaseBetweenSamples) {
  // A saliency loop in one region: the weights' casts are served every pass,
  // each pass caches one more input, nothing is let go.
  RunData loop;
  for (uint64_t k = 0; k < 5; ++k) loop.cache_samples.push_back(miss_sample(100 + k, 64u << k, 60 * k, 0));
  auto findings = analyze_run(loop);
  ASSERT_EQ(kinds(findings), std::vector<std::string>{"cache-growth"});
  EXPECT_EQ(findings[0].evidence["detected_by"], "samples inside one region");
  EXPECT_EQ(findings[0].evidence["samples"], 5);
  EXPECT_EQ(findings[0].evidence["sample_seqs"], nlohmann::json({100, 104}));
  EXPECT_EQ(findings[0].evidence["live_casts"], nlohmann::json({64, 1024}));
  EXPECT_EQ(findings[0].evidence["triggers"], nlohmann::json::array({"misses"}));

  // A big model's first forward in one region: the cache fills over several
  // samples, but nothing is served again.
  RunData first_forward;
  for (uint64_t k = 0; k < 5; ++k) first_forward.cache_samples.push_back(miss_sample(100 + k, 64u << k, 0, 0));
  EXPECT_TRUE(analyze_run(first_forward).empty());

  // A region per iteration: every interval lets go of the last pass's casts.
  RunData per_iteration;
  for (uint64_t k = 0; k < 5; ++k)
    per_iteration.cache_samples.push_back(miss_sample(100 + k, 10 + k, 60 * k, 50 * k));
  EXPECT_TRUE(analyze_run(per_iteration).empty());

  // Two growing intervals are not enough; in seq order, whatever the row order.
  RunData short_run;
  for (uint64_t k : {2, 0, 1}) short_run.cache_samples.push_back(miss_sample(100 + k, 64u << k, 60 * k, 0));
  EXPECT_TRUE(analyze_run(short_run).empty());
}

TEST(Analyzers, CacheGrowthWithoutStepsAllowsQuietIntervalsButNotACacheThatStoppedGrowing) {
  // A loop sampled about once a pass from a small cache: 8, 12, 16, 20 live
  // casts, four weights served each pass; a timed sample inside a slow pass
  // (seq 103: hits, nothing new) neither extends nor ends the run.
  RunData loop;
  loop.cache_samples = {miss_sample(100, 8, 12, 0), miss_sample(101, 12, 28, 0), miss_sample(102, 16, 44, 0),
                        miss_sample(103, 16, 46, 0), miss_sample(104, 20, 60, 0)};
  loop.cache_samples[3].trigger = v1::CacheSample::TRIGGER_INTERVAL;
  auto findings = analyze_run(loop);
  ASSERT_EQ(kinds(findings), std::vector<std::string>{"cache-growth"});
  EXPECT_EQ(findings[0].evidence["intervals_that_grew"], 3);
  EXPECT_EQ(findings[0].evidence["samples"], 5);
  EXPECT_EQ(findings[0].evidence["live_casts"], nlohmann::json({8, 20}));
  EXPECT_EQ(findings[0].evidence["triggers"], nlohmann::json::array({"interval", "misses"}));

  // A cache that filled over a few passes (branches first taken later) and
  // then, in the same region, served twice what it holds without growing.
  RunData filled = loop;
  filled.cache_samples.push_back(miss_sample(105, 20, 80, 0));
  filled.cache_samples.push_back(miss_sample(106, 20, 100, 0));
  filled.cache_samples[5].trigger = filled.cache_samples[6].trigger = v1::CacheSample::TRIGGER_INTERVAL;
  EXPECT_TRUE(analyze_run(filled).empty());

  // The same after the region exited: the growth stands.
  RunData exited = filled;
  exited.cache_samples[5].released_casts = exited.cache_samples[6].released_casts = 20;
  exited.cache_samples[5].live_casts = exited.cache_samples[6].live_casts = 0;
  EXPECT_EQ(kinds(analyze_run(exited)), std::vector<std::string>{"cache-growth"});
}

TEST(Analyzers, CacheGrowthFromOrphanedCasts) {
  // Casts of sources already freed pile up while the region stays open, even
  // with no hits (nothing else in the loop is cacheable).
  RunData orphans;
  for (uint64_t k = 0; k < 4; ++k) orphans.cache_samples.push_back(miss_sample(10 + k, 64 * (k + 1), 0, 0, 64 * k));
  const auto findings = analyze_run(orphans);
  ASSERT_EQ(kinds(findings), std::vector<std::string>{"cache-growth"});
  EXPECT_EQ(findings[0].evidence["orphaned_casts"], nlohmann::json({0, 192}));
  EXPECT_NE(findings[0].summary.find("192 of them for tensors already freed"), std::string::npos) << findings[0].summary;
}

TEST(Analyzers, BackwardOpsPointAtTheBackwardLine) {
  RunData run;
  BackwardOpRow backward;
  backward.site = SiteRef{"train.py", 12, "<module>", "aten::mm", ""};
  backward.calls = 6;
  backward.first_seq = 40;
  run.backward_ops.push_back(backward);
  const auto findings = analyze_run(run);
  ASSERT_EQ(kinds(findings), std::vector<std::string>{"backward-under-autocast"});
  EXPECT_EQ(findings[0].sites[0].line, 12u);
  EXPECT_EQ(findings[0].evidence["backward_autocast_ops"], 6);
}

TEST(Analyzers, ModeMismatchComparesComputedDtypes) {
  RunData mismatch;
  mismatch.sites.push_back(mm_at_5(v1::EXECUTION_MODE_EAGER, v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT16));
  mismatch.sites.push_back(mm_at_5(v1::EXECUTION_MODE_SCRIPT, v1::DTYPE_FLOAT16, v1::DTYPE_BFLOAT16));
  EXPECT_EQ(kinds(analyze_run(mismatch)), std::vector<std::string>{"mode-mismatch"});
  // A traced graph that recorded its casts sees bf16 inputs later: same computed dtype, no finding.
  RunData traced;
  traced.sites.push_back(mm_at_5(v1::EXECUTION_MODE_TRACE_RECORDING, v1::DTYPE_FLOAT32, v1::DTYPE_BFLOAT16));
  traced.sites.push_back(
      mm_at_5(v1::EXECUTION_MODE_TRACED, v1::DTYPE_BFLOAT16, v1::DTYPE_BFLOAT16, v1::CAST_OUTCOME_ALREADY_TARGET));
  EXPECT_TRUE(analyze_run(traced).empty());
}

SiteDtypeRow returned(uint32_t line, const char* op, v1::ExecutionMode mode, v1::DType output, uint64_t first_seq,
                      bool autocast = true) {
  SiteDtypeRow row;
  row.site = SiteRef{"m.py", line, "f", op, ""};
  row.mode = mode;
  row.autocast = autocast;
  row.output_dtypes = {output};
  row.first_seq = first_seq;
  return row;
}

// One line's op run in two modes: what it returned in each, and the seq of
// its first run there.
struct InTwoModes {
  uint32_t line;
  const char* op;
  v1::DType first;
  uint64_t first_seq;
  v1::DType second;
  uint64_t second_seq;
};

// Rows made by make(line, op, mode, output, first_seq) for each op, in
// `first_mode` and `second_mode`.
template <typename Make>
void add_in_two_modes(RunData& run, Make make, v1::ExecutionMode first_mode, v1::ExecutionMode second_mode,
                      std::initializer_list<InTwoModes> ops) {
  for (const InTwoModes& o : ops) {
    run.site_dtypes.push_back(make(o.line, o.op, first_mode, o.first, o.first_seq));
    run.site_dtypes.push_back(make(o.line, o.op, second_mode, o.second, o.second_seq));
  }
}

TEST(Analyzers, ModeMismatchComparesWhatOpsReturnedInOrderOfFirstExecution) {
  RunData run;  // JIT autocast promoted two ops outside the autocast lists
  add_in_two_modes(run, [](auto... row) { return returned(row...); }, v1::EXECUTION_MODE_EAGER,
                   v1::EXECUTION_MODE_SCRIPT,
                   {{9, "aten::mul.Tensor", v1::DTYPE_BFLOAT16, 20, v1::DTYPE_FLOAT32, 40},
                    {8, "aten::add.Tensor", v1::DTYPE_BFLOAT16, 10, v1::DTYPE_FLOAT32, 30},
                    {7, "aten::mm", v1::DTYPE_BFLOAT16, 5, v1::DTYPE_BFLOAT16, 25}});
  const auto findings = analyze_run(run);
  ASSERT_EQ(kinds(findings), (std::vector<std::string>{"mode-mismatch", "mode-mismatch"}));
  EXPECT_EQ(findings[0].sites[0].line, 8u);  // first executed first
  EXPECT_EQ(findings[1].sites[0].line, 9u);
  EXPECT_EQ(findings[0].evidence["outputs_by_mode"]["script"], nlohmann::json::array({"float32"}));
  EXPECT_EQ(findings[0].evidence["observed"], "op probe windows only");

  RunData states;  // eager outside autocast, scripted under it: not the same situation
  states.site_dtypes.push_back(returned(8, "aten::add.Tensor", v1::EXECUTION_MODE_EAGER, v1::DTYPE_FLOAT32, 1, false));
  states.site_dtypes.push_back(returned(8, "aten::add.Tensor", v1::EXECUTION_MODE_SCRIPT, v1::DTYPE_BFLOAT16, 2));
  EXPECT_TRUE(analyze_run(states).empty());

  RunData while_tracing;  // script-under-trace has its own finding
  while_tracing.site_dtypes.push_back(returned(8, "aten::mm", v1::EXECUTION_MODE_SCRIPT_WHILE_TRACING, v1::DTYPE_BFLOAT16, 1));
  while_tracing.site_dtypes.push_back(returned(8, "aten::mm", v1::EXECUTION_MODE_SCRIPT, v1::DTYPE_FLOAT32, 2));
  EXPECT_TRUE(analyze_run(while_tracing).empty());
}

TEST(Analyzers, ScriptUnderTraceNamesTheCallingLineFirst) {
  RunData run;
  for (uint32_t line : {12u, 13u}) {
    auto row = site("s.py", line, "aten::mm", "self", v1::EXECUTION_MODE_SCRIPT_WHILE_TRACING, v1::DTYPE_FLOAT32,
                    v1::DTYPE_BFLOAT16);
    row.site.called_from_file = "s.py";
    row.site.called_from_line = 16;
    row.site.called_from_function = "model";
    run.sites.push_back(row);
  }
  const auto findings = analyze_run(run);
  ASSERT_EQ(kinds(findings), std::vector<std::string>{"script-under-trace"});
  ASSERT_EQ(findings[0].sites.size(), 3u);
  EXPECT_EQ(findings[0].sites[0].line, 16u);
  EXPECT_EQ(findings[0].sites[0].function, "model");
  EXPECT_EQ(findings[0].sites[1].line, 12u);
  EXPECT_EQ(findings[0].sites[2].line, 13u);
  EXPECT_NE(findings[0].summary.find("called from s.py:16"), std::string::npos);
}

TEST(Analyzers, ScriptDisableIgnoredOnlyForScriptedLinesInADisabledBlock) {
  RunData run;
  auto inside = site("m.py", 9, "aten::mm", "self", v1::EXECUTION_MODE_SCRIPT, v1::DTYPE_FLOAT32, v1::DTYPE_BFLOAT16);
  inside.site.inside_disabled_autocast = true;
  run.sites.push_back(inside);
  auto already = inside;  // nothing converted: nothing to report
  already.site.line = 10;
  already.outcome = v1::CAST_OUTCOME_ALREADY_TARGET;
  run.sites.push_back(already);
  const auto findings = analyze_run(run);
  ASSERT_EQ(kinds(findings), std::vector<std::string>{"script-disable-ignored"});
  EXPECT_EQ(findings[0].sites[0].line, 9u);
  EXPECT_EQ(findings[0].severity, "error");
}

TEST(Analyzers, TraceDroppedAutocastNeedsTheTraceTimeDisable) {
  RunData run;
  run.sites.push_back(site("t.py", 9, "aten::mm", "self", v1::EXECUTION_MODE_TRACED, v1::DTYPE_BFLOAT16,
                           v1::DTYPE_BFLOAT16, v1::CAST_OUTCOME_ALREADY_TARGET));  // JIT autocast cast it first
  EXPECT_TRUE(analyze_run(run).empty());  // nothing says autocast was off when traced
  run.traced_with_autocast_off.insert({"t.py", 9, "aten::mm"});
  const auto findings = analyze_run(run);
  ASSERT_EQ(kinds(findings), std::vector<std::string>{"trace-dropped-autocast"});
  EXPECT_EQ(findings[0].sites[0].line, 9u);
  run.sites[0].dst = v1::DTYPE_FLOAT32;  // the graph computed in fp32 after all
  run.sites[0].src = v1::DTYPE_FLOAT32;
  EXPECT_TRUE(analyze_run(run).empty());
}

TEST(Analyzers, ScriptUnderTraceFlagsScriptedLinesRunWhileTracing) {
  RunData run;
  run.sites.push_back(site("s.py", 4, "aten::mm", "self", v1::EXECUTION_MODE_SCRIPT, v1::DTYPE_FLOAT32,
                           v1::DTYPE_BFLOAT16, v1::CAST_OUTCOME_CAST));
  EXPECT_TRUE(analyze_run(run).empty());  // scripted, but no trace was recording
  run.sites.push_back(site("s.py", 4, "aten::mm", "mat2", v1::EXECUTION_MODE_SCRIPT_WHILE_TRACING,
                           v1::DTYPE_FLOAT32, v1::DTYPE_BFLOAT16, v1::CAST_OUTCOME_CAST));
  const auto findings = analyze_run(run);
  ASSERT_EQ(kinds(findings), std::vector<std::string>{"script-under-trace"});
  EXPECT_EQ(findings[0].sites[0].line, 4u);
  EXPECT_EQ(findings[0].evidence["computed_dtypes"], nlohmann::json::array({"bfloat16"}));
}

ProbeOpRow probe(const char* op, uint32_t line, v1::ProbeReason reason, std::set<v1::DType> inputs) {
  ProbeOpRow row;
  row.site = SiteRef{"p.py", line, "f", op, ""};
  row.reason = reason;
  row.device = v1::DEVICE_TYPE_CPU;
  row.input_dtypes = std::move(inputs);
  row.output_dtypes = {v1::DTYPE_FLOAT32};
  row.calls = 2;
  return row;
}

TEST(Analyzers, LowPrecisionEscapeIsOneFindingPerLine) {
  RunData run;
  run.probe_ops.push_back(probe("aten::broadcast_tensors", 18, v1::PROBE_REASON_LOW_PRECISION_MEETS_FP32,
                                {v1::DTYPE_BFLOAT16, v1::DTYPE_FLOAT32}));
  run.probe_ops.push_back(
      probe("aten::mse_loss", 18, v1::PROBE_REASON_LOW_PRECISION_MEETS_FP32, {v1::DTYPE_BFLOAT16, v1::DTYPE_FLOAT32}));
  const auto findings = analyze_run(run);
  ASSERT_EQ(kinds(findings), std::vector<std::string>{"low-precision-escape"});
  EXPECT_EQ(findings[0].sites[0].line, 18u);
  EXPECT_EQ(findings[0].evidence["calls"], 4);
  EXPECT_EQ(findings[0].evidence["ops"], nlohmann::json::array({"aten::broadcast_tensors", "aten::mse_loss"}));
}

TEST(Analyzers, CastChurnNeedsRepeatedRoundTrips) {
  RunData run;
  SiteRow row = site("c.py", 17, "aten::linear", "input", v1::EXECUTION_MODE_EAGER, v1::DTYPE_FLOAT32,
                     v1::DTYPE_BFLOAT16);
  row.role = v1::ROLE_ACTIVATION;
  row.round_trips = 1;
  row.round_trip_bytes = 2048;
  run.sites.push_back(row);
  EXPECT_TRUE(analyze_run(run).empty());  // once may be deliberate
  run.sites[0].round_trips = 4;
  const auto findings = analyze_run(run);
  ASSERT_EQ(kinds(findings), std::vector<std::string>{"cast-churn"});
  EXPECT_EQ(findings[0].evidence["bytes_cast_back"], 2048);
  EXPECT_EQ(findings[0].evidence["dtype_round_trips"], nlohmann::json::array({"bfloat16->float32->bfloat16"}));
}

TEST(Analyzers, NotAutocastNamesWhyTheOpRanAtFullPrecision) {
  RunData run;
  run.probe_ops.push_back(probe("aten::mm.out", 19, v1::PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST, {v1::DTYPE_FLOAT32}));
  run.probe_ops.push_back(probe("aten::addmm_", 21, v1::PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST, {v1::DTYPE_FLOAT32}));
  run.probe_ops.push_back(probe("demo::scale", 23, v1::PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST, {v1::DTYPE_FLOAT32}));
  run.sites.push_back(site("p.py", 25, "aten::mm", "self", v1::EXECUTION_MODE_EAGER, v1::DTYPE_FLOAT64,
                           v1::DTYPE_BFLOAT16, v1::CAST_OUTCOME_FLOAT64));
  run.sites.push_back(site("p.py", 27, "aten::mm", "self", v1::EXECUTION_MODE_EAGER, v1::DTYPE_FLOAT32,
                           v1::DTYPE_BFLOAT16));  // cast as usual: nothing to say
  const auto findings = analyze_run(run);
  ASSERT_EQ(kinds(findings), std::vector<std::string>(4, "not-autocast"));
  std::map<uint32_t, std::string> why;
  for (const auto& f : findings) why[f.sites[0].line] = f.evidence["reason"];
  EXPECT_EQ(why[19], "an out= variant");
  EXPECT_EQ(why[21], "an in-place variant");
  EXPECT_EQ(why[23], "a custom op no autocast policy lists");
  EXPECT_EQ(why[25], "given float64 inputs, which autocast never casts");
}

// An in-place op on bfloat16 tensors ran uncast, but not at full precision:
// the summary must not say it did.
TEST(Analyzers, NotAutocastSaysFullPrecisionOnlyWhenItWas) {
  RunData run;
  run.probe_ops.push_back(probe("aten::addmm_", 21, v1::PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST, {v1::DTYPE_BFLOAT16}));
  run.probe_ops.back().output_dtypes = {v1::DTYPE_BFLOAT16};
  run.probe_ops.push_back(probe("aten::mm.out", 19, v1::PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST, {v1::DTYPE_FLOAT32}));
  std::map<uint32_t, std::string> summary;
  for (const auto& f : analyze_run(run)) summary[f.sites[0].line] = f.summary;
  EXPECT_EQ(summary[21].find("full precision"), std::string::npos) << summary[21];
  EXPECT_NE(summary[21].find("ran without autocast's casts (in bfloat16)"), std::string::npos) << summary[21];
  EXPECT_NE(summary[19].find("ran at full precision (float32)"), std::string::npos) << summary[19];
}

TEST(Analyzers, FindingsNameTheRanksThatRanTheirLines) {
  RunData run;
  run.agents.resize(3);
  run.agents[0].rank = -1;  // torchrun's own process
  run.agents[1].rank = 0;
  run.agents[2].rank = 1;
  SiteRow both = site("p.py", 10, "aten::linear", "weight", v1::EXECUTION_MODE_EAGER, v1::DTYPE_FLOAT32, v1::DTYPE_BFLOAT16);
  both.stale_hits = 3;
  both.ranks = {0, 1};
  SiteRow one = site("p.py", 20, "aten::linear", "weight", v1::EXECUTION_MODE_EAGER, v1::DTYPE_FLOAT32, v1::DTYPE_BFLOAT16);
  one.stale_hits = 3;
  one.ranks = {1};
  run.sites = {both, one};
  std::map<uint32_t, std::vector<int32_t>> ranks;
  for (const auto& f : analyze_run(run)) ranks[f.sites.at(0).line] = f.ranks;
  EXPECT_EQ(ranks[10], (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(ranks[20], (std::vector<int32_t>{1}));
}

GpuSiteRow gpu_site(uint32_t line, uint64_t cast_ns, uint64_t compute_ns) {
  GpuSiteRow row;
  row.site = SiteRef{"train.py", line, "f", "aten::linear", ""};
  row.cast_ns = cast_ns;
  row.compute_ns = compute_ns;
  row.cast_kernels = row.compute_kernels = 10;
  return row;
}

TEST(Analyzers, CastShareWarnsFromAFifthAndTellsFromATwentieth) {
  RunData run;
  run.gpu_sites = {gpu_site(10, 250'000, 750'000),  // 25 %: warning
                   gpu_site(11, 100'000, 900'000),  // 10 %: info
                   gpu_site(12, 30'000, 970'000),   // 3 %: nothing
                   gpu_site(13, 40'000, 40'000)};   // 50 % of too little GPU time to mean much: nothing
  const std::vector<Finding> found = analyze_run(run);
  ASSERT_EQ(kinds(found), (std::vector<std::string>{"cast-share", "cast-share"}));
  EXPECT_EQ(found[0].severity, "warning");
  EXPECT_EQ(found[0].sites[0].line, 10u);
  EXPECT_EQ(found[0].summary, "casts for aten::linear took 25 % of its GPU time (0.250 ms casting, 0.750 ms computing)");
  EXPECT_EQ(found[1].severity, "info");
  EXPECT_EQ(found[1].sites[0].line, 11u);
  EXPECT_DOUBLE_EQ(found[1].evidence["cast_share"].get<double>(), 0.1);
}

GemmKernelRow gemm_kernels(uint32_t line, const char* op, const char* inputs, const char* confidence, uint64_t ns) {
  GemmKernelRow row;
  if (line > 0) row.site = SiteRef{"train.py", line, "f", op, ""};
  row.inputs = inputs;
  row.accumulate = "fp32";
  row.tensor_cores = std::string(inputs) != "fp32";
  row.confidence = confidence;
  row.kernels = 4;
  row.gpu_ns = ns;
  row.example = std::string(inputs) + "_kernel";
  return row;
}

TEST(Analyzers, Tf32MatmulAtTheOpExactOrFromKernelNamesAndForTheRunOutsideOps) {
  RunData run;
  GemmExactRow exact;
  exact.site = SiteRef{"train.py", 20, "f", "aten::mm", ""};
  exact.compute = v1::GEMM_COMPUTE_32F_FAST_TF32;
  exact.a_type = exact.b_type = exact.d_type = v1::DTYPE_FLOAT32;
  exact.ops = 3;
  exact.matmuls = 3;
  run.gemm_exact.push_back(exact);
  GemmExactRow full = exact;  // true float32: nothing to say
  full.site.line = 24;
  full.compute = v1::GEMM_COMPUTE_32F;
  run.gemm_exact.push_back(full);
  run.gemm_kernels = {gemm_kernels(20, "aten::mm", "tf32", "medium", 600'000),
                      gemm_kernels(21, "aten::conv2d", "tf32", "medium", 300'000),
                      gemm_kernels(22, "aten::linear", "bf16", "medium", 900'000),
                      gemm_kernels(23, "aten::bmm", "fp32", "medium", 100'000)};
  const std::vector<Finding> sited = analyze_run(run);
  ASSERT_EQ(kinds(sited), (std::vector<std::string>{"tf32-matmul", "tf32-matmul"}));
  EXPECT_EQ(sited[0].severity, "info");
  EXPECT_EQ(sited[0].sites[0].line, 20u);
  EXPECT_EQ(sited[0].summary,
            "aten::mm ran float32 matmuls as TF32 on tensor cores: 3 calls as cuBLASLt reported them; 4 TF32 kernels, "
            "0.600 ms on the GPU");
  EXPECT_EQ(sited[0].evidence["source"], "cublaslt+kernel_name");
  EXPECT_EQ(sited[0].evidence["confidence"], "exact");
  EXPECT_EQ(sited[0].evidence["op_calls"], 3);
  EXPECT_EQ(sited[0].evidence["gpu_ns"], 600'000);
  EXPECT_NE(sited[0].fix.find("torch.backends.cuda.matmul.allow_tf32 = False"), std::string::npos);
  EXPECT_EQ(sited[1].sites[0].line, 21u);
  EXPECT_EQ(sited[1].evidence["source"], "kernel_name");
  EXPECT_EQ(sited[1].evidence["confidence"], "medium");
  EXPECT_EQ(sited[1].evidence["example_kernel"], "tf32_kernel");
  EXPECT_EQ(sited[1].summary,
            "aten::conv2d ran float32 convolutions as TF32 on tensor cores: 4 TF32 kernels, 0.300 ms on the GPU (read "
            "from kernel names, medium confidence)");
  EXPECT_NE(sited[1].fix.find("torch.backends.cudnn.allow_tf32 = False"), std::string::npos);

  // Outside autocast ops no site is known: one finding for the run.
  run.gemm_unattributed = {gemm_kernels(0, "", "tf32", "medium", 2'000'000), gemm_kernels(0, "", "fp32", "medium", 5)};
  const std::vector<Finding> all = analyze_run(run);
  ASSERT_EQ(kinds(all), (std::vector<std::string>(3, "tf32-matmul")));
  EXPECT_TRUE(all[2].sites.empty());
  EXPECT_EQ(all[2].evidence["kernels"], 4);
  EXPECT_EQ(all[2].evidence["launched"], "outside autocast ops");
  EXPECT_EQ(all[2].id, analyze_run(run)[2].id);
  EXPECT_NE(all[2].id, all[0].id);
}

TEST(Analyzers, GemmWordsReadCublasLtComputeTypes) {
  const auto words = [](v1::GemmCompute compute, v1::DType a) {
    const GemmWords w = gemm_words(compute, a);
    return w.inputs + "/" + w.accumulate;
  };
  EXPECT_EQ(words(v1::GEMM_COMPUTE_32F_FAST_TF32, v1::DTYPE_FLOAT32), "tf32/fp32");
  EXPECT_EQ(words(v1::GEMM_COMPUTE_32F, v1::DTYPE_FLOAT32), "fp32/fp32");
  EXPECT_EQ(words(v1::GEMM_COMPUTE_32F, v1::DTYPE_BFLOAT16), "bf16/fp32");
  EXPECT_EQ(words(v1::GEMM_COMPUTE_16F, v1::DTYPE_FLOAT16), "fp16/fp16");
  EXPECT_EQ(words(v1::GEMM_COMPUTE_32F_FAST_16BF, v1::DTYPE_FLOAT32), "bf16/fp32");
  EXPECT_EQ(words(v1::GEMM_COMPUTE_OTHER, v1::DTYPE_FLOAT32), "fp32/");
  EXPECT_EQ(gemm_compute_name(v1::GEMM_COMPUTE_32F_FAST_TF32), "32f_fast_tf32");
}

// torch.compile (issue 15): the scenario of pytorch#179804. Line 30 runs
// `torch.mm(x.float(), w)` inside `autocast(enabled=False)` in a function
// compiled and called under a bfloat16 region; line 31 is a linear under
// autocast. The backward graph is traced under the forward's autocast state.
SiteRow compiling(uint32_t line, const char* op, const char* arg, v1::Phase phase, v1::DType src, v1::DType dst,
                  uint64_t first_seq, v1::CastOutcome outcome = v1::CAST_OUTCOME_CAST) {
  SiteRow row = site("m.py", line, op, arg, v1::EXECUTION_MODE_COMPILING, src, dst, outcome);
  row.count = 1;
  row.backward = phase == v1::PHASE_BACKWARD ? row.count : 0;
  row.first_seq = first_seq;
  return row;
}

SiteDtypeRow compiled_forward_op(uint32_t line, const char* op, v1::ExecutionMode mode, v1::DType output,
                                 uint64_t first_seq) {
  SiteDtypeRow row = returned(line, op, mode, output, first_seq);
  row.autocast_dtype = v1::DTYPE_BFLOAT16;
  row.probe_only = false;  // castscope's autocast kernels, not the op probe
  return row;
}

RunData compiled_with_disabled_block(bool backward_casts_at_disabled_line) {
  RunData run;
  // Line 31, under autocast: forward op and casts, and the backward's casts.
  run.site_dtypes.push_back(compiled_forward_op(31, "aten::linear", v1::EXECUTION_MODE_COMPILING, v1::DTYPE_BFLOAT16, 3));
  run.compile_decisions.push_back(
      compiling(31, "aten::linear", "weight", v1::PHASE_FORWARD, v1::DTYPE_FLOAT32, v1::DTYPE_BFLOAT16, 4));
  run.compile_decisions.push_back(
      compiling(31, "aten::mm", "self", v1::PHASE_BACKWARD, v1::DTYPE_FLOAT32, v1::DTYPE_BFLOAT16, 20));
  if (backward_casts_at_disabled_line) {  // line 30: no forward autocast op, backward casts
    run.compile_decisions.push_back(
        compiling(30, "aten::mm", "self", v1::PHASE_BACKWARD, v1::DTYPE_FLOAT32, v1::DTYPE_BFLOAT16, 12));
    run.compile_decisions.push_back(
        compiling(30, "aten::mm", "mat2", v1::PHASE_BACKWARD, v1::DTYPE_FLOAT32, v1::DTYPE_BFLOAT16, 11));
  }
  // The compiled graphs' runs: linear's weight cast, every step, in mode compiled.
  SiteRow run_time = site("m.py", 31, "aten::linear", "weight", v1::EXECUTION_MODE_COMPILED, v1::DTYPE_FLOAT32,
                          v1::DTYPE_BFLOAT16);
  run_time.role = v1::ROLE_WEIGHT;
  run.sites.push_back(run_time);
  return run;
}

TEST(Analyzers, CompiledBackwardCastingWhereTheForwardHadAutocastOffIsACompileMismatch) {
  const auto findings = analyze_run(compiled_with_disabled_block(true));
  ASSERT_EQ(kinds(findings), std::vector<std::string>{"compile-mismatch"});
  const Finding& f = findings[0];
  EXPECT_EQ(f.severity, "warning");
  ASSERT_EQ(f.sites.size(), 2u);  // (line, op, arg) of each backward cast
  EXPECT_EQ(f.sites[0].line, 30u);
  EXPECT_EQ(f.sites[0].arg, "mat2");
  EXPECT_EQ(f.sites[1].arg, "self");
  EXPECT_EQ(f.evidence["phase"], "backward");
  EXPECT_EQ(f.evidence["compiled_dtype"], "bfloat16");
  EXPECT_EQ(f.evidence["eager_dtype"], "float32");
  EXPECT_EQ(f.evidence["ops"], nlohmann::json::array({"aten::mm"}));
  EXPECT_EQ(f.evidence["casts"], 2);
  EXPECT_EQ(f.evidence["first_event_seq"], 11);
  EXPECT_NE(f.summary.find("compiled backward computes aten::mm at this line in bfloat16"), std::string::npos)
      << f.summary;
  EXPECT_NE(f.fix.find("backward_pass_autocast = \"off\""), std::string::npos) << f.fix;
}

TEST(Analyzers, CompiledBackwardFollowingAForwardUnderAutocastIsNoMismatch) {
  // backward_pass_autocast = "off": no backward casts at the disabled line.
  EXPECT_TRUE(analyze_run(compiled_with_disabled_block(false)).empty());
  // A forward autocast op at the line (any op): the backward's casts follow it by design.
  RunData run = compiled_with_disabled_block(true);
  run.site_dtypes.push_back(compiled_forward_op(30, "aten::add", v1::EXECUTION_MODE_COMPILING, v1::DTYPE_BFLOAT16, 2));
  EXPECT_TRUE(analyze_run(run).empty());
  // Backward decisions that keep float32 are no lowering.
  RunData full = compiled_with_disabled_block(false);
  full.compile_decisions.push_back(
      compiling(30, "aten::mm", "self", v1::PHASE_BACKWARD, v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT32, 12,
                v1::CAST_OUTCOME_ALREADY_TARGET));
  EXPECT_TRUE(analyze_run(full).empty());
}

TEST(Analyzers, EagerAndCompilingOutputsThatPartAreACompileMismatchPerLine) {
  RunData run;
  add_in_two_modes(run, compiled_forward_op, v1::EXECUTION_MODE_EAGER, v1::EXECUTION_MODE_COMPILING,
                   {{40, "aten::mm", v1::DTYPE_BFLOAT16, 50, v1::DTYPE_FLOAT32, 60},
                    {40, "aten::bmm", v1::DTYPE_BFLOAT16, 51, v1::DTYPE_FLOAT32, 61},
                    {41, "aten::mm", v1::DTYPE_BFLOAT16, 5, v1::DTYPE_BFLOAT16, 6}});
  const auto findings = analyze_run(run);
  ASSERT_EQ(kinds(findings), std::vector<std::string>{"compile-mismatch"});
  EXPECT_EQ(findings[0].sites.size(), 2u);
  EXPECT_EQ(findings[0].sites[0].line, 40u);
  EXPECT_EQ(findings[0].evidence["outputs_by_mode"]["eager"], nlohmann::json::array({"bfloat16"}));
  EXPECT_EQ(findings[0].evidence["outputs_by_mode"]["compiling"], nlohmann::json::array({"float32"}));
  EXPECT_EQ(findings[0].evidence["first_event_seq"], 50);

  RunData other_dtype = run;  // eager under float16, compiled under bfloat16: not the same situation
  for (auto& row : other_dtype.site_dtypes)
    if (row.mode == v1::EXECUTION_MODE_EAGER) row.autocast_dtype = v1::DTYPE_FLOAT16;
  EXPECT_TRUE(analyze_run(other_dtype).empty());
}

TEST(Analyzers, ModeMismatchLeavesCompileModesToCompileMismatch) {
  RunData run;
  run.sites.push_back(mm_at_5(v1::EXECUTION_MODE_EAGER, v1::DTYPE_FLOAT32, v1::DTYPE_FLOAT16));
  run.sites.push_back(mm_at_5(v1::EXECUTION_MODE_COMPILED, v1::DTYPE_FLOAT32, v1::DTYPE_BFLOAT16));
  run.site_dtypes.push_back(returned(5, "aten::mm", v1::EXECUTION_MODE_SCRIPT, v1::DTYPE_FLOAT16, 1));
  run.site_dtypes.push_back(returned(5, "aten::mm", v1::EXECUTION_MODE_COMPILING, v1::DTYPE_FLOAT32, 2));
  EXPECT_TRUE(analyze_run(run).empty());
}

}  // namespace
}  // namespace castscope::collector
