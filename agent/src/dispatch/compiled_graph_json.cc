#include "agent/src/dispatch/compiled_graph_json.h"

#include <nlohmann/json.hpp>

#include <algorithm>

namespace castscope {

std::string compile_decisions_json(const std::vector<CompileDecision>& decisions, const EventLog& events,
                                   const LocationTable& locations) {
  nlohmann::json out = nlohmann::json::array();
  for (const CompileDecision& d : decisions) {
    const Location where = d.cast.location != 0 ? locations.get(d.cast.location) : Location{};
    std::vector<int64_t> shape(d.cast.shape, d.cast.shape + std::min<size_t>(d.cast.ndim, kMaxShapeDims));
    out.push_back({{"op", events.op_meta(d.op_id).name},
                   {"arg_index", d.cast.arg_index},
                   {"list_index", d.cast.list_index},
                   {"policy", static_cast<int>(d.policy)},
                   {"device", static_cast<int>(d.device)},
                   {"role", static_cast<int>(d.cast.role)},
                   {"src", static_cast<int>(d.cast.src)},
                   {"dst", static_cast<int>(d.cast.dst)},
                   {"shape", shape},
                   {"bytes", d.cast.bytes},
                   {"phase", static_cast<int>(d.cast.phase)},
                   {"file", where.file},
                   {"line", where.line},
                   {"function", where.function}});
  }
  return out.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

namespace {

// An integer field in [low, high]; throws a message naming it.
int64_t int_field(const nlohmann::json& object, const char* name, int64_t low, int64_t high) {
  const auto found = object.find(name);
  if (found == object.end()) throw std::runtime_error(std::string("missing \"") + name + "\"");
  if (!found->is_number_integer()) throw std::runtime_error(std::string("\"") + name + "\" is not an integer");
  const int64_t value = found->get<int64_t>();
  if (value < low || value > high)
    throw std::runtime_error(std::string("\"") + name + "\" is " + std::to_string(value) + ", not in [" +
                             std::to_string(low) + ", " + std::to_string(high) + "]");
  return value;
}

std::string string_field(const nlohmann::json& object, const char* name) {
  const auto found = object.find(name);
  if (found == object.end() || !found->is_string()) throw std::runtime_error(std::string("\"") + name + "\" is not a string");
  return found->get<std::string>();
}

CompiledCast parse_cast(const nlohmann::json& c, Phase graph_phase, EventLog& events, LocationTable& locations) {
  if (!c.is_object()) throw std::runtime_error("not an object");
  CompiledCast compiled;
  CastDescription& cast = compiled.cast;
  cast.outcome = CastOutcome::kCast;
  const std::string op = string_field(c, "op");
  if (op.empty()) throw std::runtime_error("\"op\" is empty");
  cast.op_id = events.intern_op(op);
  cast.arg_index = static_cast<uint16_t>(int_field(c, "arg_index", 0, 0xffff));
  cast.list_index = static_cast<int16_t>(int_field(c, "list_index", -1, 0x7fff));
  cast.policy = static_cast<CastPolicy>(int_field(c, "policy", 1, static_cast<int>(CastPolicy::kBanned)));
  cast.device = static_cast<DeviceKind>(int_field(c, "device", 1, static_cast<int>(DeviceKind::kMps)));
  cast.role = static_cast<Role>(int_field(c, "role", 1, static_cast<int>(Role::kActivation)));
  cast.src = static_cast<DType>(int_field(c, "src", 1, static_cast<int>(DType::kOther)));
  cast.dst = static_cast<DType>(int_field(c, "dst", 1, static_cast<int>(DType::kOther)));
  const auto shape = c.find("shape");
  if (shape == c.end() || !shape->is_array()) throw std::runtime_error("\"shape\" is not an array");
  for (const auto& size : *shape) {
    if (!size.is_number_integer() || size.get<int64_t>() < 0) throw std::runtime_error("\"shape\" holds a non-size");
    cast.shape.push_back(size.get<int64_t>());
  }
  cast.bytes = static_cast<uint64_t>(int_field(c, "bytes", 0, INT64_MAX));
  compiled.phase = c.contains("phase") ? static_cast<Phase>(int_field(c, "phase", 1, 2)) : graph_phase;
  if (c.contains("file")) {
    Location where;
    where.kind = LocationKind::kPython;
    where.file = string_field(c, "file");
    where.line = static_cast<uint32_t>(int_field(c, "line", 1, UINT32_MAX));
    where.function = c.contains("function") ? string_field(c, "function") : "";
    if (where.file.empty()) throw std::runtime_error("\"file\" is empty");
    compiled.location = locations.intern(where);
  }
  return compiled;
}

}  // namespace

std::optional<CompiledGraph> parse_compiled_graph(const std::string& json, EventLog& events, LocationTable& locations,
                                                  std::string& error) {
  const nlohmann::json graph = nlohmann::json::parse(json, nullptr, /*allow_exceptions=*/false);
  if (graph.is_discarded() || !graph.is_object()) {
    error = "compiled graph: not a JSON object";
    return std::nullopt;
  }
  CompiledGraph out;
  const auto kind = graph.find("kind");
  const std::string name = kind != graph.end() && kind->is_string() ? kind->get<std::string>() : "";
  if (name != "forward" && name != "backward" && name != "inference") {
    error = "compiled graph: \"kind\" must be \"forward\", \"backward\" or \"inference\"";
    return std::nullopt;
  }
  out.phase = name == "backward" ? Phase::kBackward : Phase::kForward;
  const auto casts = graph.find("casts");
  if (casts == graph.end() || !casts->is_array()) {
    error = "compiled graph: \"casts\" is not an array";
    return std::nullopt;
  }
  size_t index = 0;
  try {
    for (; index < casts->size(); ++index) out.casts.push_back(parse_cast((*casts)[index], out.phase, events, locations));
  } catch (const std::exception& e) {
    error = "compiled graph: casts[" + std::to_string(index) + "]: " + e.what();
    return std::nullopt;
  }
  out.op_id = events.intern_op("compiled::" + name);
  return out;
}

}  // namespace castscope
