#include "server/src/export/chrome_trace_writer.h"

#include <cstdio>

#include "common/numerics/no_magnitude.h"

namespace castscope::collector {
namespace {

using json = nlohmann::json;

// Microseconds with the nanoseconds as the fraction.
double micros(uint64_t ns) { return static_cast<double>(ns) / 1000.0; }

// Flow ids as hex strings: viewers read string ids exactly (a number this
// large would lose digits in JavaScript).
std::string flow_id_text(uint64_t id) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(id));
  return text;
}

}  // namespace

ChromeTraceWriter::~ChromeTraceWriter() = default;

Status ChromeTraceWriter::open(const std::string& path, const std::string& run_id,
                               std::unique_ptr<ChromeTraceWriter>& out) {
  auto writer = std::unique_ptr<ChromeTraceWriter>(new ChromeTraceWriter());
  if (Status s = writer->file_.open(path); !s.ok()) return s;
  const json other = {{"castscope_run", run_id}, {"clock", "CLOCK_MONOTONIC"}};
  if (Status s = writer->file_.write("{\"displayTimeUnit\":\"ns\",\"otherData\":" + other.dump() + ",\"traceEvents\":[\n");
      !s.ok())
    return s;
  out = std::move(writer);
  return {};
}

Status ChromeTraceWriter::write(const json& event) {
  std::string text = first_event_ ? "" : ",\n";
  first_event_ = false;
  text += event.dump(-1, ' ', false, json::error_handler_t::replace);
  return file_.write(text);
}

Status ChromeTraceWriter::begin_agent(size_t index, const ExportAgent& agent) {
  const TraceLayout::Process& process = layout_.begin_agent(index, agent);
  last_op_.clear();
  last_scale_.reset();
  ++counts_.processes;
  return write({{"ph", "M"}, {"name", "process_name"}, {"pid", process.pid}, {"tid", process.pid},
                {"args", {{"name", process.name}}}});
}

Status ChromeTraceWriter::thread_tid(uint32_t thread, uint32_t& tid) {
  bool first = false;
  tid = layout_.thread_tid(thread, first);
  if (!first) return {};
  ++counts_.threads;
  return write({{"ph", "M"}, {"name", "thread_name"}, {"pid", layout_.process().pid}, {"tid", tid},
                {"args", {{"name", TraceLayout::thread_name(thread)}}}});
}

Status ChromeTraceWriter::stream_tid(uint32_t device, uint32_t stream, uint32_t& tid) {
  bool first = false;
  tid = layout_.stream_tid(device, stream, first);
  if (!first) return {};
  ++counts_.streams;
  return write({{"ph", "M"}, {"name", "thread_name"}, {"pid", layout_.process().pid}, {"tid", tid},
                {"args", {{"name", TraceLayout::stream_name(device, stream)}}}});
}

// One "s" per kernel the event launched, on its thread, where it binds to the
// op's slice: at the op's start (a cast is recorded after its copy kernel was
// launched, and viewers link "s" and "f" in time order, so the cast's own
// time could come after the kernel's start).
Status ChromeTraceWriter::launch_flows(const ExportEvent& launcher, uint32_t tid) {
  uint64_t ts = launcher.ts_ns;
  if (launcher.kind == ExportEvent::Kind::kCast)
    if (auto op = last_op_.find(launcher.thread); op != last_op_.end() && op->second.first == launcher.op_seq)
      ts = op->second.second;
  for (uint64_t kernel : launcher.launched) {
    if (Status s = write_counted({{"ph", "s"}, {"name", "launch"}, {"cat", "castscope.launch"},
                                  {"id", flow_id_text(layout_.launch_flow_id(kernel))}, {"ts", micros(ts)},
                                  {"pid", layout_.process().pid}, {"tid", tid}},
                                 counts_.launch_flows);
        !s.ok())
      return s;
  }
  return {};
}

Status ChromeTraceWriter::add(const ExportEvent& e) {
  const uint32_t pid = layout_.process().pid;
  uint32_t tid = 0;
  switch (e.kind) {
    case ExportEvent::Kind::kOp: {
      if (Status s = thread_tid(e.thread, tid); !s.ok()) return s;
      json args = {{"policy", short_name(e.policy)},     {"mode", short_name(e.mode)},
                   {"phase", short_name(e.phase)},       {"output_dtype", short_name(e.output_dtype)},
                   {"device", short_name(e.device_type)}, {"seq", e.seq}};
      if (e.location != nullptr) {
        args["location"] = location_text(e.location);
        args["function"] = e.location->function;
      }
      if (e.op_outcome == v1::OP_OUTCOME_ERROR) args["outcome"] = short_name(e.op_outcome);
      if (e.probe_reason != v1::PROBE_REASON_UNSPECIFIED) args["probe_reason"] = short_name(e.probe_reason);
      if (Status s = write_counted({{"ph", "X"}, {"name", e.name}, {"cat", "castscope.op"}, {"ts", micros(e.ts_ns)},
                                    {"dur", micros(e.duration_ns)}, {"pid", pid}, {"tid", tid},
                                    {"args", std::move(args)}},
                                   counts_.op_slices);
          !s.ok())
        return s;
      last_op_[e.thread] = {e.seq, e.ts_ns};
      return launch_flows(e, tid);
    }
    case ExportEvent::Kind::kCast: {
      if (Status s = thread_tid(e.thread, tid); !s.ok()) return s;
      json args = {{"op", e.name},
                   {"arg", arg_text(e)},
                   {"dtypes", std::string(short_name(e.src_dtype)) + "→" + std::string(short_name(e.dst_dtype))},
                   {"outcome", short_name(e.outcome)},
                   {"role", short_name(e.role)},
                   {"cache", short_name(e.cache)},
                   {"bytes", e.bytes},
                   {"shape", shape_text(e)},
                   {"policy", short_name(e.policy)},
                   {"mode", short_name(e.mode)},
                   {"phase", short_name(e.phase)},
                   {"seq", e.seq},
                   {"op_seq", e.op_seq}};
      if (e.location != nullptr) args["location"] = location_text(e.location);
      // A conversion autocast's kernel did not make (explicit, autograd's, a library's): no op of its own.
      if (e.maker != v1::CAST_MAKER_UNSPECIFIED && e.maker != v1::CAST_MAKER_AUTOCAST) args["maker"] = short_name(e.maker);
      if (!e.module.empty()) args["module"] = e.module;
      if (!e.parameter.empty()) args["parameter"] = e.parameter;
      if (Status s = write_counted({{"ph", "i"}, {"s", "t"}, {"name", cast_event_name(e)}, {"cat", "castscope.cast"},
                                    {"ts", micros(e.ts_ns)}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}},
                                   counts_.cast_instants);
          !s.ok())
        return s;
      return launch_flows(e, tid);
    }
    case ExportEvent::Kind::kCacheSample: {
      return write_counted({{"ph", "C"}, {"name", "cast cache"}, {"cat", "castscope.cache"}, {"ts", micros(e.ts_ns)},
                            {"pid", pid}, {"tid", pid},
                            {"args", {{"live_bytes", e.live_bytes}, {"live_casts", e.live_casts}}}},
                           counts_.counter_samples);
    }
    case ExportEvent::Kind::kNumerics:
      return e.numerics_kind == v1::NumericsSummary::KIND_SCALER_UPDATE ? add_scaler_update(e) : add_numerics(e);
    case ExportEvent::Kind::kKernel: {
      if (Status s = stream_tid(e.gpu_device, e.stream, tid); !s.ok()) return s;
      json args = {{"activity", short_name(e.activity)}, {"launched_by", short_name(e.launched_by)},
                   {"gpu_device", e.gpu_device},          {"stream", e.stream},
                   {"correlation_id", e.correlation_id},  {"seq", e.seq}};
      if (e.launch_seq != 0) args["launch_seq"] = e.launch_seq;
      if (e.bytes != 0) args["bytes"] = e.bytes;
      const std::string_view name = e.name.empty() ? short_name(e.activity) : e.name;
      if (Status s = write_counted({{"ph", "X"}, {"name", name}, {"cat", "castscope.kernel"}, {"ts", micros(e.ts_ns)},
                                    {"dur", micros(e.duration_ns)}, {"pid", pid}, {"tid", tid},
                                    {"args", std::move(args)}},
                                   counts_.kernel_slices);
          !s.ok())
        return s;
      if (!e.launch_joined) return {};
      return write({{"ph", "f"}, {"bp", "e"}, {"name", "launch"}, {"cat", "castscope.launch"},
                    {"id", flow_id_text(layout_.launch_flow_id(e.seq))}, {"ts", micros(e.ts_ns)}, {"pid", pid},
                    {"tid", tid}});
    }
  }
  return {};
}

// A numerics window that found a problem: an instant at its first check on its
// thread (viewers sort events by time; the window closed after the events it
// covers, so it comes later in the file).
Status ChromeTraceWriter::add_numerics(const ExportEvent& e) {
  uint32_t tid = 0;
  if (Status s = thread_tid(e.thread, tid); !s.ok()) return s;
  const bool cast = e.numerics_kind == v1::NumericsSummary::KIND_CAST;
  json args = {{"summary", numerics_summary(e)}, {"op", e.name}, {"values", e.values}, {"tensors", e.tensors},
               {"nonfinite", e.nonfinite}, {"window_ns", e.last_ts_ns - e.ts_ns}, {"iteration", e.iteration},
               {"mode", short_name(e.mode)}, {"phase", short_name(e.phase)}, {"seq", e.seq}};
  if (cast) {
    args["arg"] = e.arg_name;
    args["dtypes"] = std::string(short_name(e.src_dtype)) + "→" + std::string(short_name(e.dst_dtype));
    args["overflowed"] = e.overflowed;
    args["underflowed"] = e.underflowed;
    args["nan"] = e.nan;
  } else {
    args["output_dtype"] = short_name(e.src_dtype);
  }
  if (e.max_abs_log2 != kNoMagnitude) args["max_abs_log2"] = e.max_abs_log2;
  if (e.first_nonfinite_seq != 0) args["first_nonfinite_seq"] = e.first_nonfinite_seq;
  if (e.location != nullptr) args["location"] = location_text(e.location);
  return write_counted({{"ph", "i"}, {"s", "t"}, {"name", numerics_event_name(e)}, {"cat", "castscope.numerics"},
                        {"ts", micros(e.ts_ns)}, {"pid", layout_.process().pid}, {"tid", tid},
                        {"args", std::move(args)}},
                       counts_.numerics_instants);
}

// GradScaler.update(): "C" GradScaler scale on the process, and a skipped
// step as an instant on the calling thread.
Status ChromeTraceWriter::add_scaler_update(const ExportEvent& e) {
  const uint32_t pid = layout_.process().pid;
  if (Status s = write_counted({{"ph", "C"}, {"name", kScaleTrackName}, {"cat", "castscope.numerics"},
                                {"ts", micros(e.ts_ns)}, {"pid", pid}, {"tid", pid}, {"args", {{"scale", e.scale}}}},
                               counts_.scaler_samples);
      !s.ok())
    return s;
  const std::optional<double> before = last_scale_;
  last_scale_ = e.scale;
  if (!e.found_inf) return {};
  uint32_t tid = 0;
  if (Status s = thread_tid(e.thread, tid); !s.ok()) return s;
  json args = {{"scale", e.scale}, {"updates", e.tensors}, {"iteration", e.iteration}, {"seq", e.seq}};
  if (before) args["scale_before"] = *before;
  if (e.location != nullptr) args["location"] = location_text(e.location);
  return write_counted({{"ph", "i"}, {"s", "t"}, {"name", kSkippedStepName}, {"cat", "castscope.numerics"},
                        {"ts", micros(e.ts_ns)}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}},
                       counts_.skipped_steps);
}

Status ChromeTraceWriter::write_counted(const json& event, uint64_t& count) {
  if (Status s = write(event); !s.ok()) return s;
  ++count;
  return {};
}

Status ChromeTraceWriter::finish() {
  if (Status s = file_.write("\n]}\n"); !s.ok()) return s;
  return file_.commit();
}

}  // namespace castscope::collector
