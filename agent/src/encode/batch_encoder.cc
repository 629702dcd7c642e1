#include "agent/src/encode/batch_encoder.h"

#include <span>
#include <string_view>
#include <type_traits>

#include "agent/src/encode/record_fields.h"
#include "castscope/v1/events.wire.h"
#include "castscope/v1/transport.wire.h"

namespace castscope {
namespace {

// Field numbers and enum values of proto/castscope/v1/{events,transport}.proto,
// generated (docs/events.md, "The wire header"). Record enums are generated
// from the same .proto (castscope/v1/events.enums.h), so they are written as
// they are.
namespace pb = v1::wire;

constexpr uint64_t kArgNameKey = uint64_t{1} << 63;
// A scope's module and parameter names (record/module_scopes.h): keys apart from ops' and arguments'.
constexpr uint64_t kModuleKey = uint64_t{1} << 62;
constexpr uint64_t kParameterKey = uint64_t{3} << 61;

// Writes a record's fields (record_fields.h) in the wire format: each field
// by its number, packed as its .proto type says; names as ids into the
// batch's tables.
class WireFields {
 public:
  WireFields(wire::Writer& out, wire::Writer& packed) : out_(out), packed_(packed) {}

  template <typename T>
  void field(WireField f, T value) {
    if constexpr (std::is_enum_v<T> || std::is_same_v<T, bool>) {
      out_.u64(f, static_cast<uint64_t>(value));
    } else if constexpr (std::is_floating_point_v<T>) {
      out_.f64(f, value);
    } else if constexpr (std::is_convertible_v<T, std::string_view>) {
      out_.bytes(f, value);
    } else if (f.type == WireField::kSint32) {
      out_.s32(f, static_cast<int32_t>(value));
    } else if (f.type == WireField::kInt64 || f.type == WireField::kInt32) {
      out_.i64(f, static_cast<int64_t>(value));  // negative: ten-byte varint
    } else {
      out_.u64(f, static_cast<uint64_t>(value));
    }
  }
  template <typename T>
  void repeated(WireField f, std::span<const T> values) {
    if constexpr (std::is_convertible_v<const T&, std::string_view>) {
      for (const T& value : values) out_.bytes(f, value);  // strings are never packed
    } else {
      packed_.clear();
      for (const T& value : values) packed_.varint(static_cast<uint64_t>(value));
      out_.packed(f, packed_.data());
    }
  }
  void lines(WireField f, std::string_view text) {
    record_fields::for_each_line(text, [&](std::string_view line) { out_.bytes(f, line); });
  }
  void name(WireField id_field, WireField, uint32_t id, std::string_view) { out_.u64(id_field, id); }
  void location(WireField id_field, WireField, uint32_t id, const Location&) { out_.u64(id_field, id); }
  template <typename Fill>
  void message(WireField f, Fill fill) {
    wire::Writer nested;
    WireFields fields(nested, packed_);
    fill(fields);
    out_.message(f, nested.data());
  }

 private:
  wire::Writer& out_;
  wire::Writer& packed_;
};

}  // namespace

uint32_t BatchEncoder::intern_string(uint64_t key, const std::string& text) {
  auto [it, inserted] = string_ids_.try_emplace(key, static_cast<uint32_t>(string_ids_.size() + 1));
  if (inserted) {
    nested_.clear();
    nested_.u64(pb::InternedString::kId, it->second);
    nested_.bytes(pb::InternedString::kText, text);
    tables_.message(pb::Batch::kStrings, nested_.data());
  }
  return it->second;
}

void BatchEncoder::define_location(uint32_t id, const Location& location) {
  if (id == 0 || !locations_defined_.insert(id).second) return;
  wire::Writer source;
  WireFields fields(source, packed_);
  record_fields::location_fields(location, fields);
  nested_.clear();
  nested_.u64(pb::InternedLocation::kId, id);
  nested_.message(pb::InternedLocation::kLocation, source.data());
  tables_.message(pb::Batch::kLocations, nested_.data());
}

void BatchEncoder::append_event(uint32_t kind_field, const wire::Writer& message) {
  event_.clear();
  event_.message(kind_field, message.data());
  body_.message(pb::Batch::kEvents, event_.data());
  ++events_;
}

void BatchEncoder::add(const Record& record, const OpMeta& op, uint32_t location_id, const Location& location) {
  const record_fields::NamedParts parts = record_fields::names_of(record);
  record_fields::RecordNames names;
  if (parts.op) names.op_id = intern_string(record.op_id, op.name);
  if (parts.location) {
    define_location(location_id, location);
    names.location_id = location_id;
  }
  if (const std::string& arg_name = record_fields::arg_name_of(parts, op); !arg_name.empty())
    names.arg_name_id = intern_string(kArgNameKey | (uint64_t{record.op_id} << 16) | parts.arg_index, arg_name);
  names.location = &location;
  if (record.kind == RecordKind::kCast && record.scope != 0) {
    // A scope seen in this batch already: its ids, without the table's lock (names never change).
    const auto module = string_ids_.find(kModuleKey | uint64_t{record.scope});
    if (module != string_ids_.end()) {
      names.module_id = module->second;
      const auto parameter = string_ids_.find(kParameterKey | uint64_t{record.scope});
      if (parameter != string_ids_.end()) names.parameter_id = parameter->second;
    } else {
      const ModuleScope scope = module_scopes().get(record.scope);
      if (!scope.module.empty()) names.module_id = intern_string(kModuleKey | uint64_t{record.scope}, scope.module);
      if (!scope.parameter.empty())
        names.parameter_id = intern_string(kParameterKey | uint64_t{record.scope}, scope.parameter);
    }
  }
  scratch_.clear();
  WireFields fields(scratch_, packed_);
  record_fields::record_fields(record, names, fields);
  append_event(record_fields::event_field(record), scratch_);
}

void BatchEncoder::add_stats(const EventLogStats& stats, uint64_t ts_ns, const std::string& gpu_timing) {
  scratch_.clear();
  WireFields fields(scratch_, packed_);
  record_fields::stats_fields({stats, ts_ns, gpu_timing, identity_.pid, identity_.torch_version, identity_.rank,
                               identity_.local_rank, identity_.world_size},
                              fields);
  append_event(pb::Event::kStats, scratch_);
  ++stats_events_;
}

std::string BatchEncoder::finish(uint64_t sequence, uint64_t recorded_total, uint64_t dropped_total, bool final) {
  using F = pb::Batch;
  wire::Writer out;
  out.u64(F::kProtocolVersion, kProtocolVersion);
  wire::Writer identity;
  WireFields fields(identity, packed_);
  record_fields::identity_fields(identity_, fields);
  out.message(F::kAgent, identity.data());
  out.u64(F::kSequence, sequence);
  out.u64(F::kEventsDroppedTotal, dropped_total);
  out.u64(F::kEventsRecordedTotal, recorded_total);
  std::string encoded = out.take();
  encoded += tables_.data();
  encoded += body_.data();
  wire::Writer tail;
  tail.boolean(F::kFinal, final);
  encoded += tail.data();
  body_.clear();
  tables_.clear();
  string_ids_.clear();
  locations_defined_.clear();
  events_ = 0;
  stats_events_ = 0;
  return encoded;
}

}  // namespace castscope
