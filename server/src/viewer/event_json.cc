#include "server/src/viewer/event_json.h"

#include <cctype>
#include <vector>

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

// An enumeration's lower-case names by number, made once (enum_name per
// field per event was a string allocation each).
class EnumNames {
 public:
  EnumNames(const google::protobuf::EnumDescriptor* descriptor, size_t prefix_length) {
    for (int i = 0; i < descriptor->value_count(); ++i) {
      const auto* v = descriptor->value(i);
      if (v->number() >= 0 && v->number() < 256) {
        if (names_.size() <= static_cast<size_t>(v->number())) names_.resize(static_cast<size_t>(v->number()) + 1);
        names_[static_cast<size_t>(v->number())] = enum_name(v->name(), prefix_length);
      }
    }
  }
  const std::string& operator()(int number) const {
    static const std::string unspecified = "unspecified";
    if (number < 0 || static_cast<size_t>(number) >= names_.size() || names_[static_cast<size_t>(number)].empty())
      return unspecified;
    return names_[static_cast<size_t>(number)];
  }

 private:
  std::vector<std::string> names_;
};

const EnumNames& dtypes() {
  static const EnumNames names(v1::DType_descriptor(), 6);
  return names;
}
const EnumNames& modes() {
  static const EnumNames names(v1::ExecutionMode_descriptor(), 15);
  return names;
}
const std::string& policy_name(v1::CastPolicy p) {
  static const EnumNames names(v1::CastPolicy_descriptor(), 12);
  return names(p);
}
const std::string& phase_name(v1::Phase p) {
  static const EnumNames names(v1::Phase_descriptor(), 6);
  return names(p);
}
const std::string& role_name(v1::Role r) {
  static const EnumNames names(v1::Role_descriptor(), 5);
  return names(r);
}
const std::string& cache_name(v1::CacheOutcome c) {
  static const EnumNames names(v1::CacheOutcome_descriptor(), 14);
  return names(c);
}
const std::string& cast_outcome_name(v1::CastOutcome o) {
  static const EnumNames names(v1::CastOutcome_descriptor(), 13);
  return names(o);
}
const std::string& op_outcome_name(v1::OpOutcome o) {
  static const EnumNames names(v1::OpOutcome_descriptor(), 11);
  return names(o);
}
const std::string& activity_name(v1::GpuActivity a) {
  static const EnumNames names(v1::GpuActivity_descriptor(), 13);
  return names(a);
}
const std::string& launched_by_name(v1::LaunchedBy l) {
  static const EnumNames names(v1::LaunchedBy_descriptor(), 12);
  return names(l);
}

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
  w.key("policy").value(policy_name(c.policy()));
  w.key("src").value(dtypes()(c.src_dtype()));
  w.key("dst").value(dtypes()(c.dst_dtype()));
  w.key("outcome").value(cast_outcome_name(c.outcome()));
  w.key("role").value(role_name(c.role()));
  w.key("cache").value(cache_name(c.cache()));
  w.key("mode").value(modes()(c.mode()));
  w.key("phase").value(phase_name(c.phase()));
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
  w.key("policy").value(policy_name(o.policy()));
  w.key("outcome").value(op_outcome_name(o.outcome()));
  w.key("mode").value(modes()(o.mode()));
  w.key("phase").value(phase_name(o.phase()));
  w.key("output_dtype").value(dtypes()(o.output_dtype()));
  w.key("input_dtypes").begin_array();
  for (int d : o.input_dtypes()) w.value(dtypes()(d));
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
  w.key("activity").value(activity_name(k.activity()));
  w.key("launched_by").value(launched_by_name(k.launched_by()));
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
