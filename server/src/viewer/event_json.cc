#include "server/src/viewer/event_json.h"

#include <cctype>
#include <vector>

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

void write_cast(JsonWriter& w, const std::string& agent_id, const v1::CastEvent& c, int64_t origin_ns) {
  w.begin_object();
  w.key("agent_id").value(agent_id);
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
  w.key("bytes").value(c.bytes());
  w.key("shape").begin_array();
  for (int64_t d : c.shape()) w.value(d);
  w.end_array();
  w.key("location");
  write_location(w, c.location());
  w.end_object();
}

void write_op(JsonWriter& w, const std::string& agent_id, const v1::OpEvent& o, int64_t origin_ns) {
  w.begin_object();
  w.key("agent_id").value(agent_id);
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
  w.key("location");
  write_location(w, o.location());
  w.end_object();
}

void write_kernel(JsonWriter& w, const std::string& agent_id, const v1::KernelEvent& k, int64_t origin_ns) {
  w.begin_object();
  w.key("agent_id").value(agent_id);
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
