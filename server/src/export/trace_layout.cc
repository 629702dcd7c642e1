#include "server/src/export/trace_layout.h"

#include "server/src/store/numerics_problems.h"

namespace castscope::collector {
namespace {

constexpr size_t kMaxCommandChars = 80;

}  // namespace

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

NumericsCounts numerics_counts(const ExportEvent& n) {
  return {n.numerics_kind, n.overflowed, n.underflowed, n.nonfinite, n.nan};
}

std::string numerics_event_name(const ExportEvent& n) {
  const std::string src(short_name(n.src_dtype));
  if (n.numerics_kind == v1::NumericsSummary::KIND_OP_OUTPUT) return "non-finite output " + src;
  const std::string pair = src + "→" + std::string(short_name(n.dst_dtype));
  switch (worst_numerics_problem(numerics_counts(n))) {
    case NumericsProblem::kOverflow: return "cast overflow " + pair;
    case NumericsProblem::kNan: return "NaN cast " + pair;
    default: return "cast underflow " + pair;
  }
}

std::string numerics_summary(const ExportEvent& n) {
  const std::string where = location_text(n.location);
  std::string out;
  for (const std::string& line : numerics_problem_lines({numerics_counts(n), n.values, n.name, n.arg_name,
                                                         short_name(n.src_dtype), short_name(n.dst_dtype), where}))
    out += (out.empty() ? "" : "; ") + line;
  return out;
}

}  // namespace castscope::collector
