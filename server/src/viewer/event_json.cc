#include "server/src/viewer/event_json.h"

#include <cctype>
#include <vector>

#include "server/src/analysis/conversion_makers.h"

namespace castscope::collector::viewer {

namespace v1 = castscope::v1;
using nlohmann::json;

namespace {

int64_t relative(uint64_t ts_ns, int64_t origin_ns) { return static_cast<int64_t>(ts_ns) - origin_ns; }

void write_location(JsonWriter& w, const v1::SourceLocation& location) {
  w.begin_object();
  w.key("file").value(location.file());
  w.key("line").value(location.line());
  w.key("function").value(location.function());
  w.end_object();
}

void write_head(JsonWriter& w, const EventLayout& layout) {
  w.begin_object();
  if (layout.agent_id != nullptr) w.key("agent_id").value(*layout.agent_id);
}

void write_event_location(JsonWriter& w, const EventLayout& layout, const v1::SourceLocation& location) {
  w.key("location");
  if (layout.lane != nullptr) {
    w.value(layout.lane->index(location));
  } else {
    write_location(w, location);
  }
}

template <typename Write>
json as_json(Write&& write) {
  JsonWriter w;
  write(w);
  return json::parse(w.text());
}

}  // namespace

json location_json(const v1::SourceLocation& location, bool with_source) {
  json out = {{"file", location.file()}, {"line", location.line()}, {"function", location.function()}};
  if (with_source) {
    out["source"] = location.source_text().empty() ? json(nullptr) : json(location.source_text());
    out["stack"] = json(std::vector<std::string>(location.stack().begin(), location.stack().end()));
    out["inside_disabled_autocast"] = location.inside_disabled_autocast();
    out["also_consumed_at"] = json(std::vector<std::string>(location.also_consumed_at().begin(),
                                                            location.also_consumed_at().end()));
  }
  return out;
}

uint32_t LaneLocations::index(const v1::SourceLocation& location) {
  // Length-prefixed: no file or function name can run into the next part.
  std::string key = std::to_string(location.file().size());
  key += ':';
  key += location.file();
  key += std::to_string(location.function().size());
  key += ':';
  key += location.function();
  key += std::to_string(location.line());
  const auto [at, added] = ids_.try_emplace(std::move(key), size_);
  if (added) {
    if (size_ == 0) table_.begin_array();
    write_location(table_, location);
    ++size_;
  }
  return at->second;
}

void LaneLocations::write(JsonWriter& out) const {
  if (size_ == 0) {
    out.begin_array().end_array();
    return;
  }
  out.raw(table_.text() + "]");  // the table is left open for more
}

void write_cast(JsonWriter& w, const std::string& agent_id, const v1::CastEvent& c, int64_t origin_ns) {
  write_cast(w, EventLayout{&agent_id, nullptr}, c, origin_ns);
}
void write_op(JsonWriter& w, const std::string& agent_id, const v1::OpEvent& o, int64_t origin_ns) {
  write_op(w, EventLayout{&agent_id, nullptr}, o, origin_ns);
}
void write_kernel(JsonWriter& w, const std::string& agent_id, const v1::KernelEvent& k, int64_t origin_ns) {
  write_kernel(w, EventLayout{&agent_id, nullptr}, k, origin_ns);
}

void write_cast(JsonWriter& w, const EventLayout& layout, const v1::CastEvent& c, int64_t origin_ns) {
  write_head(w, layout);
  w.key("seq").value(c.seq());
  w.key("ts").value(relative(c.ts_ns(), origin_ns));
  w.key("thread").value(c.thread());
  w.key("op_seq").value(c.op_seq());
  w.key("op").value(c.op());
  w.key("arg").value(c.arg_name());
  w.key("list_index").value(c.list_index());
  w.key("policy").value(value_name(c.policy()));
  w.key("src").value(value_name(c.src_dtype()));
  w.key("dst").value(value_name(c.dst_dtype()));
  w.key("outcome").value(value_name(c.outcome()));
  w.key("role").value(value_name(c.role()));
  w.key("cache").value(value_name(c.cache()));
  w.key("mode").value(value_name(c.mode()));
  w.key("phase").value(value_name(c.phase()));
  // Who made it, in the report's words (conversions_by_maker): the timeline's maker: filter.
  w.key("maker").value(maker_label(c.maker(), c.location().file()));
  w.key("bytes").value(c.bytes());
  w.key("shape").begin_array();
  for (int64_t d : c.shape()) w.value(d);
  w.end_array();
  // How stale a stale hit's copy was; where in the model the cast happened (the precision map's keys).
  if (c.cache() == v1::CACHE_OUTCOME_STALE_HIT) {
    w.key("source_version").value(c.source_version());
    w.key("cached_version").value(c.cached_version());
  }
  if (!c.module().empty()) w.key("module").value(c.module());
  if (!c.parameter().empty()) w.key("parameter").value(c.parameter());
  write_event_location(w, layout, c.location());
  w.end_object();
}

void write_op(JsonWriter& w, const EventLayout& layout, const v1::OpEvent& o, int64_t origin_ns) {
  write_head(w, layout);
  w.key("seq").value(o.seq());
  w.key("ts").value(relative(o.ts_ns(), origin_ns));
  w.key("dur").value(o.cpu_duration_ns());
  w.key("thread").value(o.thread());
  w.key("op").value(o.op());
  w.key("policy").value(value_name(o.policy()));
  w.key("outcome").value(value_name(o.outcome()));
  w.key("mode").value(value_name(o.mode()));
  w.key("phase").value(value_name(o.phase()));
  w.key("output_dtype").value(value_name(o.output_dtype()));
  w.key("input_dtypes").begin_array();
  for (int d : o.input_dtypes()) w.value(value_name(static_cast<v1::DType>(d)));
  w.end_array();
  write_event_location(w, layout, o.location());
  w.end_object();
}

void write_kernel(JsonWriter& w, const EventLayout& layout, const v1::KernelEvent& k, int64_t origin_ns) {
  write_head(w, layout);
  w.key("seq").value(k.seq());
  w.key("ts").value(relative(k.ts_ns(), origin_ns));
  w.key("dur").value(k.duration_ns());
  w.key("name").value(k.name());
  w.key("activity").value(value_name(k.activity()));
  w.key("launched_by").value(value_name(k.launched_by()));
  w.key("launch_seq").value(k.launch_seq());
  w.key("device").value(k.device());
  w.key("stream").value(k.stream());
  w.key("bytes").value(k.bytes());
  w.end_object();
}

json cast_json(const std::string& agent_id, const v1::CastEvent& c, int64_t origin_ns) {
  return as_json([&](JsonWriter& w) { write_cast(w, agent_id, c, origin_ns); });
}

json op_json(const std::string& agent_id, const v1::OpEvent& o, int64_t origin_ns) {
  return as_json([&](JsonWriter& w) { write_op(w, agent_id, o, origin_ns); });
}

json kernel_json(const std::string& agent_id, const v1::KernelEvent& k, int64_t origin_ns) {
  return as_json([&](JsonWriter& w) { write_kernel(w, agent_id, k, origin_ns); });
}

}  // namespace castscope::collector::viewer
