// The report of a run stored from known batches: totals, sites and a finding
// follow from what was sent. Real torch jobs' reports are checked in
// tests/integration/test_findings.py.
#include "server/src/report/run_report.h"

#include <gtest/gtest.h>


#include <algorithm>
#include <memory>
#include <optional>
#include <set>
#include <tuple>
#include <vector>

#include "common/version/castscope_version.h"
#include "server/testing/older_stores.h"
#include "server/testing/test_batches.h"

namespace castscope::collector {
namespace {

using json = nlohmann::json;
using testing::add;
using testing::add_strings;
using testing::make_batch;
using testing::stored_run;
using testing::temp_dir;

// Two batches of one agent, as make_batch makes them (3 casts each: two at
// /src/model.py:42, one with no location; every cast a stale cache hit of
// 4096 bytes, fp32 -> fp16, weight, eager; one probe-window op and one cache
// sample), plus one autocast op per batch.
// Each stored as received at 1000 * sequence ns; none a duplicate (stored_run checks).
std::string store_run() {
  std::vector<v1::Batch> batches;
  for (uint64_t sequence = 1; sequence <= 2; ++sequence) {
    v1::Batch& batch = batches.emplace_back(make_batch("run", "agent", sequence, sequence * 100));
    batch.mutable_agent()->set_castscope_version("9.8.7");
    add<v1::specs::OpEvent>(batch, {.seq = sequence * 100 + 50, .policy = v1::CAST_POLICY_LOWER_PRECISION_FP,
                                    .output_dtype = v1::DTYPE_FLOAT16, .cpu_duration_ns = 1000,
                                    .outcome = v1::OP_OUTCOME_OK, .op_id = 1, .location_id = 1});
  }
  return stored_run("report", batches);
}

// Stores `batch`, the run's only batch, in a new store and returns the
// run's report.
json stored_report(const std::string& name, const v1::Batch& batch) {
  const std::string db = stored_run(name, {batch});
  json report;
  const Status status = build_run_report(db, "run", report);
  EXPECT_TRUE(status.ok()) << status.message();
  return report;
}

const json* site_at(const json& report, const std::string& file, uint32_t line) {
  for (const json& row : report["sites"])
    if (row["site"]["file"] == file && row["site"]["line"] == line) return &row;
  return nullptr;
}

TEST(RunReport, TotalsSitesAndFindingsFollowTheStoredEvents) {
  const std::string db = store_run();
  json report;
  const Status status = build_run_report(db, "run", report);
  ASSERT_TRUE(status.ok()) << status.message();

  const json& totals = report["totals"];
  EXPECT_EQ(totals["casts"], 6);
  // Every cast was a stale cache hit: served by the cache, nothing converted.
  EXPECT_EQ(totals["conversions"], 0);
  EXPECT_EQ(totals["bytes_cast"], 0);
  EXPECT_EQ(totals["cache"]["served_casts"], 6);
  EXPECT_EQ(totals["cache"]["bytes_served"], 6 * 4096);
  EXPECT_EQ(totals["ops"], 2);  // the probe-window ops are kept out of the op table
  EXPECT_EQ(totals["op_errors"], 0);
  EXPECT_EQ(totals["events_dropped"], 2);  // cumulative: the latest batch's count
  EXPECT_EQ(totals["casts_by_role"], json::object());  // conversions only
  EXPECT_EQ(totals["casts_by_dtype_pair"], json::object());
  EXPECT_EQ(totals["casts_by_mode"], json::object());
  EXPECT_EQ(totals["cache"]["hits"], 0);
  EXPECT_EQ(totals["cache"]["stale_hits"], 6);
  EXPECT_EQ(totals["cache"]["max_live_casts"], 4);
  EXPECT_EQ(totals["cache"]["max_live_bytes"], 5);

  const json& run = report["run"];
  EXPECT_EQ(run["run_id"], "run");
  EXPECT_EQ(run["devices"], (json{"cuda"}));
  ASSERT_EQ(run["agents"].size(), 1u);
  EXPECT_EQ(run["agents"][0]["pid"], 1234);
  EXPECT_EQ(run["agents"][0]["batches"], 2);
  EXPECT_EQ(run["agents"][0]["missing_batches"], 0);
  EXPECT_EQ(run["agents"][0]["castscope_version"], "9.8.7");  // the agent's, as its identity said
  EXPECT_EQ(report["collector_version"], kCastscopeVersion);

  // Two sites: the same (location, op, arg) in both batches is one row.
  ASSERT_EQ(report["sites"].size(), 2u);
  const json* model = site_at(report, "/src/model.py", 42);
  ASSERT_NE(model, nullptr) << report["sites"].dump(2);
  EXPECT_EQ((*model)["count"], 4);
  EXPECT_EQ((*model)["bytes"], 4 * 4096);
  EXPECT_EQ((*model)["stale_hits"], 4);
  EXPECT_EQ((*model)["site"]["op"], "aten::linear");
  EXPECT_EQ((*model)["site"]["arg"], "weight");
  EXPECT_EQ((*model)["src_dtype"], "float32");
  EXPECT_EQ((*model)["dst_dtype"], "float16");
  const json* unlocated = site_at(report, "", 0);
  ASSERT_NE(unlocated, nullptr);
  EXPECT_EQ((*unlocated)["count"], 2);

  ASSERT_EQ(report["ops"].size(), 1u);
  EXPECT_EQ(report["ops"][0]["op"], "aten::linear");
  EXPECT_EQ(report["ops"][0]["calls"], 2);
  EXPECT_EQ(report["ops"][0]["cpu_time_ns"], 2000);

  // Stale cache hits: critical, at the site, with how old the copy was (9 - -3).
  const auto& findings = report["findings"];
  const auto stale = std::find_if(findings.begin(), findings.end(), [](const json& f) {
    return f["kind"] == "stale-cache-hit" && f["sites"][0]["file"] == "/src/model.py";
  });
  ASSERT_NE(stale, findings.end()) << findings.dump(2);
  EXPECT_EQ((*stale)["severity"], "critical");
  EXPECT_EQ((*stale)["sites"][0]["line"], 42);
  EXPECT_EQ((*stale)["evidence"]["stale_hits"], 4);
  EXPECT_EQ((*stale)["evidence"]["max_version_gap"], 12);
}

TEST(RunReport, UnknownRunIsNotFound) {
  const std::string db = store_run();
  json report;
  const Status status = build_run_report(db, "other", report);
  EXPECT_EQ(status.code(), StatusCode::kNotFound);
  EXPECT_EQ(status.message(), "no run \"other\" in " + db);
}

// One batch of make_batch's events plus GPU kernels: one launched by the op
// (seq 50), one by a cast that is not in the store (seq 99), one by nothing.
TEST(RunReport, GpuTimeJoinsKernelsToTheirLaunchesAndCountsWhatItCannotJoin) {
  v1::Batch batch = make_batch("run", "agent", 1);
  add<v1::specs::OpEvent>(batch, {.seq = 50, .policy = v1::CAST_POLICY_LOWER_PRECISION_FP,
                                  .outcome = v1::OP_OUTCOME_OK, .op_id = 1, .location_id = 1});
  struct Launch {
    uint64_t seq, launch_seq, ns;
    v1::LaunchedBy by;
  };
  for (const Launch& l : {Launch{60, 50, 7000, v1::LAUNCHED_BY_OP}, Launch{61, 99, 3000, v1::LAUNCHED_BY_CAST},
                          Launch{62, 0, 500, v1::LAUNCHED_BY_NONE}})
    add<v1::specs::KernelEvent>(batch, {.seq = l.seq, .ts_ns = 1, .duration_ns = l.ns,
                                        .activity = v1::GPU_ACTIVITY_KERNEL, .launched_by = l.by,
                                        .launch_seq = l.launch_seq, .name_id = 1});
  const json report = stored_report("report-gpu", batch);
  const json& gpu = report["gpu"];
  EXPECT_EQ(gpu["compute_ns"], 7000);
  EXPECT_EQ(gpu["cast_ns"], 0);
  EXPECT_EQ(gpu["unjoined_ns"], 3000);
  EXPECT_EQ(gpu["unattributed_ns"], 500);
  ASSERT_EQ(gpu["sites"].size(), 1u);
  EXPECT_EQ(gpu["sites"][0]["compute_kernels"], 1);
  EXPECT_EQ(report["run"]["agents"][0]["kernels"], 3);
}

// GEMM precision from stand-in data with kernel names an H100 ran
// (server/src/analysis/kernel_precision_test.cc): ops with and without cuBLASLt's
// description, their kernels, and GEMM kernels launched outside autocast ops.
TEST(RunReport, GemmPrecisionPerSiteExactAndFromKernelNamesWithTheTf32Findings) {
  v1::Batch batch = make_batch("run", "agent", 1);
  const char* const kNames[] = {
      "aten::mm",
      "aten::conv2d",
      "nvjet_sm90_tst_48x64_64x15_2x1_v_bz_bias_TNN",
      "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize64x64x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_"
      "cublas",
      "sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x32_stage5_warpsize2x2x1_g1_"
      "tensor16x8x8_execute_kernel__5x_cudnn",
      "void at::native::vectorized_elementwise_kernel<4, add>",
      "sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__"
      "5x_cublas",
      "memcpy DtoD",
  };
  enum : uint32_t { kMm = 10, kConv, kNvjet, kTf32Gemm, kTf32Conv, kElementwise, kFfma, kMemcpy };
  for (uint32_t id = kMm; id <= kMemcpy; ++id) add_strings(batch, id, {kNames[id - kMm]});
  struct Op {
    uint64_t seq;
    uint32_t op_id;
    v1::GemmCompute compute;
    v1::DType type;
  };
  for (const Op& o : {Op{50, 1, v1::GEMM_COMPUTE_32F, v1::DTYPE_BFLOAT16},  // aten::linear under autocast
                      Op{51, kMm, v1::GEMM_COMPUTE_32F_FAST_TF32, v1::DTYPE_FLOAT32},
                      Op{52, kMm, v1::GEMM_COMPUTE_32F_FAST_TF32, v1::DTYPE_FLOAT32},
                      Op{53, kConv, v1::GEMM_COMPUTE_UNSPECIFIED, v1::DTYPE_UNSPECIFIED}}) {  // cuDNN: no description
    std::optional<v1::specs::GemmDescription> gemm;
    if (o.compute != v1::GEMM_COMPUTE_UNSPECIFIED)
      gemm = {.compute = o.compute, .a_type = o.type, .b_type = o.type, .d_type = o.type, .calls = 1};
    add<v1::specs::OpEvent>(batch, {.seq = o.seq, .policy = v1::CAST_POLICY_LOWER_PRECISION_FP,
                                    .outcome = v1::OP_OUTCOME_OK, .op_id = o.op_id, .location_id = 1, .gemm = gemm});
  }
  struct Launch {
    uint64_t seq, launch_seq, ns;
    uint32_t name;
    v1::LaunchedBy by;
    v1::GpuActivity activity = v1::GPU_ACTIVITY_KERNEL;
  };
  for (const Launch& l : {Launch{60, 50, 7000, kNvjet, v1::LAUNCHED_BY_OP}, Launch{61, 51, 5000, kTf32Gemm, v1::LAUNCHED_BY_OP},
                          Launch{62, 52, 5000, kTf32Gemm, v1::LAUNCHED_BY_OP}, Launch{63, 53, 3000, kTf32Conv, v1::LAUNCHED_BY_OP},
                          Launch{64, 53, 100, kElementwise, v1::LAUNCHED_BY_OP}, Launch{65, 0, 2000, kFfma, v1::LAUNCHED_BY_NONE},
                          Launch{66, 0, 4000, kTf32Gemm, v1::LAUNCHED_BY_NONE},
                          Launch{67, 0, 900, kMemcpy, v1::LAUNCHED_BY_NONE, v1::GPU_ACTIVITY_MEMCPY}})
    add<v1::specs::KernelEvent>(batch, {.seq = l.seq, .ts_ns = 1, .duration_ns = l.ns, .activity = l.activity,
                                        .launched_by = l.by, .launch_seq = l.launch_seq, .name_id = l.name});
  const json report = stored_report("report-gemm", batch);
  const json& gemm = report["gpu"]["gemm_precision"];
  // Busiest site first (aten::mm, 10 us of GEMM kernels), its exact row before the kernels' reading.
  std::vector<std::string> rows;
  for (const json& row : gemm["sites"])
    rows.push_back(row["site"]["op"].get<std::string>() + " " + row["source"].get<std::string>() + " " +
                   row["confidence"].get<std::string>() + " " + row["inputs"].get<std::string>() + "/" +
                   row["accumulate"].get<std::string>());
  EXPECT_EQ(rows, (std::vector<std::string>{"aten::mm cublaslt exact tf32/fp32", "aten::mm kernel_name medium tf32/fp32",
                                            "aten::linear cublaslt exact bf16/fp32",
                                            "aten::linear kernel_name medium bf16/fp32",
                                            "aten::conv2d kernel_name medium tf32/fp32"}))
      << gemm.dump(2);
  const json& mm = gemm["sites"][0];
  EXPECT_EQ(mm["compute"], "32f_fast_tf32");
  EXPECT_EQ(mm["a_type"], "float32");
  EXPECT_EQ(mm["op_calls"], 2);
  EXPECT_EQ(mm["matmuls"], 2);
  const json& mm_kernels = gemm["sites"][1];
  EXPECT_EQ(mm_kernels["kernels"], 2);
  EXPECT_EQ(mm_kernels["gpu_ns"], 10000);
  EXPECT_EQ(mm_kernels["tensor_cores"], true);
  EXPECT_EQ(mm_kernels["kernel"], kNames[kTf32Gemm - kMm]);
  EXPECT_EQ(gemm["sites"][2]["d_type"], "bfloat16");
  // Outside autocast ops: by precision, busiest first; the memcpy is no GEMM.
  ASSERT_EQ(gemm["outside_autocast_ops"].size(), 2u) << gemm.dump(2);
  EXPECT_EQ(gemm["outside_autocast_ops"][0]["inputs"], "tf32");
  EXPECT_EQ(gemm["outside_autocast_ops"][0]["gpu_ns"], 4000);
  EXPECT_EQ(gemm["outside_autocast_ops"][1]["inputs"], "fp32");
  EXPECT_EQ(gemm["outside_autocast_ops"][1]["tensor_cores"], false);

  std::vector<std::string> tf32;
  for (const json& f : report["findings"])
    if (f["kind"] == "tf32-matmul")
      tf32.push_back(f["sites"].empty() ? "run: " + f["evidence"]["source"].get<std::string>()
                                        : f["sites"][0]["op"].get<std::string>() + ": " +
                                              f["evidence"]["source"].get<std::string>() + " " +
                                              f["evidence"]["confidence"].get<std::string>());
  std::sort(tf32.begin(), tf32.end());
  EXPECT_EQ(tf32, (std::vector<std::string>{"aten::conv2d: kernel_name medium", "aten::mm: cublaslt+kernel_name exact",
                                            "run: kernel_name"}));
}

// torch.compile (docs/events.md): compile-time decisions (COMPILING) are kept
// out of every total and every run-time finding; the compiled graphs' runs
// (COMPILED ops) are counted apart, and their casts like any run-time cast.
TEST(RunReport, CompileTimeDecisionsStayOutOfTotalsAndFindingsAndGraphRunsAreCountedApart) {
  // make_batch's three casts (stale hits, one a round trip, in backward) and
  // its probe op, all made while torch.compile traced the graph.
  v1::Batch batch = make_batch("run", "agent", 1, 1, 3);
  for (auto& event : *batch.mutable_events()) {
    if (event.has_cast()) event.mutable_cast()->set_mode(v1::EXECUTION_MODE_COMPILING);
    if (event.has_op()) event.mutable_op()->set_mode(v1::EXECUTION_MODE_COMPILING);
  }
  add_strings(batch, 10, {"compiled::forward", "compiled::backward", "aten::mm"});
  testing::add_location(batch, 2, {.kind = v1::SourceLocation::KIND_PYTHON, .file = "/src/train.py", .line = 9});
  struct Op {
    uint64_t seq;
    uint32_t op_id, location_id;
    v1::ExecutionMode mode;
    v1::Phase phase;
    bool autocast;
  };
  for (const Op& o : {Op{10, 1, 1, v1::EXECUTION_MODE_COMPILING, v1::PHASE_FORWARD, true},  // traced forward
                      Op{20, 12, 1, v1::EXECUTION_MODE_COMPILING, v1::PHASE_BACKWARD, true},  // traced backward
                      Op{30, 10, 1, v1::EXECUTION_MODE_COMPILED, v1::PHASE_FORWARD, true},
                      Op{33, 11, 2, v1::EXECUTION_MODE_COMPILED, v1::PHASE_BACKWARD, true},  // backward() in the region
                      Op{40, 10, 1, v1::EXECUTION_MODE_COMPILED, v1::PHASE_FORWARD, true},
                      Op{43, 11, 2, v1::EXECUTION_MODE_COMPILED, v1::PHASE_BACKWARD, false}}) {
    add<v1::specs::OpEvent>(batch, {.seq = o.seq,
                                    .policy = o.mode == v1::EXECUTION_MODE_COMPILING
                                                  ? v1::CAST_POLICY_LOWER_PRECISION_FP
                                                  : v1::CastPolicy{},
                                    .device_type = v1::DEVICE_TYPE_CUDA, .output_dtype = v1::DTYPE_FLOAT32,
                                    .outcome = v1::OP_OUTCOME_OK, .mode = o.mode, .phase = o.phase,
                                    .autocast_enabled = o.autocast ? std::vector{v1::DEVICE_TYPE_CUDA}
                                                                   : std::vector<v1::DeviceType>{},
                                    .op_id = o.op_id, .location_id = o.location_id});
    if (o.phase == v1::PHASE_FORWARD && o.mode == v1::EXECUTION_MODE_COMPILED)  // the graph's weight cast
      add<v1::specs::CastEvent>(batch, {.seq = o.seq + 1, .policy = v1::CAST_POLICY_LOWER_PRECISION_FP,
                                        .src_dtype = v1::DTYPE_FLOAT32, .dst_dtype = v1::DTYPE_BFLOAT16,
                                        .outcome = v1::CAST_OUTCOME_CAST, .bytes = 4096,
                                        .device_type = v1::DEVICE_TYPE_CUDA, .op_seq = o.seq, .role = v1::ROLE_WEIGHT,
                                        .cache = v1::CACHE_OUTCOME_NOT_CACHEABLE, .mode = v1::EXECUTION_MODE_COMPILED,
                                        .phase = v1::PHASE_FORWARD, .op_id = 1, .arg_name_id = 2, .location_id = 1});
  }
  const json report = stored_report("report-compile", batch);
  const json& totals = report["totals"];
  EXPECT_EQ(totals["casts"], 2);  // the compiled graph's two runs, not the compile's decisions
  EXPECT_EQ(totals["conversions"], 2);
  EXPECT_EQ(totals["bytes_cast"], 2 * 4096);
  EXPECT_EQ(totals["casts_by_mode"], (json{{"compiled", 2}}));
  EXPECT_EQ(totals["cache"]["stale_hits"], 0);
  EXPECT_EQ(totals["cache"]["served_casts"], 0);
  EXPECT_EQ(totals["ops"], 0);  // neither traced autocast ops nor graph runs are autocast ops run
  EXPECT_EQ(totals["compile"], (json{{"decisions", 3}, {"graph_runs", 4}}));
  ASSERT_EQ(report["sites"].size(), 1u) << report["sites"].dump(2);
  EXPECT_EQ(report["sites"][0]["mode"], "compiled");
  EXPECT_EQ(report["sites"][0]["site"]["arg"], "weight");

  // The one finding: backward() inside the autocast region, from the
  // compiled backward run with autocast on; the traced backward op, the
  // compile's stale hits and its probe op raise nothing, and its backward
  // casts follow a forward traced under autocast (no compile-mismatch).
  const json& findings = report["findings"];
  ASSERT_EQ(findings.size(), 1u) << findings.dump(2);
  EXPECT_EQ(findings[0]["kind"], "backward-under-autocast");
  EXPECT_EQ(findings[0]["sites"][0]["file"], "/src/train.py");
  EXPECT_EQ(findings[0]["sites"][0]["line"], 9);
  EXPECT_EQ(findings[0]["evidence"]["ops"], (json{{"compiled::backward", 1}}));
  EXPECT_EQ(findings[0]["summary"],
            "1 run of a compiled backward graph ran in the backward pass with autocast enabled, from "
            "/src/train.py:9 backward");
}

// make_batch's events as aggregate mode sends them: its three stale-hit casts
// as two counters (two at /src/model.py:42, one of them a round trip; one
// with no location), its probe op and its sample as they are.
v1::Batch aggregate_batch() {
  v1::Batch batch = make_batch("run", "agent", 1);
  batch.mutable_agent()->set_aggregate(true);
  v1::Batch out = batch;
  out.clear_events();
  for (const v1::Event& event : batch.events()) {
    if (event.has_op()) {
      const v1::OpEvent& op = event.op();
      v1::OpCounts& counts =
          add<v1::specs::OpCounts>(out, {.seq = op.seq(), .first_ts_ns = op.ts_ns(), .last_ts_ns = op.ts_ns(),
                                         .op_id = op.op_id(), .location_id = op.location_id(), .policy = op.policy(),
                                         .device_type = op.device_type(), .mode = op.mode(), .phase = op.phase(),
                                         .output_dtype = op.output_dtype(), .autocast_dtype = op.autocast_dtype(),
                                         .probe_reason = op.probe_reason(), .calls = 1,
                                         .cpu_duration_ns = op.cpu_duration_ns()});
      *counts.mutable_autocast_enabled() = op.autocast_enabled();
    } else if (!event.has_cast()) {
      *out.add_events() = event;
    }
  }
  for (const auto& [seq, location, count, round_trips] :
       {std::tuple<uint64_t, uint32_t, uint64_t, uint64_t>{2, 1, 2, 1}, {4, 0, 1, 0}}) {
    add<v1::specs::CastCounts>(out, {.seq = seq, .first_ts_ns = 1000, .last_ts_ns = 1002, .thread = 2, .op_id = 1,
                                     .arg_name_id = 2, .location_id = location, .arg_index = 1,
                                     .policy = v1::CAST_POLICY_LOWER_PRECISION_FP,
                                     .device_type = v1::DEVICE_TYPE_CUDA, .src_dtype = v1::DTYPE_FLOAT32,
                                     .dst_dtype = v1::DTYPE_FLOAT16, .outcome = v1::CAST_OUTCOME_CAST,
                                     .role = v1::ROLE_WEIGHT, .cache = v1::CACHE_OUTCOME_STALE_HIT,
                                     .mode = v1::EXECUTION_MODE_EAGER, .phase = v1::PHASE_BACKWARD, .count = count,
                                     .bytes = count * 4096, .max_version_gap = 12, .round_trips = round_trips});
  }
  return out;
}

TEST(RunReport, AnAggregateRunReportsWhatTheSameEventsWouldAndSaysWhatItCannotFind) {
  json full = stored_report("report-full", make_batch("run", "agent", 1));
  json aggregate = stored_report("report-aggregate", aggregate_batch());
  EXPECT_EQ(full["run"]["aggregate"], false);
  EXPECT_EQ(full["findings_not_available"], json::array());
  EXPECT_EQ(aggregate["run"]["aggregate"], true);
  std::set<std::string> unavailable;
  for (const json& f : aggregate["findings_not_available"]) unavailable.insert(f["id"].get<std::string>());
  EXPECT_EQ(unavailable, (std::set<std::string>{"cast-share", "tf32-matmul", "fp8-zero-amax"}));

  EXPECT_EQ(aggregate["sites"], full["sites"]);
  EXPECT_EQ(aggregate["ops"], full["ops"]);
  // Stored records differ (counters are fewer rows): the rest of the totals are the same.
  full["totals"].erase("accounting");
  aggregate["totals"].erase("accounting");
  EXPECT_EQ(aggregate["totals"], full["totals"]);
  EXPECT_EQ(aggregate["findings"], full["findings"]);
  EXPECT_FALSE(aggregate["findings"].empty());  // stale cache hits, from counters
}

TEST(RunReport, AStoreOfSchemaVersion12ReadsAsItIsWithNoAggregateRun) {
  const std::string db = (temp_dir("report-v12") / "store.db").string();
  ASSERT_TRUE(testing::store_batches(db, {make_batch("run", "agent", 1)}).ok());
  const Status downgraded = testing::downgrade_store(db, 12);
  ASSERT_TRUE(downgraded.ok()) << downgraded.message();
  json report;
  const Status status = build_run_report(db, "run", report);  // read-only: no upgrade
  ASSERT_TRUE(status.ok()) << status.message();
  EXPECT_EQ(report["run"]["aggregate"], false);
  EXPECT_EQ(report["totals"]["casts"], 3);
}

}  // namespace
}  // namespace castscope::collector
