#include "server/src/batch/batch_validation.h"

#include <cmath>

#include <algorithm>
#include <string>
#include <type_traits>

#include "castscope/v1/events.names.h"
#include "server/src/batch/event_limits.h"

namespace castscope::collector {

namespace v1 = castscope::v1;

namespace {

Status check_identity(const std::string& value, const char* field, const BatchLimits& limits) {
  if (value.empty()) return Status::invalid_argument(std::string(field) + " is empty");
  if (value.size() > limits.max_identity_chars)
    return Status::invalid_argument(std::string(field) + " has " + std::to_string(value.size()) +
                                    " bytes, the limit is " + std::to_string(limits.max_identity_chars));
  for (size_t i = 0; i < value.size(); ++i) {
    const auto c = static_cast<unsigned char>(value[i]);
    if (c < 0x20 || c == 0x7f)
      return Status::invalid_argument(std::string(field) + " has a control character (0x" +
                                      "0123456789abcdef"[c >> 4] + "0123456789abcdef"[c & 15] + ") at byte " +
                                      std::to_string(i));
  }
  return {};
}

std::string event_name(int index, const char* kind, uint64_t seq) {
  return "events[" + std::to_string(index) + "] (" + kind + " seq " + std::to_string(seq) + ")";
}

Status check_reference(uint32_t id, const LocalIdIndex& index, const char* field, const char* table, int event_index,
                       const char* kind, uint64_t seq) {
  if (id == 0 || index.find(id) != LocalIdIndex::kAbsent) return {};
  return Status::invalid_argument(event_name(event_index, kind, seq) + ": " + field + " " + std::to_string(id) +
                                  " is not defined in this batch's " + table);
}

Status check_seq(uint64_t seq, int event_index, const char* kind) {
  if (seq <= kMaxEventSeq) return {};
  return Status::invalid_argument(event_name(event_index, kind, seq) + ": seq is over the limit " +
                                  std::to_string(kMaxEventSeq));
}

Status check_no_inline_strings(bool has_inline, int event_index, const char* kind, uint64_t seq) {
  if (!has_inline) return {};
  return Status::invalid_argument(event_name(event_index, kind, seq) +
                                  ": inline op/arg_name/location in a batch; send them as interned ids");
}

// The store packs enum fields into kCodeBits each (event_limits.h).
// Every enum field of `message` (generated: castscope/v1/events.names.h)
// fits the store's packed codes.
template <typename Message>
Status check_codes(const Message& message, int index, const char* kind, uint64_t seq) {
  Status status;
  v1::names::for_each_enum_field(message, [&](std::string_view name, int32_t value) {
    if (status.ok() && (value < 0 || value >= kCodeLimit))
      status = Status::invalid_argument(event_name(index, kind, seq) + ": " + std::string(name) + " " +
                                        std::to_string(value) + " out of range (0.." + std::to_string(kCodeLimit - 1) +
                                        ")");
  });
  return status;
}

// What every kind's check begins with: a seq in range, enum values the store
// can pack (check_codes), and every id it has (op_id, name_id, arg_name_id,
// location_id) defined in the batch's strings or locations (0: none).
template <typename Member>
Status check_head(const Member& m, int index, const char* kind, const LocalIdIndex& strings,
                  const LocalIdIndex& locations) {
  const uint64_t seq = m.seq();
  if (Status s = check_seq(seq, index, kind); !s.ok()) return s;
  if (Status s = check_codes(m, index, kind, seq); !s.ok()) return s;
  Status status;
  auto check = [&](uint32_t id, const LocalIdIndex& table, const char* field, const char* table_name) {
    if (status.ok()) status = check_reference(id, table, field, table_name, index, kind, seq);
  };
  if constexpr (requires { m.op_id(); }) check(m.op_id(), strings, "op_id", "strings");
  if constexpr (requires { m.name_id(); }) check(m.name_id(), strings, "name_id", "strings");
  if constexpr (requires { m.arg_name_id(); }) check(m.arg_name_id(), strings, "arg_name_id", "strings");
  if constexpr (requires { m.location_id(); }) check(m.location_id(), locations, "location_id", "locations");
  if constexpr (requires { m.module_id(); }) check(m.module_id(), strings, "module_id", "strings");
  if constexpr (requires { m.parameter_id(); }) check(m.parameter_id(), strings, "parameter_id", "strings");
  return status;
}

// Tensor sizes an agent reads from a real tensor: a dimension of 2^48 or a
// byte count of 2^56 is far beyond any machine, so a value there (or a
// negative dimension) is a broken or hostile peer, not data. The store keeps
// both as signed 64-bit integers.
Status check_size(const v1::CastEvent& cast, int index, uint64_t seq) {
  if (cast.shape_size() > kMaxBatchShapeDims)
    return Status::invalid_argument(event_name(index, "cast", seq) + ": shape has " + std::to_string(cast.shape_size()) +
                                    " dims, the limit is " + std::to_string(kMaxBatchShapeDims) +
                                    " (send the first ones and shape_truncated)");
  uint64_t numel = 1;  // saturates just past kMaxBytes, where the bytes check fails anyway
  for (int d = 0; d < cast.shape_size(); ++d) {
    const int64_t dim = cast.shape(d);
    if (dim < 0 || dim >= kMaxShapeDim)
      return Status::invalid_argument(event_name(index, "cast", seq) + ": shape[" + std::to_string(d) + "] " +
                                      std::to_string(dim) + " out of range (0 <= dim < 2^48)");
    const auto n = static_cast<uint64_t>(dim);
    numel = n != 0 && numel > kMaxBytes / n ? kMaxBytes + 1 : numel * n;
  }
  if (cast.bytes() >= kMaxBytes)
    return Status::invalid_argument(event_name(index, "cast", seq) + ": bytes " + std::to_string(cast.bytes()) +
                                    " out of range (bytes < 2^56)");
  // bytes is numel times the element size (1 to 16 bytes in any dtype). A
  // truncated shape gives no numel; no dims at all is a 0-dim tensor or one
  // of symbolic size (bytes 0).
  if (cast.shape_truncated()) return {};
  const uint64_t low = cast.shape_size() == 0 ? 0 : numel;
  const uint64_t high = numel > kMaxBytes / kMaxElementBytes ? kMaxBytes : numel * kMaxElementBytes;
  if (cast.bytes() < low || cast.bytes() > high)
    return Status::invalid_argument(event_name(index, "cast", seq) + ": bytes " + std::to_string(cast.bytes()) +
                                    " does not fit its shape of " + std::to_string(numel) + " elements (expected " +
                                    std::to_string(low) + " to " + std::to_string(high) + " bytes)");
  return {};
}

// The store packs Float8Scaling's powers of two into 16 bits each
// (event_columns.h kFloat8Fields): int16's range, NUMERICS_NO_MAGNITUDE
// (-32768) included; zero_amax saturates at 65535 by the schema.
Status check_float8(const v1::CastEvent& cast, int index, uint64_t seq) {
  if (!cast.has_float8()) return {};
  const v1::Float8Scaling& f = cast.float8();
  const std::pair<const char*, int64_t> fields[] = {{"scale_log2_min", f.scale_log2_min()},
                                                    {"scale_log2_max", f.scale_log2_max()},
                                                    {"amax_log2_min", f.amax_log2_min()},
                                                    {"amax_log2_max", f.amax_log2_max()}};
  for (const auto& [name, value] : fields)
    if (value < -32768 || value > 32767)
      return Status::invalid_argument(event_name(index, "cast", seq) + ": float8." + name + " " + std::to_string(value) +
                                      " out of range (-32768..32767)");
  if (f.zero_amax() > 65535)
    return Status::invalid_argument(event_name(index, "cast", seq) + ": float8.zero_amax " +
                                    std::to_string(f.zero_amax()) + " out of range (0..65535)");
  return {};
}

// Each kind's check (an overload per kind: a kind without one does not compile).
Status check_event(const v1::AgentStats&, int, const LocalIdIndex&, const LocalIdIndex&) { return {}; }

Status check_event(const v1::CastEvent& cast, int index, const LocalIdIndex& strings, const LocalIdIndex& locations) {
  const uint64_t seq = cast.seq();
  if (Status s = check_head(cast, index, "cast", strings, locations); !s.ok()) return s;
  if (Status s = check_no_inline_strings(!cast.op().empty() || !cast.arg_name().empty() || cast.has_location() ||
                                             !cast.module().empty() || !cast.parameter().empty(),
                                         index, "cast", seq);
      !s.ok())
    return s;
  if (cast.op_id() == 0) return Status::invalid_argument(event_name(index, "cast", seq) + ": op_id is 0 (unset)");
  if (Status s = check_size(cast, index, seq); !s.ok()) return s;
  if (Status s = check_float8(cast, index, seq); !s.ok()) return s;
  // The store packs these into one column (event_limits.h).
  if (cast.thread() >= kSlotThreadLimit || cast.arg_index() >= kSlotArgIndexLimit || cast.list_index() < -1 ||
      cast.list_index() >= kSlotListIndexLimit)
    return Status::invalid_argument(event_name(index, "cast", seq) + ": thread " + std::to_string(cast.thread()) +
                                    ", arg_index " + std::to_string(cast.arg_index()) + " or list_index " +
                                    std::to_string(cast.list_index()) + " out of range (thread < " +
                                    std::to_string(kSlotThreadLimit) + ", arg_index < " +
                                    std::to_string(kSlotArgIndexLimit) + ", -1 <= list_index < " +
                                    std::to_string(kSlotListIndexLimit) + ")");
  return {};
}

// The store packs OpEvent.gemm into one integer, a byte per field
// (event_limits.h); calls saturates at 255 by the schema.
Status check_gemm(const v1::OpEvent& op, int index, uint64_t seq) {
  if (!op.has_gemm()) return {};
  const v1::GemmDescription& g = op.gemm();
  const std::pair<const char*, int64_t> fields[] = {{"compute", g.compute()},
                                                    {"a_type", g.a_type()},
                                                    {"b_type", g.b_type()},
                                                    {"d_type", g.d_type()},
                                                    {"calls", static_cast<int64_t>(g.calls())}};
  for (const auto& [name, value] : fields)
    if (value < 0 || value >= kGemmFieldLimit)
      return Status::invalid_argument(event_name(index, "op", seq) + ": gemm." + name + " " + std::to_string(value) +
                                      " out of range (0.." + std::to_string(kGemmFieldLimit - 1) + ")");
  return {};
}

Status check_event(const v1::OpEvent& op, int index, const LocalIdIndex& strings, const LocalIdIndex& locations) {
  const uint64_t seq = op.seq();
  if (Status s = check_head(op, index, "op", strings, locations); !s.ok()) return s;
  if (Status s = check_no_inline_strings(!op.op().empty() || op.has_location(), index, "op", seq); !s.ok()) return s;
  if (op.op_id() == 0) return Status::invalid_argument(event_name(index, "op", seq) + ": op_id is 0 (unset)");
  // The store packs these into one integer each (see sqlite_store.cc).
  if (op.input_dtypes_size() > 8)
    return Status::invalid_argument(event_name(index, "op", seq) + ": " + std::to_string(op.input_dtypes_size()) +
                                    " input_dtypes, the limit is 8");
  for (int dtype : op.input_dtypes())
    if (dtype < 0 || dtype > 254)
      return Status::invalid_argument(event_name(index, "op", seq) + ": input dtype " + std::to_string(dtype) +
                                      " out of range");
  for (int device : op.autocast_enabled())
    if (device < 0 || device > 62)
      return Status::invalid_argument(event_name(index, "op", seq) + ": autocast_enabled device type " +
                                      std::to_string(device) + " out of range");
  return check_gemm(op, index, seq);
}

// Aggregate mode's counters: the key as a cast's or op's, sums in the
// store's signed 64-bit range.
Status check_event(const v1::CastCounts& c, int index, const LocalIdIndex& strings, const LocalIdIndex& locations) {
  const uint64_t seq = c.seq();
  if (Status s = check_head(c, index, "cast_counts", strings, locations); !s.ok()) return s;
  if (c.op_id() == 0) return Status::invalid_argument(event_name(index, "cast_counts", seq) + ": op_id is 0 (unset)");
  if (c.count() == 0 || c.count() >= kMaxBytes || c.bytes() >= kMaxBytes || c.round_trips() > c.count() ||
      c.iteration() >= kMaxBytes || c.max_version_gap() < 0 || c.first_ts_ns() > c.last_ts_ns() ||
      c.last_ts_ns() > static_cast<uint64_t>(INT64_MAX))
    return Status::invalid_argument(event_name(index, "cast_counts", seq) +
                                    ": count, bytes, round_trips, iteration, max_version_gap or timestamps out of "
                                    "range (0 < count < 2^56, round_trips <= count, first_ts_ns <= last_ts_ns)");
  return {};
}

Status check_event(const v1::OpCounts& o, int index, const LocalIdIndex& strings, const LocalIdIndex& locations) {
  const uint64_t seq = o.seq();
  if (Status s = check_head(o, index, "op_counts", strings, locations); !s.ok()) return s;
  if (o.op_id() == 0) return Status::invalid_argument(event_name(index, "op_counts", seq) + ": op_id is 0 (unset)");
  if (o.calls() == 0 || o.calls() >= kMaxBytes || o.errors() > o.calls() || o.cpu_duration_ns() >= kMaxBytes ||
      o.iteration() >= kMaxBytes || o.first_ts_ns() > o.last_ts_ns() || o.last_ts_ns() > static_cast<uint64_t>(INT64_MAX))
    return Status::invalid_argument(event_name(index, "op_counts", seq) +
                                    ": calls, errors, cpu_duration_ns, iteration or timestamps out of range "
                                    "(0 < calls < 2^56, errors <= calls, first_ts_ns <= last_ts_ns)");
  for (int device : o.autocast_enabled())
    if (device < 0 || device > 62)
      return Status::invalid_argument(event_name(index, "op_counts", seq) + ": autocast_enabled device type " +
                                      std::to_string(device) + " out of range");
  return {};
}

// A numerics window's counts at one site, or a GradScaler update: counts in
// the store's range and consistent with each other, a finite scale.
Status check_event(const v1::NumericsSummary& n, int index, const LocalIdIndex& strings,
                   const LocalIdIndex& locations) {
  const uint64_t seq = n.seq();
  if (Status s = check_head(n, index, "numerics", strings, locations); !s.ok()) return s;
  if (n.kind() == v1::NumericsSummary::KIND_UNSPECIFIED)
    return Status::invalid_argument(event_name(index, "numerics", seq) + ": kind is unset");
  const bool update = n.kind() == v1::NumericsSummary::KIND_SCALER_UPDATE;
  if (!update && n.op_id() == 0)
    return Status::invalid_argument(event_name(index, "numerics", seq) + ": op_id is 0 (unset)");
  if (n.tensors() >= kMaxBytes || n.values() >= kMaxBytes || n.overflowed() > n.values() ||
      n.underflowed() > n.values() || n.nonfinite() > n.values() || n.nan() > n.nonfinite() ||
      n.overflowed() + n.underflowed() > n.values() || n.saturated() > n.values() || n.iteration() >= kMaxBytes ||
      n.first_ts_ns() > n.last_ts_ns() || n.last_ts_ns() > static_cast<uint64_t>(INT64_MAX) ||
      n.first_nonfinite_seq() > static_cast<uint64_t>(INT64_MAX))
    return Status::invalid_argument(event_name(index, "numerics", seq) +
                                    ": counts or timestamps out of range (tensors, values < 2^56; overflowed, "
                                    "underflowed, saturated, nonfinite <= values; nan <= nonfinite; first_ts_ns <= last_ts_ns)");
  if (n.max_abs_log2() < -32768 || n.max_abs_log2() > 32767)
    return Status::invalid_argument(event_name(index, "numerics", seq) + ": max_abs_log2 " +
                                    std::to_string(n.max_abs_log2()) + " out of range");
  if (update && !(std::isfinite(n.scale()) && n.scale() >= 0))
    return Status::invalid_argument(event_name(index, "numerics", seq) + ": scale is not a finite number >= 0");
  return {};
}

Status check_event(const v1::CacheSample& sample, int index, const LocalIdIndex& strings,
                   const LocalIdIndex& locations) {
  if (Status s = check_head(sample, index, "cache_sample", strings, locations); !s.ok()) return s;
  if (sample.live_bytes() >= kMaxBytes)
    return Status::invalid_argument(event_name(index, "cache_sample", sample.seq()) + ": live_bytes " +
                                    std::to_string(sample.live_bytes()) + " out of range (live_bytes < 2^56)");
  // Orphaned casts are some of the live ones (the store keeps signed 64-bit integers).
  if (sample.orphaned_bytes() > sample.live_bytes() || sample.orphaned_casts() > sample.live_casts())
    return Status::invalid_argument(event_name(index, "cache_sample", sample.seq()) + ": orphaned " +
                                    std::to_string(sample.orphaned_casts()) + " casts, " +
                                    std::to_string(sample.orphaned_bytes()) + " bytes exceed the live " +
                                    std::to_string(sample.live_casts()) + " casts, " +
                                    std::to_string(sample.live_bytes()) + " bytes");
  for (const auto& [name, count] : {std::pair{"live_casts", sample.live_casts()}, std::pair{"cache_hits", sample.cache_hits()},
                                    std::pair{"released_casts", sample.released_casts()}})
    if (count >= kMaxBytes)
      return Status::invalid_argument(event_name(index, "cache_sample", sample.seq()) + ": " + name + " " +
                                      std::to_string(count) + " out of range (< 2^56)");
  return {};
}

Status check_event(const v1::KernelEvent& kernel, int index, const LocalIdIndex& strings,
                   const LocalIdIndex& locations) {
  const uint64_t seq = kernel.seq();
  if (Status s = check_head(kernel, index, "kernel", strings, locations); !s.ok()) return s;
  if (Status s = check_no_inline_strings(!kernel.name().empty(), index, "kernel", seq); !s.ok()) return s;
  if (kernel.name_id() == 0) return Status::invalid_argument(event_name(index, "kernel", seq) + ": name_id is 0 (unset)");
  // A launch points at the cast or op it came from, and only then.
  if ((kernel.launched_by() == v1::LAUNCHED_BY_CAST || kernel.launched_by() == v1::LAUNCHED_BY_OP) !=
      (kernel.launch_seq() != 0))
    return Status::invalid_argument(event_name(index, "kernel", seq) + ": launch_seq " +
                                    std::to_string(kernel.launch_seq()) + " does not go with launched_by " +
                                    std::string(v1::LaunchedBy_Name(kernel.launched_by())));
  if (kernel.launch_seq() != 0)
    if (Status s = check_seq(kernel.launch_seq(), index, "kernel launch"); !s.ok()) return s;
  if (kernel.bytes() >= kMaxBytes || kernel.duration_ns() >= kMaxBytes)
    return Status::invalid_argument(event_name(index, "kernel", seq) + ": bytes or duration_ns out of range (< 2^56)");
  if (kernel.ts_ns() > static_cast<uint64_t>(INT64_MAX))
    return Status::invalid_argument(event_name(index, "kernel", seq) + ": ts_ns out of range (< 2^63)");
  return {};
}

// The event's time on the timeline; 0 for kinds it does not draw: the agent's
// stats (their ts_ns is when they were flushed) and aggregate mode's counters.
uint64_t event_time_ns(const v1::Event& event) {
  uint64_t ts = 0;
  v1::names::visit_kind(event, [&ts](const auto& member) {
    using Member = std::decay_t<decltype(member)>;
    if constexpr (std::is_same_v<Member, v1::AgentStats>)
      return;
    else if constexpr (std::is_same_v<Member, v1::NumericsSummary>)
      ts = member.first_ts_ns();  // a window's start
    else if constexpr (requires { member.ts_ns(); })
      ts = member.ts_ns();
  });
  return ts;
}

}  // namespace

BatchArena::BatchArena(size_t wire_bytes)
    : first_block_(ArenaBlockPool::for_batches().take(std::clamp<size_t>(wire_bytes * 4, 4096, 32u << 20))) {
  google::protobuf::ArenaOptions options;
  options.initial_block = first_block_.data();
  options.initial_block_size = first_block_.size();
  options.start_block_size = first_block_.size();  // for a batch that outgrows it
  options.max_block_size = 32u << 20;
  arena_ = std::make_unique<google::protobuf::Arena>(options);
}

Status decode_batch(std::string_view bytes, const BatchLimits& limits, DecodedBatch& out) {
  BatchArena arena(bytes.size());
  auto* batch = google::protobuf::Arena::CreateMessage<v1::Batch>(arena.get());
  if (bytes.size() > static_cast<size_t>(INT32_MAX) ||
      !batch->ParseFromArray(bytes.data(), static_cast<int>(bytes.size())))
    return Status::invalid_argument("not a valid castscope.v1.Batch (" + std::to_string(bytes.size()) + " bytes)");
  BatchTimeline timeline;
  if (Status s = validate_batch(*batch, limits, &timeline); !s.ok()) return s;
  out = DecodedBatch(std::move(arena), batch, timeline);
  return {};
}

Status validate_batch(const v1::Batch& batch, const BatchLimits& limits, BatchTimeline* timeline) {
  if (batch.protocol_version() != kProtocolVersion)
    return Status::failed_precondition("batch has protocol version " + std::to_string(batch.protocol_version()) +
                                       ", this collector speaks " + std::to_string(kProtocolVersion));
  if (Status s = check_identity(batch.agent().run_id(), "agent.run_id", limits); !s.ok()) return s;
  if (Status s = check_identity(batch.agent().agent_id(), "agent.agent_id", limits); !s.ok()) return s;
  if (batch.sequence() == 0) return Status::invalid_argument("batch sequence is 0; sequences start at 1");
  if (static_cast<uint32_t>(batch.events_size()) > limits.max_events)
    return Status::invalid_argument("batch has " + std::to_string(batch.events_size()) +
                                    " events, the limit is " + std::to_string(limits.max_events));
  if (static_cast<uint32_t>(batch.strings_size()) > limits.max_interned ||
      static_cast<uint32_t>(batch.locations_size()) > limits.max_interned)
    return Status::invalid_argument("batch has " + std::to_string(batch.strings_size()) + " strings and " +
                                    std::to_string(batch.locations_size()) + " locations, the limit is " +
                                    std::to_string(limits.max_interned) + " each");
  for (int i = 0; i < batch.strings_size(); ++i)
    if (batch.strings(i).text().size() > limits.max_string_bytes)
      return Status::invalid_argument("strings[" + std::to_string(i) + "] has " +
                                      std::to_string(batch.strings(i).text().size()) + " bytes, the limit is " +
                                      std::to_string(limits.max_string_bytes));
  for (int i = 0; i < batch.locations_size(); ++i) {
    const v1::SourceLocation& location = batch.locations(i).location();
    if (location.file().size() > limits.max_string_bytes || location.function().size() > limits.max_string_bytes ||
        location.source_text().size() > limits.max_string_bytes ||
        static_cast<uint32_t>(location.stack_size()) > limits.max_stack_frames ||
        static_cast<uint32_t>(location.also_consumed_at_size()) > limits.max_stack_frames)
      return Status::invalid_argument("locations[" + std::to_string(i) + "] is over the size limits (" +
                                      std::to_string(limits.max_string_bytes) + " bytes per name, " +
                                      std::to_string(limits.max_stack_frames) + " stack frames or consumer lines)");
  }

  LocalIdIndex strings;
  LocalIdIndex locations;
  size_t bad = 0;
  if (!strings.build(string_ids(batch), bad))
    return Status::invalid_argument("strings[" + std::to_string(bad) + "]: id " +
                                    std::to_string(batch.strings(static_cast<int>(bad)).id()) +
                                    (batch.strings(static_cast<int>(bad)).id() == 0 ? " is reserved (ids start at 1)"
                                                                                   : " is defined twice"));
  if (!locations.build(location_ids(batch), bad))
    return Status::invalid_argument("locations[" + std::to_string(bad) + "]: id " +
                                    std::to_string(batch.locations(static_cast<int>(bad)).id()) +
                                    (batch.locations(static_cast<int>(bad)).id() == 0
                                         ? " is reserved (ids start at 1)"
                                         : " is defined twice"));

  for (int i = 0; i < batch.events_size(); ++i) {
    const v1::Event& event = batch.events(i);
    Status status;
    if (!v1::names::visit_kind(event, [&](const auto& member) { status = check_event(member, i, strings, locations); }))
      status = Status::invalid_argument("events[" + std::to_string(i) + "] has no kind set");
    if (!status.ok()) return status;
    if (timeline != nullptr) {
      if (const uint64_t ts = event_time_ns(event); ts != 0) {
        ++timeline->events;
        timeline->max_ts_ns = std::max(timeline->max_ts_ns, ts);
      }
      if (event.kind_case() == v1::Event::kCast) ++timeline->casts;
    }
  }
  return {};
}

bool LocalIdIndex::build(const std::vector<uint32_t>& ids, size_t& bad_position) {
  dense_.clear();
  sorted_.clear();
  uint32_t max_id = 0;
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] == 0) {
      bad_position = i;
      return false;
    }
    max_id = std::max(max_id, ids[i]);
  }
  // Agents number their ids 1, 2, 3...: a table indexed by id is then the
  // cheapest lookup. Sparse ids (any peer may send them) fall back to sorting.
  is_dense_ = max_id <= 4 * ids.size() + 1024;
  if (is_dense_) {
    dense_.assign(static_cast<size_t>(max_id) + 1, kAbsent);
    for (size_t i = 0; i < ids.size(); ++i) {
      if (dense_[ids[i]] != kAbsent) {
        bad_position = i;
        return false;
      }
      dense_[ids[i]] = static_cast<int32_t>(i);
    }
    return true;
  }
  sorted_.reserve(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) sorted_.emplace_back(ids[i], static_cast<int32_t>(i));
  std::sort(sorted_.begin(), sorted_.end());
  for (size_t i = 1; i < sorted_.size(); ++i)
    if (sorted_[i].first == sorted_[i - 1].first) {
      bad_position = static_cast<size_t>(std::max(sorted_[i].second, sorted_[i - 1].second));
      return false;
    }
  return true;
}

int32_t LocalIdIndex::find(uint32_t id) const {
  if (is_dense_) return id < dense_.size() ? dense_[id] : kAbsent;
  auto it = std::lower_bound(sorted_.begin(), sorted_.end(), std::make_pair(id, INT32_MIN));
  return it != sorted_.end() && it->first == id ? it->second : kAbsent;
}

std::vector<uint32_t> string_ids(const v1::Batch& batch) {
  std::vector<uint32_t> ids;
  ids.reserve(static_cast<size_t>(batch.strings_size()));
  for (const auto& entry : batch.strings()) ids.push_back(entry.id());
  return ids;
}

std::vector<uint32_t> location_ids(const v1::Batch& batch) {
  std::vector<uint32_t> ids;
  ids.reserve(static_cast<size_t>(batch.locations_size()));
  for (const auto& entry : batch.locations()) ids.push_back(entry.id());
  return ids;
}

}  // namespace castscope::collector
