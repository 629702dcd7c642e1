#include "server/src/export/trace_layout.h"

#include <google/protobuf/descriptor.h>

#include <vector>

namespace castscope::collector {
namespace {

constexpr size_t kMaxCommandChars = 80;

// Short names of one enum, by value, made once from its descriptor.
class NameTable {
 public:
  NameTable(const google::protobuf::EnumDescriptor* descriptor, std::string_view prefix) {
    for (int i = 0; i < descriptor->value_count(); ++i) {
      const auto* value = descriptor->value(i);
      if (value->number() < 0) continue;
      const auto number = static_cast<size_t>(value->number());
      if (number >= names_.size()) names_.resize(number + 1);
      std::string name = value->name();
      if (name.starts_with(prefix)) name.erase(0, prefix.size());
      for (char& c : name) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
      names_[number] = std::move(name);
    }
  }
  std::string_view operator[](int value) const {
    if (value < 0 || static_cast<size_t>(value) >= names_.size() || names_[value].empty()) return "unknown";
    return names_[value];
  }

 private:
  std::vector<std::string> names_;
};

}  // namespace

#define CASTSCOPE_SHORT_NAME(Type, prefix)                          \
  std::string_view short_name(Type value) {                         \
    static const NameTable table(Type##_descriptor(), prefix);      \
    return table[static_cast<int>(value)];                          \
  }
CASTSCOPE_SHORT_NAME(v1::DType, "DTYPE_")
CASTSCOPE_SHORT_NAME(v1::CastPolicy, "CAST_POLICY_")
CASTSCOPE_SHORT_NAME(v1::CastOutcome, "CAST_OUTCOME_")
CASTSCOPE_SHORT_NAME(v1::Role, "ROLE_")
CASTSCOPE_SHORT_NAME(v1::CacheOutcome, "CACHE_OUTCOME_")
CASTSCOPE_SHORT_NAME(v1::ExecutionMode, "EXECUTION_MODE_")
CASTSCOPE_SHORT_NAME(v1::Phase, "PHASE_")
CASTSCOPE_SHORT_NAME(v1::DeviceType, "DEVICE_TYPE_")
CASTSCOPE_SHORT_NAME(v1::OpOutcome, "OP_OUTCOME_")
CASTSCOPE_SHORT_NAME(v1::ProbeReason, "PROBE_REASON_")
CASTSCOPE_SHORT_NAME(v1::GpuActivity, "GPU_ACTIVITY_")
CASTSCOPE_SHORT_NAME(v1::LaunchedBy, "LAUNCHED_BY_")
CASTSCOPE_SHORT_NAME(v1::CacheSample::Trigger, "TRIGGER_")
#undef CASTSCOPE_SHORT_NAME

const TraceLayout::Process& TraceLayout::begin_agent(size_t agent_index, const ExportAgent& agent) {
  agent_index_ = agent_index;
  threads_.clear();
  streams_.clear();
  process_.pid = pids_.insert(agent.pid).second && agent.pid != 0 ? agent.pid : allocate_id();
  pids_.insert(process_.pid);
  const std::string where = (agent.hostname.empty() ? "" : " · " + agent.hostname) + " · pid " + std::to_string(agent.pid);
  if (agent.rank >= 0) {
    process_.name = "rank " + std::to_string(agent.rank) + where;
  } else {
    std::string command = agent.command.empty() ? agent.agent_id : agent.command;
    if (command.size() > kMaxCommandChars) command = command.substr(0, kMaxCommandChars) + "…";
    process_.name = command + where;
  }
  return process_;
}

uint32_t TraceLayout::thread_tid(uint32_t thread, bool& first) {
  auto [it, inserted] = threads_.try_emplace(thread, 0);
  if (inserted) it->second = allocate_id();
  first = inserted;
  return it->second;
}

uint32_t TraceLayout::stream_tid(uint32_t device, uint32_t stream, bool& first) {
  auto [it, inserted] = streams_.try_emplace({device, stream}, 0);
  if (inserted) it->second = allocate_id();
  first = inserted;
  return it->second;
}

std::string location_text(const ExportLocation* location) {
  if (location == nullptr || location->file.empty()) return "";
  return location->file + ":" + std::to_string(location->line);
}

std::string shape_text(const ExportEvent& cast) {
  std::string out = "[";
  for (size_t i = 0; i < cast.shape.size(); ++i) out += (i == 0 ? "" : ", ") + std::to_string(cast.shape[i]);
  return out + (cast.shape_truncated ? ", ...]" : "]");
}

std::string cast_event_name(const ExportEvent& cast) {
  if (cast.outcome == v1::CAST_OUTCOME_CAST)
    return "cast " + std::string(short_name(cast.src_dtype)) + "→" + std::string(short_name(cast.dst_dtype));
  return "no cast (" + std::string(short_name(cast.outcome)) + ")";
}

std::string arg_text(const ExportEvent& cast) {
  std::string out(cast.arg_name);
  if (cast.list_index >= 0) out += "[" + std::to_string(cast.list_index) + "]";
  return out;
}

}  // namespace castscope::collector
