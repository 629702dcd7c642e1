#include "server/src/export/perfetto_trace_writer.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <algorithm>

#include "common/numerics/no_magnitude.h"

namespace castscope::collector {
namespace {

namespace pf = castscope::perfetto;

// Trace.packet: field 1, length-delimited.
constexpr uint32_t kPacketTag = (1 << 3) | 2;

// Interned categories (iids), written in each sequence's first packet.
enum Category : uint64_t { kCategoryOp = 1, kCategoryCast, kCategoryKernel, kCategoryNumerics };
constexpr const char* kCategoryNames[] = {"", "castscope.op", "castscope.cast", "castscope.kernel",
                                          "castscope.numerics"};

// Interned debug annotation names (iids).
enum Annotation : int {
  kSeq = 1, kPolicy, kMode, kPhase, kDevice, kOutputDtype, kLocation, kFunction, kOutcome, kProbeReason,
  kArg, kDtypes, kRole, kCache, kBytes, kShape, kOpSeq, kActivity, kLaunchedBy, kLaunchSeq, kGpuDevice, kStream,
  kCorrelationId, kSummary, kOp, kValues, kTensors, kOverflowed, kUnderflowed, kNonfinite, kNan, kMaxAbsLog2,
  kFirstNonfiniteSeq, kWindowNs, kIteration, kScale, kScaleBefore, kUpdates, kMaker, kModule, kParameter, kAnnotationEnd
};
constexpr const char* kAnnotationNames[] = {"",      "seq",       "policy",      "mode",        "phase",
                                            "device", "output_dtype", "location", "function",    "outcome",
                                            "probe_reason", "arg", "dtypes",   "role",        "cache",
                                            "bytes", "shape",     "op_seq",      "activity",    "launched_by",
                                            "launch_seq", "gpu_device", "stream", "correlation_id",
                                            "summary", "op",      "values",      "tensors",     "overflowed",
                                            "underflowed", "nonfinite", "nan", "max_abs_log2", "first_nonfinite_seq",
                                            "window_ns", "iteration", "scale",   "scale_before", "updates",
                                            "maker", "module", "parameter"};
static_assert(std::size(kAnnotationNames) == kAnnotationEnd);

// Local track ids under an agent's uuid base; threads and streams use their
// tids (>= TraceLayout::kSyntheticIdBase), so nothing collides.
constexpr uint64_t kProcessTrack = 1, kCacheBytesTrack = 2, kCacheEntriesTrack = 3, kScaleTrack = 4;

}  // namespace

PerfettoTraceWriter::~PerfettoTraceWriter() = default;

Status PerfettoTraceWriter::open(const std::string& path, std::unique_ptr<PerfettoTraceWriter>& out) {
  auto writer = std::unique_ptr<PerfettoTraceWriter>(new PerfettoTraceWriter());
  if (Status s = writer->file_.open(path); !s.ok()) return s;
  writer->stream_ = std::make_unique<google::protobuf::io::FileOutputStream>(writer->file_.fd(), 1 << 20);
  writer->coded_ = std::make_unique<google::protobuf::io::CodedOutputStream>(writer->stream_.get());
  out = std::move(writer);
  return {};
}

pf::TracePacket& PerfettoTraceWriter::packet(uint64_t ts_ns) {
  packet_.Clear();
  packet_.set_timestamp(ts_ns);
  packet_.set_trusted_packet_sequence_id(sequence_id_);
  return packet_;
}

Status PerfettoTraceWriter::write_packet() {
  const size_t size = packet_.ByteSizeLong();
  coded_->WriteTag(kPacketTag);
  coded_->WriteVarint32(static_cast<uint32_t>(size));
  packet_.SerializeWithCachedSizes(coded_.get());
  if (coded_->HadError()) return file_.write_error(stream_->GetErrno());
  return {};
}

Status PerfettoTraceWriter::begin_agent(size_t index, const ExportAgent& agent) {
  const TraceLayout::Process& process = layout_.begin_agent(index, agent);
  sequence_id_ = static_cast<uint32_t>(index + 1);
  agent_uuid_base_ = static_cast<uint64_t>(index + 1) << 32;
  threads_.clear();
  streams_.clear();
  names_.clear();
  cast_names_.clear();
  next_name_iid_ = 1;
  has_scale_track_ = false;
  last_scale_.reset();
  ++counts_.processes;

  // The sequence's first packet: the process track, and the incremental
  // state (categories, annotation names) every later packet relies on.
  pf::TracePacket& p = packet(0);
  p.clear_timestamp();
  p.set_sequence_flags(pf::TracePacket::SEQ_INCREMENTAL_STATE_CLEARED);
  pf::InternedData& interned = *p.mutable_interned_data();
  for (uint64_t iid = kCategoryOp; iid <= kCategoryNumerics; ++iid) {
    auto& category = *interned.add_event_categories();
    category.set_iid(iid);
    category.set_name(kCategoryNames[iid]);
  }
  for (int iid = 1; iid < kAnnotationEnd; ++iid) {
    auto& name = *interned.add_debug_annotation_names();
    name.set_iid(static_cast<uint64_t>(iid));
    name.set_name(kAnnotationNames[iid]);
  }
  pf::TrackDescriptor& track = *p.mutable_track_descriptor();
  track.set_uuid(agent_uuid_base_ | kProcessTrack);
  pf::ProcessDescriptor& descriptor = *track.mutable_process();
  descriptor.set_pid(static_cast<int32_t>(process.pid));
  descriptor.set_process_name(process.name);
  if (!agent.command.empty()) descriptor.add_cmdline(agent.command);
  if (Status s = write_packet(); !s.ok()) return s;

  has_counters_ = agent.cache_samples > 0;
  if (has_counters_) {
    struct Counter {
      uint64_t local;
      const char* name;
      pf::CounterDescriptor::Unit unit;
    };
    for (const Counter& c : {Counter{kCacheBytesTrack, "cast cache bytes", pf::CounterDescriptor::UNIT_SIZE_BYTES},
                             Counter{kCacheEntriesTrack, "cast cache entries", pf::CounterDescriptor::UNIT_COUNT}}) {
      pf::TracePacket& counter = packet(0);
      counter.clear_timestamp();
      pf::TrackDescriptor& t = *counter.mutable_track_descriptor();
      t.set_uuid(agent_uuid_base_ | c.local);
      t.set_parent_uuid(agent_uuid_base_ | kProcessTrack);
      t.set_name(c.name);
      t.mutable_counter()->set_unit(c.unit);
      if (Status s = write_packet(); !s.ok()) return s;
    }
  }
  return {};
}

Status PerfettoTraceWriter::thread_track(uint32_t thread, ThreadTrack*& out) {
  auto [it, inserted] = threads_.try_emplace(thread);
  out = &it->second;
  if (!inserted) return {};
  bool first = false;
  const uint32_t tid = layout_.thread_tid(thread, first);
  out->uuid = agent_uuid_base_ | tid;
  ++counts_.threads;
  pf::TracePacket& p = packet(0);
  p.clear_timestamp();
  pf::TrackDescriptor& track = *p.mutable_track_descriptor();
  track.set_uuid(out->uuid);
  track.set_parent_uuid(agent_uuid_base_ | kProcessTrack);
  pf::ThreadDescriptor& descriptor = *track.mutable_thread();
  descriptor.set_pid(static_cast<int32_t>(layout_.process().pid));
  descriptor.set_tid(tid);
  descriptor.set_thread_name(TraceLayout::thread_name(thread));
  return write_packet();
}

Status PerfettoTraceWriter::stream_track(uint32_t device, uint32_t stream, uint64_t& uuid) {
  auto [it, inserted] = streams_.try_emplace({device, stream}, 0);
  if (!inserted) {
    uuid = it->second;
    return {};
  }
  bool first = false;
  it->second = uuid = agent_uuid_base_ | layout_.stream_tid(device, stream, first);
  ++counts_.streams;
  pf::TracePacket& p = packet(0);
  p.clear_timestamp();
  pf::TrackDescriptor& track = *p.mutable_track_descriptor();
  track.set_uuid(uuid);
  track.set_parent_uuid(agent_uuid_base_ | kProcessTrack);
  track.set_name(TraceLayout::stream_name(device, stream));
  return write_packet();
}

uint64_t PerfettoTraceWriter::name_iid(std::string_view name) {
  if (auto it = names_.find(name); it != names_.end()) return it->second;
  const uint64_t iid = next_name_iid_++;
  names_.emplace(std::string(name), iid);
  auto& interned = *packet_.mutable_interned_data()->add_event_names();
  interned.set_iid(iid);
  interned.set_name(std::string(name));
  return iid;
}

void PerfettoTraceWriter::annotate(pf::TrackEvent& event, int name, std::string_view value) {
  pf::DebugAnnotation& a = *event.add_debug_annotations();
  a.set_name_iid(static_cast<uint64_t>(name));
  a.set_string_value(std::string(value));
}

void PerfettoTraceWriter::annotate(pf::TrackEvent& event, int name, uint64_t value) {
  pf::DebugAnnotation& a = *event.add_debug_annotations();
  a.set_name_iid(static_cast<uint64_t>(name));
  a.set_uint_value(value);
}

void PerfettoTraceWriter::annotate_int(pf::TrackEvent& event, int name, int64_t value) {
  pf::DebugAnnotation& a = *event.add_debug_annotations();
  a.set_name_iid(static_cast<uint64_t>(name));
  a.set_int_value(value);
}

void PerfettoTraceWriter::annotate_double(pf::TrackEvent& event, int name, double value) {
  pf::DebugAnnotation& a = *event.add_debug_annotations();
  a.set_name_iid(static_cast<uint64_t>(name));
  a.set_double_value(value);
}

pf::TrackEvent& PerfettoTraceWriter::track_event(uint64_t ts_ns, pf::TrackEvent::Type type, uint64_t track) {
  pf::TracePacket& p = packet(ts_ns);
  p.set_sequence_flags(pf::TracePacket::SEQ_NEEDS_INCREMENTAL_STATE);  // names and categories interned
  pf::TrackEvent& event = *p.mutable_track_event();
  event.set_type(type);
  event.set_track_uuid(track);
  return event;
}

Status PerfettoTraceWriter::close_top(ThreadTrack& thread) {
  OpenOp& op = thread.stack[--thread.depth];
  pf::TrackEvent& event = track_event(op.end_ns, pf::TrackEvent::TYPE_SLICE_END, thread.uuid);
  for (uint64_t flow : op.cast_flows) event.add_terminating_flow_ids(flow);
  return write_packet();
}

Status PerfettoTraceWriter::close_ops_before(uint64_t ts_ns, bool inclusive) {
  for (auto& [index, thread] : threads_)
    while (thread.depth > 0 && (thread.stack[thread.depth - 1].end_ns < ts_ns ||
                                (inclusive && thread.stack[thread.depth - 1].end_ns == ts_ns)))
      if (Status s = close_top(thread); !s.ok()) return s;
  return {};
}

Status PerfettoTraceWriter::add(const ExportEvent& event) {
  switch (event.kind) {
    case ExportEvent::Kind::kOp: return add_op(event);
    case ExportEvent::Kind::kCast: return add_cast(event);
    case ExportEvent::Kind::kCacheSample: return add_cache_sample(event);
    case ExportEvent::Kind::kKernel: return add_kernel(event);
    case ExportEvent::Kind::kNumerics:
      return event.numerics_kind == v1::NumericsSummary::KIND_SCALER_UPDATE ? add_scaler_update(event)
                                                                             : add_numerics(event);
  }
  return {};
}

Status PerfettoTraceWriter::add_op(const ExportEvent& op) {
  // An op starting where another ended follows it (END first).
  if (Status s = close_ops_before(op.ts_ns, /*inclusive=*/true); !s.ok()) return s;
  ThreadTrack* thread = nullptr;
  if (Status s = thread_track(op.thread, thread); !s.ok()) return s;
  uint64_t end = op.ts_ns + op.duration_ns;
  if (thread->depth > 0) end = std::min(end, thread->stack[thread->depth - 1].end_ns);  // nest inside the parent

  pf::TrackEvent& e = track_event(op.ts_ns, pf::TrackEvent::TYPE_SLICE_BEGIN, thread->uuid);
  e.add_category_iids(kCategoryOp);
  e.set_name_iid(name_iid(op.name));
  annotate(e, kPolicy, short_name(op.policy));
  annotate(e, kMode, short_name(op.mode));
  annotate(e, kPhase, short_name(op.phase));
  annotate(e, kOutputDtype, short_name(op.output_dtype));
  annotate(e, kDevice, short_name(op.device_type));
  if (op.location != nullptr) {
    annotate(e, kLocation, location_text(op.location));
    annotate(e, kFunction, op.location->function);
  }
  if (op.op_outcome == v1::OP_OUTCOME_ERROR) annotate(e, kOutcome, short_name(op.op_outcome));
  if (op.probe_reason != v1::PROBE_REASON_UNSPECIFIED) annotate(e, kProbeReason, short_name(op.probe_reason));
  annotate(e, kSeq, op.seq);
  for (uint64_t kernel : op.launched) e.add_flow_ids(layout_.launch_flow_id(kernel));
  counts_.launch_flows += op.launched.size();
  if (Status s = write_packet(); !s.ok()) return s;
  ++counts_.op_slices;

  if (thread->depth == thread->stack.size()) thread->stack.emplace_back();
  OpenOp& open = thread->stack[thread->depth++];
  open.seq = op.seq;
  open.end_ns = end;
  open.cast_flows.clear();
  return {};
}

Status PerfettoTraceWriter::add_cast(const ExportEvent& cast) {
  if (Status s = close_ops_before(cast.ts_ns, /*inclusive=*/false); !s.ok()) return s;
  ThreadTrack* thread = nullptr;
  if (Status s = thread_track(cast.thread, thread); !s.ok()) return s;
  OpenOp* op = nullptr;
  for (size_t i = thread->depth; i > 0 && op == nullptr; --i)
    if (thread->stack[i - 1].seq == cast.op_seq) op = &thread->stack[i - 1];

  pf::TrackEvent& e = track_event(cast.ts_ns, pf::TrackEvent::TYPE_INSTANT, thread->uuid);
  e.add_category_iids(kCategoryCast);
  const int name_key = (cast.src_dtype << 16) | (cast.dst_dtype << 8) | cast.outcome;
  auto [it, inserted] = cast_names_.try_emplace(name_key, 0);
  if (inserted) it->second = name_iid(cast_event_name(cast));
  e.set_name_iid(it->second);
  annotate(e, kArg, arg_text(cast));
  annotate(e, kDtypes, std::string(short_name(cast.src_dtype)) + "→" + std::string(short_name(cast.dst_dtype)));
  annotate(e, kOutcome, short_name(cast.outcome));
  annotate(e, kRole, short_name(cast.role));
  annotate(e, kCache, short_name(cast.cache));
  annotate(e, kBytes, cast.bytes);
  annotate(e, kShape, shape_text(cast));
  annotate(e, kPolicy, short_name(cast.policy));
  annotate(e, kMode, short_name(cast.mode));
  annotate(e, kPhase, short_name(cast.phase));
  if (cast.location != nullptr) annotate(e, kLocation, location_text(cast.location));
  annotate(e, kSeq, cast.seq);
  annotate(e, kOpSeq, cast.op_seq);
  // A conversion autocast's kernel did not make (explicit, autograd's, a library's): no op of its own.
  if (cast.maker != v1::CAST_MAKER_UNSPECIFIED && cast.maker != v1::CAST_MAKER_AUTOCAST)
    annotate(e, kMaker, short_name(cast.maker));
  if (!cast.module.empty()) annotate(e, kModule, cast.module);
  if (!cast.parameter.empty()) annotate(e, kParameter, cast.parameter);
  if (op != nullptr) {
    const uint64_t flow = layout_.cast_flow_id(cast.seq);
    e.add_flow_ids(flow);
    op->cast_flows.push_back(flow);
    ++counts_.cast_flows;
  } else {
    ++counts_.casts_without_op;
  }
  for (uint64_t kernel : cast.launched) e.add_flow_ids(layout_.launch_flow_id(kernel));
  counts_.launch_flows += cast.launched.size();
  if (Status s = write_packet(); !s.ok()) return s;
  ++counts_.cast_instants;
  return {};
}

Status PerfettoTraceWriter::add_cache_sample(const ExportEvent& sample) {
  if (Status s = close_ops_before(sample.ts_ns, /*inclusive=*/false); !s.ok()) return s;
  if (!has_counters_) return {};  // agents.cache_samples said none: nothing to draw them on
  for (const auto& [local, value] : {std::pair{kCacheBytesTrack, sample.live_bytes},
                                     std::pair{kCacheEntriesTrack, sample.live_casts}}) {
    pf::TracePacket& p = packet(sample.ts_ns);
    pf::TrackEvent& e = *p.mutable_track_event();
    e.set_type(pf::TrackEvent::TYPE_COUNTER);
    e.set_track_uuid(agent_uuid_base_ | local);
    e.set_counter_value(static_cast<int64_t>(value));
    if (Status s = write_packet(); !s.ok()) return s;
  }
  ++counts_.counter_samples;
  return {};
}

Status PerfettoTraceWriter::add_kernel(const ExportEvent& kernel) {
  if (Status s = close_ops_before(kernel.ts_ns, /*inclusive=*/false); !s.ok()) return s;
  uint64_t track = 0;
  if (Status s = stream_track(kernel.gpu_device, kernel.stream, track); !s.ok()) return s;
  pf::TrackEvent& e = track_event(kernel.ts_ns, pf::TrackEvent::TYPE_SLICE_BEGIN, track);
  e.add_category_iids(kCategoryKernel);
  e.set_name_iid(name_iid(kernel.name.empty() ? std::string_view(short_name(kernel.activity)) : kernel.name));
  annotate(e, kActivity, short_name(kernel.activity));
  annotate(e, kLaunchedBy, short_name(kernel.launched_by));
  if (kernel.launch_seq != 0) annotate(e, kLaunchSeq, kernel.launch_seq);
  if (kernel.bytes != 0) annotate(e, kBytes, kernel.bytes);
  annotate(e, kGpuDevice, kernel.gpu_device);
  annotate(e, kStream, kernel.stream);
  annotate(e, kCorrelationId, kernel.correlation_id);
  annotate(e, kSeq, kernel.seq);
  // Not a terminating id: Perfetto links the two events of a flow in time
  // order, and a cast's copy kernel can start before the cast's (later)
  // timestamp; the link is then drawn from the kernel, but it is drawn.
  if (kernel.launch_joined) e.add_flow_ids(layout_.launch_flow_id(kernel.seq));
  if (Status s = write_packet(); !s.ok()) return s;

  pf::TracePacket& end = packet(kernel.ts_ns + kernel.duration_ns);
  pf::TrackEvent& e_end = *end.mutable_track_event();
  e_end.set_type(pf::TrackEvent::TYPE_SLICE_END);
  e_end.set_track_uuid(track);
  if (Status s = write_packet(); !s.ok()) return s;
  ++counts_.kernel_slices;
  return {};
}

// A numerics window that found a problem: an instant at its first check on
// its thread, its counts as annotations. The window closed (and took its seq)
// after the events it covers, so its packet comes later in the file than its
// time: Perfetto sorts a trace's packets by time when it reads them.
Status PerfettoTraceWriter::add_numerics(const ExportEvent& n) {
  if (Status s = close_ops_before(n.ts_ns, /*inclusive=*/false); !s.ok()) return s;
  ThreadTrack* thread = nullptr;
  if (Status s = thread_track(n.thread, thread); !s.ok()) return s;
  pf::TrackEvent& e = track_event(n.ts_ns, pf::TrackEvent::TYPE_INSTANT, thread->uuid);
  e.add_category_iids(kCategoryNumerics);
  e.set_name_iid(name_iid(numerics_event_name(n)));
  const bool cast = n.numerics_kind == v1::NumericsSummary::KIND_CAST;
  annotate(e, kSummary, numerics_summary(n));
  annotate(e, kOp, n.name);
  if (cast) {
    annotate(e, kArg, n.arg_name);
    annotate(e, kDtypes, std::string(short_name(n.src_dtype)) + "→" + std::string(short_name(n.dst_dtype)));
  } else {
    annotate(e, kOutputDtype, short_name(n.src_dtype));
  }
  annotate(e, kValues, n.values);
  annotate(e, kTensors, n.tensors);
  if (cast) {
    annotate(e, kOverflowed, n.overflowed);
    annotate(e, kUnderflowed, n.underflowed);
    annotate(e, kNan, n.nan);
  }
  annotate(e, kNonfinite, n.nonfinite);
  if (n.max_abs_log2 != kNoMagnitude) annotate_int(e, kMaxAbsLog2, n.max_abs_log2);
  if (n.first_nonfinite_seq != 0) annotate(e, kFirstNonfiniteSeq, n.first_nonfinite_seq);
  annotate(e, kWindowNs, n.last_ts_ns - n.ts_ns);
  annotate(e, kIteration, n.iteration);
  annotate(e, kMode, short_name(n.mode));
  annotate(e, kPhase, short_name(n.phase));
  if (n.location != nullptr) annotate(e, kLocation, location_text(n.location));
  annotate(e, kSeq, n.seq);
  if (Status s = write_packet(); !s.ok()) return s;
  ++counts_.numerics_instants;
  return {};
}

// GradScaler.update(): the scale on the process's counter track (made at the
// first update), and a skipped step as an instant on the calling thread.
Status PerfettoTraceWriter::add_scaler_update(const ExportEvent& update) {
  if (Status s = close_ops_before(update.ts_ns, /*inclusive=*/false); !s.ok()) return s;
  if (!has_scale_track_) {
    pf::TracePacket& d = packet(0);
    d.clear_timestamp();
    pf::TrackDescriptor& t = *d.mutable_track_descriptor();
    t.set_uuid(agent_uuid_base_ | kScaleTrack);
    t.set_parent_uuid(agent_uuid_base_ | kProcessTrack);
    t.set_name(kScaleTrackName);
    t.mutable_counter()->set_unit(pf::CounterDescriptor::UNIT_UNSPECIFIED);
    if (Status s = write_packet(); !s.ok()) return s;
    has_scale_track_ = true;
  }
  pf::TracePacket& p = packet(update.ts_ns);
  pf::TrackEvent& counter = *p.mutable_track_event();
  counter.set_type(pf::TrackEvent::TYPE_COUNTER);
  counter.set_track_uuid(agent_uuid_base_ | kScaleTrack);
  counter.set_double_counter_value(update.scale);
  if (Status s = write_packet(); !s.ok()) return s;
  ++counts_.scaler_samples;
  const std::optional<double> before = last_scale_;
  last_scale_ = update.scale;
  if (!update.found_inf) return {};

  ThreadTrack* thread = nullptr;
  if (Status s = thread_track(update.thread, thread); !s.ok()) return s;
  pf::TrackEvent& e = track_event(update.ts_ns, pf::TrackEvent::TYPE_INSTANT, thread->uuid);
  e.add_category_iids(kCategoryNumerics);
  e.set_name_iid(name_iid(kSkippedStepName));
  if (before) annotate_double(e, kScaleBefore, *before);
  annotate_double(e, kScale, update.scale);
  annotate(e, kUpdates, update.tensors);
  annotate(e, kIteration, update.iteration);
  if (update.location != nullptr) annotate(e, kLocation, location_text(update.location));
  annotate(e, kSeq, update.seq);
  if (Status s = write_packet(); !s.ok()) return s;
  ++counts_.skipped_steps;
  return {};
}

Status PerfettoTraceWriter::end_agent() {
  for (auto& [index, thread] : threads_)
    while (thread.depth > 0)
      if (Status s = close_top(thread); !s.ok()) return s;
  return {};
}

Status PerfettoTraceWriter::finish() {
  coded_.reset();  // hands its unused buffer back to the stream
  if (!stream_->Flush()) return file_.write_error(stream_->GetErrno());
  return file_.commit();
}

}  // namespace castscope::collector
