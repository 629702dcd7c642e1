// The Chrome trace of a known run, parsed back: the format's rules (every
// event has ph, pid, tid; ts in µs; X has dur; i has s; M names processes
// and threads) and counts that follow the store.
#include "server/src/export/chrome_trace_writer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>

#include "server/src/export/export_run.h"
#include "server/testing/exported_trace.h"

namespace castscope::collector {
namespace {

using json = nlohmann::json;

TEST(ChromeTraceWriter, EventsFollowTheFormatAndTheStore) {
  const std::string db = testing::store_export_run("export-chrome-store");
  const auto [path, summary] = testing::export_trace(db, "export-chrome", testing::TraceFormat::kChrome);
  std::ifstream in(path);
  const json trace = json::parse(in);
  EXPECT_EQ(trace["displayTimeUnit"], "ns");
  EXPECT_EQ(trace["otherData"]["castscope_run"], "run");
  std::map<std::string, int> phases;
  std::map<uint32_t, std::string> thread_names;
  std::map<std::string, int> flow_ends;  // id -> +1 per s, +10 per f
  for (const json& e : trace["traceEvents"]) {
    ASSERT_TRUE(e.contains("ph") && e.contains("pid") && e.contains("tid")) << e.dump();
    const std::string ph = e["ph"];
    ++phases[ph];
    EXPECT_EQ(e["pid"], 4321);
    if (ph == "M") {
      if (e["name"] == "process_name") {
        EXPECT_EQ(e["args"]["name"], "rank 0 · node1 · pid 4321");
      }
      if (e["name"] == "thread_name") thread_names[e["tid"]] = e["args"]["name"];
      continue;
    }
    ASSERT_TRUE(e["ts"].is_number()) << e.dump();
    if (ph == "X") {
      ASSERT_TRUE(e["dur"].is_number()) << e.dump();
    }
    if (ph == "i") {
      EXPECT_EQ(e["s"], "t");
    }
    if (ph == "s" || ph == "f") flow_ends[e["id"]] += ph == "s" ? 1 : 10;
    if (ph == "f") {
      EXPECT_EQ(e["bp"], "e");
    }
    if (ph == "X" && e["name"] == "aten::linear") {
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1.0);  // 1000 ns
      EXPECT_DOUBLE_EQ(e["dur"].get<double>(), 0.5);
      EXPECT_EQ(e["args"]["location"], "/src/model.py:42");
      EXPECT_EQ(e["args"]["policy"], "lower_precision_fp");
      EXPECT_EQ(thread_names[e["tid"]], "castscope thread 1");
    }
    if (ph == "i" && e["args"]["seq"] == 3) {
      EXPECT_EQ(e["name"], "cast float32→bfloat16");
      EXPECT_EQ(e["args"]["arg"], "weight");
      EXPECT_EQ(e["args"]["cache"], "hit");
      EXPECT_DOUBLE_EQ(e["ts"].get<double>(), 1.2);
    }
    if (ph == "C") {
      EXPECT_EQ(e["args"]["live_bytes"], 4096);
      EXPECT_EQ(e["args"]["live_casts"], 3);
    }
    if (ph == "X" && e["name"] == "memset") {
      EXPECT_EQ(thread_names[e["tid"]], "GPU 0 stream 7");
    }
  }
  EXPECT_EQ(phases["M"], 1 + 1 + 2);  // the process, its thread, two streams
  EXPECT_EQ(phases["X"], 2 + 4);      // ops, GPU activities
  EXPECT_EQ(phases["i"], 3);
  EXPECT_EQ(phases["C"], 1);
  // Launch flows: cast 2 to kernel 7, op 1 to kernel 8, each started and ended once.
  ASSERT_EQ(flow_ends.size(), 2u);
  for (const auto& [id, ends] : flow_ends) EXPECT_EQ(ends, 11) << id;
  EXPECT_EQ(summary.chrome.launch_flows, 2u);
}

// GradScaler's scale as "C" samples, its skipped step and the numerics
// problems as thread instants with their counts in args.
TEST(ChromeTraceWriter, ScaleSamplesSkippedStepsAndNumericsProblems) {
  const std::string db = testing::store_export_run_with_numerics("export-chrome-numerics-store");
  const auto [path, summary] = testing::export_trace(db, "export-chrome-numerics", testing::TraceFormat::kChrome);
  std::ifstream in(path);
  const json trace = json::parse(in);
  std::map<uint32_t, std::string> thread_names;
  std::vector<double> scales;
  std::map<std::string, json> numerics;
  for (const json& e : trace["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") thread_names[e["tid"]] = e["args"]["name"];
    if (e["ph"] == "C" && e["name"] == "GradScaler scale") {
      EXPECT_EQ(e["tid"], e["pid"]);
      scales.push_back(e["args"]["scale"]);
    }
    if (e["ph"] == "i" && e["cat"] == "castscope.numerics") {
      EXPECT_EQ(e["s"], "t");
      EXPECT_EQ(thread_names[e["tid"]], "castscope thread 1");
      numerics[e["name"]] = e;
    }
  }
  EXPECT_EQ(scales, (std::vector<double>{256, 256, 128, 128}));
  ASSERT_EQ(numerics.size(), 3u);
  const json& skip = numerics["GradScaler step skipped"];
  EXPECT_EQ(skip["args"]["scale_before"], 256.0);
  EXPECT_EQ(skip["args"]["scale"], 128.0);
  EXPECT_DOUBLE_EQ(skip["ts"].get<double>(), 2.8);
  const json& cast = numerics["cast overflow float32→float16"];
  EXPECT_EQ(cast["args"]["summary"],
            "3 of 32 values became inf casting float32->float16 (input of aten::linear at /src/model.py:42)");
  EXPECT_EQ(cast["args"]["overflowed"], 3);
  EXPECT_EQ(cast["args"]["arg"], "input");
  EXPECT_DOUBLE_EQ(cast["ts"].get<double>(), 1.1);
  const json& op = numerics["non-finite output float16"];
  EXPECT_EQ(op["args"]["nonfinite"], 5);
  EXPECT_EQ(op["args"]["first_nonfinite_seq"], 4);
  EXPECT_FALSE(op["args"].contains("arg"));
  EXPECT_EQ(summary.chrome.scaler_samples, 4u);
  EXPECT_EQ(summary.chrome.skipped_steps, 1u);
  EXPECT_EQ(summary.chrome.numerics_instants, 2u);
}

}  // namespace
}  // namespace castscope::collector
