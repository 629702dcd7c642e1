#include "server/src/report/run_report.h"

#include <algorithm>
#include <chrono>
#include <map>
#include <set>

#include "common/version/castscope_version.h"
#include "server/src/analysis/aggregate_findings.h"
#include "server/src/analysis/analyzers.h"
#include "server/src/analysis/conversion_makers.h"
#include "server/src/analysis/run_data.h"
#include "server/src/report/precision_map.h"

namespace castscope::collector {
namespace {

using json = nlohmann::json;

json run_json(const RunData& run, const std::set<std::string>& devices) {
  std::set<std::string> commands, torch_versions, policy_hashes;
  std::set<int32_t> ranks;
  json agents = json::array();
  for (const auto& a : run.agents) {
    if (!a.command.empty()) commands.insert(a.command);
    if (!a.torch_version.empty()) torch_versions.insert(a.torch_version);
    if (!a.policy_hash.empty()) policy_hashes.insert(a.policy_hash);
    if (a.rank >= 0) ranks.insert(a.rank);
    agents.push_back({{"agent_id", a.agent_id}, {"pid", a.pid}, {"rank", a.rank}, {"local_rank", a.local_rank},
                      {"world_size", a.world_size}, {"hostname", a.hostname},
                      {"castscope_version", a.castscope_version}, {"torch_version", a.torch_version},
                      {"finished", a.finished},
                      {"events_recorded", a.events_recorded}, {"events_dropped", a.events_dropped},
                      {"events_stored", a.events_stored()}, {"batches", a.batches},
                      {"missing_batches", a.missing_batches()}, {"kernels", a.kernels},
                      {"gpu_timing", a.gpu_timing}, {"gpu_records_dropped", a.gpu_records_dropped},
                      {"overlay_errors", a.overlay_errors}});
  }
  return {{"run_id", run.run_id},
          {"commands", commands},
          {"torch_versions", torch_versions},
          {"policy_hashes", policy_hashes},
          {"devices", devices},
          {"ranks", ranks},
          {"agents", agents},
          {"first_seen_unix_ns", run.first_seen_unix_ns},
          {"last_seen_unix_ns", run.last_seen_unix_ns}};
}

// Does every event the agents recorded have a place: stored, or counted as
// dropped? Not when a process never finished (killed: its last counts never
// came), batches are missing, or recorded events are not in the store
// (batches still in a spool folder, or lost without a count).
json accounting_json(const RunData& run) {
  uint64_t recorded = 0, stored = 0, dropped = 0, unaccounted = 0, unfinished = 0, missing = 0;
  for (const auto& a : run.agents) {
    recorded += a.events_recorded;
    stored += a.events_stored();
    dropped += a.events_dropped;
    unaccounted += a.events_recorded > a.events_stored() ? a.events_recorded - a.events_stored() : 0;
    unfinished += a.finished ? 0 : 1;
    missing += a.missing_batches();
  }
  return {{"complete", unfinished == 0 && missing == 0 && unaccounted == 0},
          {"events_recorded", recorded},
          {"events_stored", stored},
          {"events_dropped", dropped},
          {"events_unaccounted", unaccounted},
          {"unfinished_processes", unfinished},
          {"missing_batches", missing}};
}

double cast_share(uint64_t cast_ns, uint64_t compute_ns) {
  return cast_ns + compute_ns == 0 ? 0.0 : static_cast<double>(cast_ns) / static_cast<double>(cast_ns + compute_ns);
}

json gemm_kernel_json(const GemmKernelRow& row) {
  return {{"source", "kernel_name"},   {"confidence", row.confidence}, {"inputs", row.inputs},
          {"accumulate", row.accumulate}, {"tensor_cores", row.tensor_cores}, {"kernels", row.kernels},
          {"gpu_ns", row.gpu_ns},      {"kernel", row.example},        {"why", row.why}};
}

// The precision GEMM-backed ops really ran in (docs/gpu.md, "GEMM
// precision"): per line and op, exact rows from cuBLASLt's logger and rows
// read from kernel names, the sites with the most GEMM time first (exact
// rows first within a site); and GEMM kernels launched outside autocast ops.
json gemm_precision_json(const RunData& run) {
  using Key = std::tuple<std::string, uint32_t, std::string>;
  std::map<Key, uint64_t> site_ns;
  std::map<Key, uint64_t> site_calls;
  for (const auto& row : run.gemm_kernels) site_ns[{row.site.file, row.site.line, row.site.op}] += row.gpu_ns;
  for (const auto& row : run.gemm_exact) site_calls[{row.site.file, row.site.line, row.site.op}] += row.ops;
  struct Row {
    Key key;
    bool exact;
    uint64_t gpu_ns;
    json value;
  };
  std::vector<Row> rows;
  for (const auto& row : run.gemm_exact) {
    const GemmWords words = gemm_words(row.compute, row.a_type);
    rows.push_back({{row.site.file, row.site.line, row.site.op},
                    true,
                    0,
                    {{"site", site_json(row.site)},
                     {"source", "cublaslt"},
                     {"confidence", "exact"},
                     {"inputs", words.inputs},
                     {"accumulate", words.accumulate},
                     {"compute", gemm_compute_name(row.compute)},
                     {"a_type", dtype_name(row.a_type)},
                     {"b_type", dtype_name(row.b_type)},
                     {"d_type", dtype_name(row.d_type)},
                     {"op_calls", row.ops},
                     {"matmuls", row.matmuls},
                     {"mixed_calls", row.mixed}}});
  }
  for (const auto& row : run.gemm_kernels) {
    json value = gemm_kernel_json(row);
    value["site"] = site_json(row.site);
    rows.push_back({{row.site.file, row.site.line, row.site.op}, false, row.gpu_ns, std::move(value)});
  }
  std::sort(rows.begin(), rows.end(), [&](const Row& a, const Row& b) {
    const auto busy = [&](const Key& key) {
      const auto ns = site_ns.find(key);
      const auto calls = site_calls.find(key);
      return std::make_pair(ns == site_ns.end() ? 0 : ns->second, calls == site_calls.end() ? 0 : calls->second);
    };
    if (a.key != b.key) {
      const auto busy_a = busy(a.key), busy_b = busy(b.key);
      return busy_a != busy_b ? busy_a > busy_b : a.key < b.key;
    }
    if (a.exact != b.exact) return a.exact;
    return a.gpu_ns > b.gpu_ns;
  });
  json sites = json::array();
  for (auto& row : rows) sites.push_back(std::move(row.value));
  std::vector<const GemmKernelRow*> outside;
  for (const auto& row : run.gemm_unattributed) outside.push_back(&row);
  std::sort(outside.begin(), outside.end(),
            [](const GemmKernelRow* a, const GemmKernelRow* b) { return a->gpu_ns > b->gpu_ns; });
  json outside_rows = json::array();
  for (const GemmKernelRow* row : outside) outside_rows.push_back(gemm_kernel_json(*row));
  return {{"sites", sites}, {"outside_autocast_ops", outside_rows}};
}

// GPU time by what launched it (docs/gpu.md): per source line and op, the
// time of its casts' kernels against its own compute; busiest first.
json gpu_json(const RunData& run) {
  std::vector<const GpuSiteRow*> rows;
  for (const auto& row : run.gpu_sites) rows.push_back(&row);
  std::sort(rows.begin(), rows.end(), [](const GpuSiteRow* a, const GpuSiteRow* b) {
    return a->cast_ns + a->compute_ns > b->cast_ns + b->compute_ns;
  });
  json sites = json::array();
  for (const GpuSiteRow* row : rows)
    sites.push_back({{"site", site_json(row->site)},
                     {"cast_ns", row->cast_ns},
                     {"compute_ns", row->compute_ns},
                     {"cast_share", cast_share(row->cast_ns, row->compute_ns)},
                     {"cast_kernels", row->cast_kernels},
                     {"compute_kernels", row->compute_kernels}});
  return {{"cast_ns", run.gpu_cast_ns},
          {"compute_ns", run.gpu_compute_ns},
          {"unattributed_ns", run.gpu_unattributed_ns},
          {"unjoined_ns", run.gpu_unjoined_ns},
          {"cast_share", cast_share(run.gpu_cast_ns, run.gpu_compute_ns)},
          {"sites", sites},
          {"gemm_precision", gemm_precision_json(run)}};
}

// A site's float8 scaling: [low, high] powers of two, null where none was seen.
json float8_json(const Float8Span& span) {
  const auto range = [](int32_t low, int32_t high) -> json {
    if (low > high) return nullptr;
    return json::array({low, high});
  };
  return {{"conversions", span.scaled},
          {"scale_log2", range(span.scale_log2_min, span.scale_log2_max)},
          {"amax_log2", range(span.amax_log2_min, span.amax_log2_max)},
          {"zero_amax_conversions", span.zero_amax_casts}};
}

}  // namespace

Status build_run_report(const std::string& db_path, const std::string& run_id, json& out, std::optional<int32_t> rank,
                        const ReadProgress& progress) {
  Database db;
  if (Status s = db.open(db_path, Database::Mode::kReadOnly); !s.ok()) return s;
  RunData run;
  if (Status s = load_run_data(db, run_id, run, nullptr, rank, progress); !s.ok()) return s;

  // A cache hit is a decision to cast that the cast cache served: nothing
  // was converted, so conversions and their bytes leave hits out, and the
  // cache's share is counted apart.
  uint64_t casts = 0, conversions = 0, bytes = 0, hits = 0, misses = 0, stale = 0, ops = 0, op_errors = 0, dropped = 0;
  uint64_t served = 0, served_bytes = 0, relabelled = 0;
  std::map<std::string, uint64_t> by_role, by_policy, by_pair, by_mode;
  std::set<std::string> devices;
  json sites = json::array();
  for (const auto& row : run.sites) {
    casts += row.count;
    hits += row.hits;
    misses += row.misses;
    stale += row.stale_hits;
    devices.insert(device_name(row.device));
    const bool converts = row.outcome == v1::CAST_OUTCOME_CAST;
    if (row.outcome == v1::CAST_OUTCOME_RELABELLED) relabelled += row.count;
    const uint64_t row_served = converts ? row.hits + row.stale_hits : 0;
    const uint64_t row_conversions = converts ? row.count - row_served : 0;
    if (converts) {
      conversions += row_conversions;
      bytes += row.bytes - row.served_bytes;
      served += row_served;
      served_bytes += row.served_bytes;
      if (row_conversions > 0) {
        by_role[role_name(row.role)] += row_conversions;
        by_policy[policy_name(row.policy)] += row_conversions;
        by_pair[dtype_name(row.src) + "->" + dtype_name(row.dst)] += row_conversions;
        by_mode[mode_name(row.mode)] += row_conversions;
      }
    }
    sites.push_back({{"site", site_json(row.site)}, {"mode", mode_name(row.mode)}, {"role", role_name(row.role)},
                     {"policy", policy_name(row.policy)}, {"src_dtype", dtype_name(row.src)},
                     {"dst_dtype", dtype_name(row.dst)}, {"outcome", outcome_name(row.outcome)},
                     {"count", row.count}, {"bytes", row.bytes}, {"conversions", row_conversions},
                     {"bytes_converted", converts ? row.bytes - row.served_bytes : 0},
                     {"bytes_served_from_cache", row.served_bytes}, {"cache_hits", row.hits},
                     {"stale_hits", row.stale_hits}, {"backward", row.backward}});
  }
  // Every other conversion (explicit casts, autograd's): each converted
  // (no cache serves them), counted beside autocast's, by maker.
  std::map<std::string, uint64_t> by_maker;
  for (const auto& row : run.sites)
    if (row.outcome == v1::CAST_OUTCOME_CAST && row.count > row.hits + row.stale_hits)
      by_maker[maker_label(row.maker, row.site.file)] += row.count - row.hits - row.stale_hits;
  json conversion_rows = json::array();
  for (const auto& row : run.conversions) {
    casts += row.count;
    conversions += row.count;
    bytes += row.bytes;
    devices.insert(device_name(row.device));
    const std::string maker = maker_label(row.maker, row.site.file);
    by_maker[maker] += row.count;
    by_role[role_name(row.role)] += row.count;
    by_pair[dtype_name(row.src) + "->" + dtype_name(row.dst)] += row.count;
    by_mode[mode_name(row.mode)] += row.count;
    json conversion = {{"site", site_json(row.site)}, {"maker", maker}, {"mode", mode_name(row.mode)},
                       {"role", role_name(row.role)}, {"src_dtype", dtype_name(row.src)},
                       {"dst_dtype", dtype_name(row.dst)}, {"count", row.count}, {"bytes", row.bytes},
                       {"backward", row.backward}};
    if (row.float8.scaled > 0) conversion["float8"] = float8_json(row.float8);
    conversion_rows.push_back(std::move(conversion));
  }
  json op_rows = json::array();
  for (const auto& row : run.ops) {
    ops += row.calls;
    op_errors += row.errors;
    json outputs = json::object();
    for (const auto& [dtype, n] : row.output_dtypes) outputs[dtype_name(dtype)] = n;
    op_rows.push_back({{"op", row.op}, {"policy", policy_name(row.policy)}, {"calls", row.calls},
                       {"errors", row.errors}, {"cpu_time_ns", row.cpu_time_ns}, {"output_dtypes", outputs}});
  }
  for (const auto& a : run.agents) dropped += a.events_dropped;
  // torch.compile's compile-time decisions are apart from the totals above
  // (nothing was converted); runs of its graphs are not autocast ops.
  uint64_t compile_decisions = 0;
  for (const auto& row : run.compile_decisions) compile_decisions += row.count;

  json findings = json::array();
  for (const auto& f : analyze_run(run)) findings.push_back(finding_json(f));
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  out = {{"report_version", 1},
         {"generated_unix_ns", std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()},
         {"collector_version", kCastscopeVersion},
         {"run", run_json(run, devices)},
         {"totals",
          {{"casts", casts},
           {"conversions", conversions},
           {"conversions_by_maker", by_maker},
           {"relabelled", relabelled},
           {"ops", ops},
           {"op_errors", op_errors},
           {"bytes_cast", bytes},
           {"events_dropped", dropped},
           {"accounting", accounting_json(run)},
           {"casts_by_role", by_role},
           {"casts_by_policy", by_policy},
           {"casts_by_dtype_pair", by_pair},
           {"casts_by_mode", by_mode},
           {"compile", {{"decisions", compile_decisions}, {"graph_runs", run.compiled_graph_runs}}},
           {"cache",
            {{"hits", hits}, {"misses", misses}, {"stale_hits", stale}, {"served_casts", served},
             {"bytes_served", served_bytes}, {"max_live_casts", run.max_live_casts},
             {"max_live_bytes", run.max_live_bytes}}}}},
         {"sites", sites},
         {"conversions", conversion_rows},
         {"precision_map", precision_map_json(run)},
         {"ops", op_rows},
         {"gpu", gpu_json(run)},
         {"findings", findings}};
  // Aggregate mode: say so, and which findings could not be looked for.
  json unavailable = json::array();
  if (run.aggregate)
    for (const auto& finding : kNotAvailableInAggregateMode)
      unavailable.push_back({{"id", finding.id}, {"why", finding.why}});
  out["run"]["aggregate"] = run.aggregate;
  out["findings_not_available"] = unavailable;
  if (rank) out["run"]["rank_filter"] = *rank;  // the report covers this rank's processes alone
  return Status();
}

}  // namespace castscope::collector
