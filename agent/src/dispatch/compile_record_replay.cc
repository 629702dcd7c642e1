#include "agent/src/dispatch/compile_record_replay.h"

#include <nlohmann/json.hpp>

#include <cstring>
#include <stdexcept>
#include <unordered_map>

namespace castscope {

namespace {

constexpr char kHexDigits[] = "0123456789abcdef";

std::string to_hex(const Record& record) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(&record);
  std::string hex;
  hex.reserve(2 * sizeof(Record));
  for (size_t i = 0; i < sizeof(Record); ++i) {
    hex.push_back(kHexDigits[bytes[i] >> 4]);
    hex.push_back(kHexDigits[bytes[i] & 0xf]);
  }
  return hex;
}

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  return -1;
}

Record from_hex(const std::string& hex) {
  if (hex.size() != 2 * sizeof(Record))
    throw std::runtime_error("\"record\" has " + std::to_string(hex.size()) + " hex digits, not " +
                             std::to_string(2 * sizeof(Record)) + " (another agent build's?)");
  Record record;
  auto* bytes = reinterpret_cast<unsigned char*>(&record);
  for (size_t i = 0; i < sizeof(Record); ++i) {
    const int high = hex_value(hex[2 * i]), low = hex_value(hex[2 * i + 1]);
    if (high < 0 || low < 0) throw std::runtime_error("\"record\" is not lowercase hex");
    bytes[i] = static_cast<unsigned char>(high << 4 | low);
  }
  return record;
}

uint32_t& location_of(Record& record) { return record.kind == RecordKind::kOp ? record.op.location : record.cast.location; }

// `object[name]` of `type`; `shown` names it in the error (the name by default).
const nlohmann::json& member(const nlohmann::json& object, const char* name, nlohmann::json::value_t type,
                             const char* shown = nullptr) {
  const auto found = object.find(name);
  if (found == object.end() || found->type() != type)
    throw std::runtime_error(std::string("\"") + (shown != nullptr ? shown : name) + "\" is missing or of the wrong type");
  return *found;
}

// One entry back as a record of this process (header not yet set), checked.
Record parse_entry(const nlohmann::json& entry, EventLog& events, LocationTable& locations) {
  if (!entry.is_object()) throw std::runtime_error("not an object");
  Record record = from_hex(member(entry, "record", nlohmann::json::value_t::string).get<std::string>());
  if (record.kind == RecordKind::kOp) {
    if (record.op.mode != ExecutionMode::kCompiling) throw std::runtime_error("an op record not made while compiling");
  } else if (record.kind == RecordKind::kCast) {
    if (record.cast.mode != ExecutionMode::kCompiling) throw std::runtime_error("a cast record not made while compiling");
  } else {
    throw std::runtime_error("neither an op nor a cast record");
  }
  const std::string op = member(entry, "op", nlohmann::json::value_t::string).get<std::string>();
  if (op.empty()) throw std::runtime_error("\"op\" is empty");
  record.op_id = events.intern_op(op);
  if (events.op_meta(record.op_id).arg_names.empty()) {
    std::vector<std::string> names;
    for (const auto& name : member(entry, "arg_names", nlohmann::json::value_t::array)) {
      if (!name.is_string()) throw std::runtime_error("\"arg_names\" holds a non-string");
      names.push_back(name.get<std::string>());
    }
    if (!names.empty()) events.set_arg_names(record.op_id, std::move(names));
  }
  const nlohmann::json& where = member(entry, "location", nlohmann::json::value_t::object);
  uint32_t& location = location_of(record);
  location = 0;
  if (!where.empty()) {
    Location l;
    const auto kind = member(where, "kind", nlohmann::json::value_t::number_unsigned, "location.kind").get<uint64_t>();
    if (kind > static_cast<uint64_t>(LocationKind::kNone)) throw std::runtime_error("\"location.kind\" is out of range");
    l.kind = static_cast<LocationKind>(kind);
    l.file = member(where, "file", nlohmann::json::value_t::string, "location.file").get<std::string>();
    const auto line = member(where, "line", nlohmann::json::value_t::number_unsigned, "location.line").get<uint64_t>();
    if (line > UINT32_MAX) throw std::runtime_error("\"location.line\" is out of range");
    l.line = static_cast<uint32_t>(line);
    l.function = member(where, "function", nlohmann::json::value_t::string, "location.function").get<std::string>();
    l.stack = member(where, "stack", nlohmann::json::value_t::string, "location.stack").get<std::string>();
    location = locations.intern(l);
  }
  return record;
}

}  // namespace

std::string compile_records_json(const std::vector<Record>& records, const EventLog& events,
                                 const LocationTable& locations) {
  nlohmann::json out = nlohmann::json::array();
  for (Record record : records) {
    const OpMeta op = events.op_meta(record.op_id);
    const uint32_t id = location_of(record);
    nlohmann::json where = nlohmann::json::object();
    if (id != 0) {
      const Location l = locations.get(id);
      where = {{"kind", static_cast<unsigned>(l.kind)}, {"file", l.file}, {"line", l.line}, {"function", l.function},
               {"stack", l.stack}};
    }
    out.push_back({{"record", to_hex(record)}, {"op", op.name}, {"arg_names", op.arg_names}, {"location", where}});
  }
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

int replay_compile_records(const std::string& json, RecordingState& runtime, std::string& error) {
  const nlohmann::json entries = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (entries.is_discarded() || !entries.is_array()) {
    error = "compile records: not a JSON array";
    return -1;
  }
  EventLog& events = runtime.events;
  std::vector<Record> records;
  size_t index = 0;
  try {
    for (; index < entries.size(); ++index) records.push_back(parse_entry(entries[index], events, runtime.locations));
  } catch (const std::exception& e) {
    error = "compile records: [" + std::to_string(index) + "]: " + e.what();
    return -1;
  }
  // An op is logged when the compile has not logged its kind yet (Dynamo's
  // trace, run again at a hit, logs the forward's); a cast with its op.
  const uint32_t thread = events.thread_id();
  std::unordered_map<uint64_t, uint64_t> new_seqs;  // an op's seq when stored -> its seq now (0: not logged)
  for (const Record& r : records)
    if (r.kind == RecordKind::kOp)
      new_seqs[r.seq] = runtime.compile.first_in_epoch(compile_record_key(r)) ? events.next_seq() : 0;
  int logged = 0;
  const uint64_t now = now_ns();
  for (Record r : records) {
    const auto op = new_seqs.find(r.kind == RecordKind::kOp ? r.seq : r.cast.op_seq);
    if (op == new_seqs.end() || op->second == 0) continue;
    if (r.kind == RecordKind::kOp) {
      EventLog::set_header(r, RecordKind::kOp, thread, op->second, now);
    } else {
      EventLog::set_header(r, RecordKind::kCast, thread, events.next_seq(), now);
      r.cast.op_seq = op->second;
    }
    events.record(r);
    ++logged;
  }
  return logged;
}

}  // namespace castscope
