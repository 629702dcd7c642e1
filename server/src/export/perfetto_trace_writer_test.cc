// The Perfetto trace of a known run, read back with the subset's generated
// classes: tracks, slices, instants, flows and counters follow the store.
// tests/integration/test_export.py reads real runs' traces with Perfetto's
// own classes.
#include "server/src/export/perfetto_trace_writer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <map>
#include <set>

#include "server/src/export/export_run.h"
#include "server/testing/exported_trace.h"

namespace castscope::collector {
namespace {

namespace pf = castscope::perfetto;

pf::Trace read_trace(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  pf::Trace trace;
  EXPECT_TRUE(trace.ParseFromIstream(&in)) << path;
  return trace;
}

// A trace read in order, as Perfetto reads it: interned names and track
// descriptors gathered as they come, each track event after its track's
// descriptor, on the writer's one packet sequence.
struct ReadBack {
  struct Event {
    uint64_t ts_ns;
    pf::TrackEvent event;
  };
  std::map<uint64_t, pf::TrackDescriptor> tracks;
  std::map<uint64_t, std::string> names;  // interned event names
  std::map<uint64_t, std::string> annotation_names;
  std::vector<Event> events;

  const std::string& name(const pf::TrackEvent& e) const { return names.at(e.name_iid()); }
  // The event's annotations as text (doubles as integers).
  std::map<std::string, std::string> args(const pf::TrackEvent& e) const {
    std::map<std::string, std::string> out;
    for (const auto& a : e.debug_annotations()) {
      std::string& value = out[annotation_names.at(a.name_iid())];
      if (a.has_string_value()) value = a.string_value();
      else if (a.has_double_value()) value = std::to_string(static_cast<int>(a.double_value()));
      else if (a.has_int_value()) value = std::to_string(a.int_value());
      else value = std::to_string(a.uint_value());
    }
    return out;
  }
};

ReadBack read_back(const std::string& path) {
  ReadBack out;
  const pf::Trace trace = read_trace(path);
  for (const pf::TracePacket& p : trace.packet()) {
    EXPECT_EQ(p.trusted_packet_sequence_id(), 1u);
    for (const auto& n : p.interned_data().event_names()) out.names[n.iid()] = n.name();
    for (const auto& n : p.interned_data().debug_annotation_names()) out.annotation_names[n.iid()] = n.name();
    if (p.has_track_descriptor()) out.tracks[p.track_descriptor().uuid()] = p.track_descriptor();
    if (!p.has_track_event()) continue;
    EXPECT_TRUE(out.tracks.count(p.track_event().track_uuid())) << "an event before its track's descriptor";
    out.events.push_back({p.timestamp(), p.track_event()});
  }
  return out;
}

TEST(PerfettoTraceWriter, TracksSlicesInstantsFlowsAndCountersFollowTheStore) {
  const std::string db = testing::store_export_run("export-perfetto-store");
  const auto [path, summary] = testing::export_trace(db, "export-perfetto", testing::TraceFormat::kPerfetto);
  const ReadBack trace = read_back(path);
  std::map<uint64_t, pf::TrackDescriptor> tracks = trace.tracks;
  std::map<std::pair<uint64_t, int>, int> events;  // (track, type) -> count
  std::vector<std::string> slice_names, instant_names;
  std::multiset<uint64_t> started_flows, ended_flows;
  std::map<uint64_t, std::vector<int64_t>> counters;
  for (const auto& [ts_ns, e] : trace.events) {
    ++events[{e.track_uuid(), e.type()}];
    for (uint64_t f : e.flow_ids()) started_flows.insert(f);
    for (uint64_t f : e.terminating_flow_ids()) ended_flows.insert(f);
    if (e.type() == pf::TrackEvent::TYPE_SLICE_BEGIN) slice_names.push_back(trace.name(e));
    if (e.type() == pf::TrackEvent::TYPE_INSTANT) {
      instant_names.push_back(trace.name(e));
      std::map<std::string, std::string> args = trace.args(e);
      if (args["seq"] == "3") {
        EXPECT_EQ(args["arg"], "weight");
        EXPECT_EQ(args["dtypes"], "float32→bfloat16");
        EXPECT_EQ(args["cache"], "hit");
        EXPECT_EQ(args["role"], "weight");
        EXPECT_EQ(args["bytes"], "2048");
        EXPECT_EQ(args["shape"], "[16, 32]");
        EXPECT_EQ(args["location"], "/src/model.py:42");
        EXPECT_EQ(args["mode"], "eager");
      }
    }
    if (e.type() == pf::TrackEvent::TYPE_COUNTER) counters[e.track_uuid()].push_back(e.counter_value());
  }

  // One process, one thread under it, two GPU streams, two counters.
  int processes = 0, threads = 0, streams = 0;
  uint64_t process_uuid = 0, thread_uuid = 0, bytes_uuid = 0, entries_uuid = 0;
  for (const auto& [uuid, t] : tracks) {
    if (t.has_process()) {
      ++processes;
      process_uuid = uuid;
      EXPECT_EQ(t.process().pid(), 4321);
      EXPECT_EQ(t.process().process_name(), "rank 0 · node1 · pid 4321");
    } else if (t.has_thread()) {
      ++threads;
      thread_uuid = uuid;
      EXPECT_EQ(t.thread().pid(), 4321);
      EXPECT_GE(t.thread().tid(), int64_t{1} << 22);
      EXPECT_EQ(t.thread().thread_name(), "castscope thread 1");
    } else if (t.has_counter()) {
      (t.counter().unit() == pf::CounterDescriptor::UNIT_SIZE_BYTES ? bytes_uuid : entries_uuid) = uuid;
      EXPECT_EQ(t.parent_uuid(), process_uuid);
    } else {
      ++streams;
      EXPECT_EQ(t.parent_uuid(), process_uuid);
      EXPECT_TRUE(t.name() == "GPU 0 stream 7" || t.name() == "GPU 0 stream 9") << t.name();
    }
  }
  EXPECT_EQ(processes, 1);
  EXPECT_EQ(threads, 1);
  EXPECT_EQ(streams, 2);
  // Two op slices, balanced, three cast instants on the thread.
  EXPECT_EQ((events[{thread_uuid, pf::TrackEvent::TYPE_SLICE_BEGIN}]), 2);
  EXPECT_EQ((events[{thread_uuid, pf::TrackEvent::TYPE_SLICE_END}]), 2);
  EXPECT_EQ((events[{thread_uuid, pf::TrackEvent::TYPE_INSTANT}]), 3);
  EXPECT_EQ(instant_names, (std::vector<std::string>{"cast float32→bfloat16", "cast float32→bfloat16",
                                                     "no cast (already_target)"}));
  std::multiset<std::string> slices(slice_names.begin(), slice_names.end());
  EXPECT_EQ(slices, (std::multiset<std::string>{"aten::linear", "aten::mm", "memset", "sm90_gemm_bf16",
                                                "void copy_kernel<float>", "void copy_kernel<float>"}));
  // Counters: one sample on each.
  EXPECT_EQ(counters[bytes_uuid], std::vector<int64_t>{4096});
  EXPECT_EQ(counters[entries_uuid], std::vector<int64_t>{3});
  // Flows: every cast to its op (3 ids, ended by the op's END), casts 2 and
  // op 1 to their kernels (2 ids, on both the launcher and the kernel).
  EXPECT_EQ(ended_flows.size(), 3u);
  std::multiset<uint64_t> launch_flows = started_flows;
  for (uint64_t f : ended_flows) launch_flows.erase(launch_flows.find(f));
  EXPECT_EQ(launch_flows.size(), 4u);
  for (uint64_t f : launch_flows) EXPECT_EQ(launch_flows.count(f), 2u);
  EXPECT_EQ(summary.perfetto.cast_flows, 3u);
  EXPECT_EQ(summary.perfetto.launch_flows, 2u);
  EXPECT_EQ(summary.perfetto.kernel_slices, 4u);
  EXPECT_EQ(summary.perfetto.casts_without_op, 0u);
  EXPECT_EQ(summary.events, 10u);
}

// GradScaler's scale on a counter track of its own (one double per update),
// its skipped step and the numerics problems as instants on the thread, with
// their counts as annotations.
TEST(PerfettoTraceWriter, ScaleCounterSkippedStepsAndNumericsProblems) {
  const std::string db = testing::store_export_run_with_numerics("export-perfetto-numerics-store");
  const auto [path, summary] = testing::export_trace(db, "export-perfetto-numerics", testing::TraceFormat::kPerfetto);
  const ReadBack trace = read_back(path);
  std::map<uint64_t, pf::TrackDescriptor> tracks = trace.tracks;
  std::map<uint64_t, std::vector<double>> scales;  // track -> values
  std::map<std::string, std::map<std::string, std::string>> numerics;  // instant name -> annotations
  std::map<std::string, uint64_t> numerics_track, numerics_ts;
  for (const auto& [ts_ns, e] : trace.events) {
    if (e.type() == pf::TrackEvent::TYPE_COUNTER && e.has_double_counter_value())
      scales[e.track_uuid()].push_back(e.double_counter_value());
    if (e.type() != pf::TrackEvent::TYPE_INSTANT) continue;
    const std::string& name = trace.name(e);
    if (name.rfind("cast float32", 0) == 0 || name.rfind("no cast", 0) == 0) continue;
    numerics[name] = trace.args(e);
    numerics_track[name] = e.track_uuid();
    numerics_ts[name] = ts_ns;
  }
  // The scale: a counter track named for it under the process, every update's value.
  ASSERT_EQ(scales.size(), 1u);
  const auto& [scale_uuid, values] = *scales.begin();
  EXPECT_EQ(tracks[scale_uuid].name(), "GradScaler scale");
  EXPECT_TRUE(tracks[scale_uuid].has_counter());
  EXPECT_TRUE(tracks[tracks[scale_uuid].parent_uuid()].has_process());
  EXPECT_EQ(values, (std::vector<double>{256, 256, 128, 128}));

  ASSERT_EQ(numerics.size(), 3u) << "a skipped step, an overflowing cast, an op's non-finite outputs";
  for (const auto& [name, track] : numerics_track) EXPECT_TRUE(tracks[track].has_thread()) << name;
  const auto& skip = numerics["GradScaler step skipped"];
  EXPECT_EQ(skip.at("scale_before"), "256");
  EXPECT_EQ(skip.at("scale"), "128");
  EXPECT_EQ(skip.at("updates"), "3");
  EXPECT_EQ(skip.at("location"), "/src/model.py:42");
  EXPECT_EQ(numerics_ts["GradScaler step skipped"], 2800u);
  const auto& cast = numerics["cast overflow float32→float16"];
  EXPECT_EQ(cast.at("summary"),
            "3 of 32 values became inf casting float32->float16 (input of aten::linear at /src/model.py:42)");
  EXPECT_EQ(cast.at("overflowed"), "3");
  EXPECT_EQ(cast.at("values"), "32");
  EXPECT_EQ(cast.at("max_abs_log2"), "16");
  EXPECT_EQ(cast.at("window_ns"), "1800");
  EXPECT_EQ(numerics_ts["cast overflow float32→float16"], 1100u);  // at the window's first check
  const auto& op = numerics["non-finite output float16"];
  EXPECT_EQ(op.at("op"), "aten::mm");
  EXPECT_EQ(op.at("nonfinite"), "5");
  EXPECT_EQ(op.at("first_nonfinite_seq"), "4");
  EXPECT_EQ(summary.perfetto.scaler_samples, 4u);
  EXPECT_EQ(summary.perfetto.skipped_steps, 1u);
  EXPECT_EQ(summary.perfetto.numerics_instants, 2u);
  EXPECT_EQ(summary.perfetto.cast_instants, 3u);  // the casts as before
}

TEST(PerfettoTraceWriter, AnOpThatWouldOutliveItsParentEndsWithIt) {
  // Recorded durations can disagree by a few ns; slices must still nest.
  const auto dir = testing::temp_dir("export-perfetto-nest");
  std::unique_ptr<PerfettoTraceWriter> writer;
  ASSERT_TRUE(PerfettoTraceWriter::open((dir / "t.pftrace").string(), writer).ok());
  ExportAgent agent;
  agent.pid = 7;
  agent.command = "job";
  ASSERT_TRUE(writer->begin_agent(0, agent).ok());
  ExportEvent outer;
  outer.kind = ExportEvent::Kind::kOp;
  outer.seq = 1;
  outer.ts_ns = 100;
  outer.duration_ns = 100;
  outer.name = "outer";
  ExportEvent inner = outer;
  inner.seq = 2;
  inner.ts_ns = 150;
  inner.duration_ns = 100;  // to 250, past the outer's 200
  inner.name = "inner";
  ExportEvent later = outer;
  later.seq = 3;
  later.ts_ns = 300;
  later.duration_ns = 10;
  later.name = "later";
  for (const ExportEvent* e : {&outer, &inner, &later}) ASSERT_TRUE(writer->add(*e).ok());
  ASSERT_TRUE(writer->end_agent().ok());
  ASSERT_TRUE(writer->finish().ok());
  std::vector<std::pair<int, uint64_t>> sequence;  // (type, ts) of slice events
  for (const auto& [ts_ns, e] : read_back((dir / "t.pftrace").string()).events) sequence.emplace_back(e.type(), ts_ns);
  using T = pf::TrackEvent;
  EXPECT_EQ(sequence, (std::vector<std::pair<int, uint64_t>>{{T::TYPE_SLICE_BEGIN, 100}, {T::TYPE_SLICE_BEGIN, 150},
                                                             {T::TYPE_SLICE_END, 200}, {T::TYPE_SLICE_END, 200},
                                                             {T::TYPE_SLICE_BEGIN, 300}, {T::TYPE_SLICE_END, 310}}));
}

TEST(PerfettoTraceWriter, AnUnwritablePathFailsBeforeReadingAndNamesIt) {
  const std::string db = testing::store_export_run("export-perfetto-unwritable");
  ExportOptions options{db, "run", "/nonexistent-castscope-dir/run.pftrace", ""};
  ExportSummary summary;
  const Status s = export_run(options, summary);
  EXPECT_EQ(s.code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(s.message().find("cannot write /nonexistent-castscope-dir/run.pftrace"), std::string::npos)
      << s.message();
  EXPECT_NE(s.message().find("does not exist"), std::string::npos) << s.message();
}

TEST(PerfettoTraceWriter, AnUnknownRunLeavesNoFile) {
  const auto dir = testing::temp_dir("export-perfetto-unknown");
  const std::string db = testing::store_export_run("export-perfetto-unknown-store");
  ExportOptions options{db, "no-such-run", (dir / "run.pftrace").string(), ""};
  ExportSummary summary;
  EXPECT_EQ(export_run(options, summary).code(), StatusCode::kNotFound);
  EXPECT_TRUE(std::filesystem::is_empty(dir));  // not even the temporary file
}

}  // namespace
}  // namespace castscope::collector
