#include "server/src/viewer/event_json.h"

#include <cctype>

namespace castscope::collector::viewer {

namespace v1 = castscope::v1;
using nlohmann::json;

std::string enum_name(const std::string& proto_name, size_t prefix_length) {
  if (proto_name.size() <= prefix_length) return "unspecified";
  std::string out = proto_name.substr(prefix_length);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string dtype_name(v1::DType dtype) { return enum_name(v1::DType_Name(dtype), 6); }
std::string mode_name(v1::ExecutionMode mode) { return enum_name(v1::ExecutionMode_Name(mode), 15); }

namespace {

std::string policy_name(v1::CastPolicy p) { return enum_name(v1::CastPolicy_Name(p), 12); }
std::string phase_name(v1::Phase p) { return enum_name(v1::Phase_Name(p), 6); }
std::string role_name(v1::Role r) { return enum_name(v1::Role_Name(r), 5); }
std::string cache_name(v1::CacheOutcome c) { return enum_name(v1::CacheOutcome_Name(c), 14); }
std::string cast_outcome_name(v1::CastOutcome o) { return enum_name(v1::CastOutcome_Name(o), 13); }
std::string op_outcome_name(v1::OpOutcome o) { return enum_name(v1::OpOutcome_Name(o), 11); }

int64_t relative(uint64_t ts_ns, int64_t origin_ns) { return static_cast<int64_t>(ts_ns) - origin_ns; }

}  // namespace

json location_json(const v1::SourceLocation& location, bool with_source) {
  json out = {{"file", location.file()}, {"line", location.line()}, {"function", location.function()}};
  if (with_source) {
    out["source"] = location.source_text().empty() ? json(nullptr) : json(location.source_text());
    out["stack"] = json(std::vector<std::string>(location.stack().begin(), location.stack().end()));
    out["inside_disabled_autocast"] = location.inside_disabled_autocast();
  }
  return out;
}

json cast_json(const std::string& agent_id, const v1::CastEvent& c, int64_t origin_ns) {
  return {{"agent_id", agent_id},
          {"seq", c.seq()},
          {"ts", relative(c.ts_ns(), origin_ns)},
          {"thread", c.thread()},
          {"op_seq", c.op_seq()},
          {"op", c.op()},
          {"arg", c.arg_name()},
          {"list_index", c.list_index()},
          {"policy", policy_name(c.policy())},
          {"src", dtype_name(c.src_dtype())},
          {"dst", dtype_name(c.dst_dtype())},
          {"outcome", cast_outcome_name(c.outcome())},
          {"role", role_name(c.role())},
          {"cache", cache_name(c.cache())},
          {"mode", mode_name(c.mode())},
          {"phase", phase_name(c.phase())},
          {"bytes", c.bytes()},
          {"shape", json(std::vector<int64_t>(c.shape().begin(), c.shape().end()))},
          {"location", location_json(c.location(), false)}};
}

json op_json(const std::string& agent_id, const v1::OpEvent& o, int64_t origin_ns) {
  json inputs = json::array();
  for (int d : o.input_dtypes()) inputs.push_back(dtype_name(static_cast<v1::DType>(d)));
  return {{"agent_id", agent_id},
          {"seq", o.seq()},
          {"ts", relative(o.ts_ns(), origin_ns)},
          {"dur", o.cpu_duration_ns()},
          {"thread", o.thread()},
          {"op", o.op()},
          {"policy", policy_name(o.policy())},
          {"outcome", op_outcome_name(o.outcome())},
          {"mode", mode_name(o.mode())},
          {"phase", phase_name(o.phase())},
          {"output_dtype", dtype_name(o.output_dtype())},
          {"input_dtypes", inputs},
          {"location", location_json(o.location(), false)}};
}

json kernel_json(const std::string& agent_id, const v1::KernelEvent& k, int64_t origin_ns) {
  return {{"agent_id", agent_id},
          {"seq", k.seq()},
          {"ts", relative(k.ts_ns(), origin_ns)},
          {"dur", k.duration_ns()},
          {"name", k.name()},
          {"activity", enum_name(v1::GpuActivity_Name(k.activity()), 13)},
          {"launched_by", enum_name(v1::LaunchedBy_Name(k.launched_by()), 12)},
          {"launch_seq", k.launch_seq()},
          {"device", k.device()},
          {"stream", k.stream()},
          {"bytes", k.bytes()}};
}

}  // namespace castscope::collector::viewer
