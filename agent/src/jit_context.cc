#include "jit_context.h"

#include <torch/csrc/jit/frontend/source_range.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <map>
#include <memory>
#include <mutex>
#include <regex>
#include <sstream>

#include "location_table.h"

namespace castscope {
namespace {

std::mutex g_mutex;
std::string g_internal_prefix;  // guarded by g_mutex
// (source, range start) -> (mode, location id). Holding the Source keeps its
// address from being reused by another source while cached.
std::map<std::pair<const torch::jit::Source*, size_t>, std::pair<std::shared_ptr<torch::jit::Source>, JitContext>> g_cache;

bool is_internal(const std::string& file) {
  return !g_internal_prefix.empty() && file.rfind(g_internal_prefix, 0) == 0;
}

// A traced node's source text is the tracer's Python stack: every line
// "file(line): function".
bool parse_traced_stack(const std::string& text, Location& out) {
  static const std::regex frame(R"(^(.+)\((\d+)\): (.+)$)");
  std::istringstream lines(text);
  std::string line;
  bool any = false;
  Location first_frame;
  while (std::getline(lines, line)) {
    std::smatch match;
    if (!std::regex_match(line, match, frame)) return false;
    Location here{LocationKind::kTorchScript, match[1].str(), static_cast<uint32_t>(std::stoul(match[2].str())),
                  match[3].str(), ""};
    if (!any) first_frame = here;
    any = true;
    if (!is_internal(here.file)) {
      out = here;
      return true;
    }
  }
  if (any) out = first_frame;  // only torch frames: report the innermost
  return any;
}

JitContext resolve(const torch::jit::StackEntry& innermost) {
  JitContext context;
  context.mode = ExecutionMode::kScript;
  Location location;
  location.kind = LocationKind::kTorchScript;
  location.function = innermost.filename;  // the interpreter stores the function name here
  const auto source = innermost.range.source();
  if (source && parse_traced_stack(source->text_str().str(), location)) {
    context.mode = ExecutionMode::kTraced;
  } else if (auto file_line = innermost.range.file_line_col()) {
    location.file = std::get<0>(*file_line);
    location.line = static_cast<uint32_t>(std::get<1>(*file_line));
  }
  context.location = LocationTable::instance().intern(location);
  return context;
}

}  // namespace

void set_internal_path_prefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_internal_prefix = prefix;
  g_cache.clear();
}

bool current_jit_context(JitContext& out) {
  const auto callstack = torch::jit::currentCallstack();  // innermost first
  if (callstack.empty()) return false;
  const auto& innermost = callstack.front();
  const auto source = innermost.range.source();
  const auto key = std::make_pair(source.get(), innermost.range.start());
  std::lock_guard<std::mutex> lock(g_mutex);
  auto found = g_cache.find(key);
  if (found == g_cache.end()) found = g_cache.emplace(key, std::make_pair(source, resolve(innermost))).first;
  out = found->second.second;
  return true;
}

}  // namespace castscope
