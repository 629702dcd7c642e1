#include "agent/src/encode/jsonl_writer.h"

#include <cmath>

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <span>
#include <string_view>
#include <type_traits>
#include <nlohmann/json.hpp>

#include "agent/src/encode/record_fields.h"
#include "agent/src/policy/policy.h"
#include "castscope/v1/events.wire.h"

namespace castscope {
namespace {


// Enum value names as proto/castscope/v1/events.proto spells them, generated
// with the record enums. A value the schema does not define
// (kKeepNativePolicy) reads as the enum's UNSPECIFIED.
template <typename RecordEnum>
std::string_view enum_name(RecordEnum value) {
  const std::string_view text = v1::enums::proto_name(value);
  return text.empty() ? v1::enums::proto_name(RecordEnum{}) : text;
}

std::string json_quoted(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 2);
  out += '"';
  out += text;
  out += '"';
  return out;
}

// Writes a record's fields (record_fields.h) as proto3 JSON with proto field
// names into `out`: 64-bit integers quoted, enums by name, names and
// locations inline. Hand-rolled rather than through a JSON DOM: the exporter
// renders every event, and building a DOM per event cost more than the hot
// path itself. Strings go through nlohmann's escaping.
class JsonFields {
 public:
  explicit JsonFields(std::string& out) : out_(out) {}

  template <typename T>
  void field(WireField f, T value) {
    key(f);
    scalar(f, value);
  }
  template <typename T>
  void repeated(WireField f, std::span<const T> values) {
    key(f);
    out_ += '[';
    for (size_t i = 0; i < values.size(); ++i) {
      if (i > 0) out_ += ',';
      scalar(f, values[i]);
    }
    out_ += ']';
  }
  void lines(WireField f, std::string_view text) {
    key(f);
    out_ += '[';
    bool first = true;
    record_fields::for_each_line(text, [&](std::string_view line) {
      if (!first) out_ += ',';
      first = false;
      out_ += nlohmann::json(std::string(line)).dump();
    });
    out_ += ']';
  }
  void name(WireField, WireField text_field, uint32_t, std::string_view text) { field(text_field, text); }
  void location(WireField, WireField inline_field, uint32_t, const Location& location) {
    message(inline_field, [&](JsonFields& nested) { record_fields::location_fields(location, nested); });
  }
  template <typename Fill>
  void message(WireField f, Fill fill) {
    key(f);
    out_ += '{';
    JsonFields nested(out_);
    fill(nested);
    out_ += '}';
  }

 private:
  void key(WireField f) {
    if (!first_) out_ += ',';
    first_ = false;
    out_ += '"';
    out_ += f.name;
    out_ += "\":";
  }
  template <typename T>
  void scalar(WireField f, T value) {
    if constexpr (std::is_enum_v<T>) {
      out_ += json_quoted(enum_name(value));
    } else if constexpr (std::is_same_v<T, bool>) {
      out_ += value ? "true" : "false";
    } else if constexpr (std::is_floating_point_v<T>) {
      // proto3 JSON spells the non-finite doubles as strings.
      if (std::isnan(value)) out_ += "\"NaN\"";
      else if (std::isinf(value)) out_ += value > 0 ? "\"Infinity\"" : "\"-Infinity\"";
      else out_ += nlohmann::json(static_cast<double>(value)).dump();
    } else if constexpr (std::is_convertible_v<T, std::string_view>) {
      out_ += nlohmann::json(std::string(std::string_view(value))).dump();
    } else if (f.type == WireField::kUint64 || f.type == WireField::kInt64) {
      out_ += json_quoted(std::to_string(value));
    } else {
      out_ += std::to_string(value);
    }
  }

  std::string& out_;
  bool first_ = true;
};

}  // namespace

std::string record_to_json(const Record& record, const OpMeta& op, const Location& location) {
  const record_fields::NamedParts parts = record_fields::names_of(record);
  const ModuleScope scope =
      record.kind == RecordKind::kCast && record.scope != 0 ? module_scopes().get(record.scope) : ModuleScope{};
  const record_fields::RecordNames names{.op = parts.op ? std::string_view(op.name) : std::string_view(),
                                         .arg_name = record_fields::arg_name_of(parts, op),
                                         .location = &location,
                                         .module = scope.module,
                                         .parameter = scope.parameter};
  std::string line;
  line.reserve(384);
  line += "{\"";
  line += record_fields::event_field(record).name;
  line += "\":{";
  JsonFields fields(line);
  record_fields::record_fields(record, names, fields);
  line += "}}";
  return line;
}

std::string stats_to_json(const EventLogStats& stats, const ProcessIdentity& identity, const std::string& torch_version,
                          uint64_t ts_ns, const std::string& gpu_timing) {
  std::string line = "{\"stats\":{";
  JsonFields fields(line);
  record_fields::stats_fields({stats, ts_ns, gpu_timing, identity.pid, torch_version, identity.rank,
                               identity.local_rank, identity.world_size},
                              fields);
  return line + "}}";
}

JsonlWriter::~JsonlWriter() { close(); }

std::string JsonlWriter::open(const std::string& path) {
  close();
  // Created 0600 whatever the umask: events name the user's source files,
  // lines and tensor shapes. An existing file keeps its mode.
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0600);
  if (fd < 0) return "cannot open events file " + path + ": " + std::strerror(errno);
  file_ = ::fdopen(fd, "a");
  if (file_ == nullptr) {
    const int error = errno;
    ::close(fd);
    return "cannot open events file " + path + ": " + std::strerror(error);
  }
  return "";
}

void JsonlWriter::write_line(const std::string& line) {
  if (file_ == nullptr) return;
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fputc('\n', file_);
}

void JsonlWriter::flush() {
  if (file_ != nullptr) std::fflush(file_);
}

void JsonlWriter::close() {
  if (file_ != nullptr) std::fclose(file_);
  file_ = nullptr;
}

}  // namespace castscope
