#include "agent/src/context/jit_context.h"

#include <torch/csrc/jit/frontend/source_range.h>
#include <torch/csrc/jit/runtime/interpreter.h>

#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <regex>
#include <sstream>
#include <string_view>

#include "agent/src/context/jit_cast_lines.h"
#include "agent/src/record/location_table.h"
#include "agent/src/record/user_code.h"

namespace castscope {
namespace {

std::mutex g_mutex;
// (source, range start) -> (mode, location id). Holding the Source keeps its
// address from being reused by another source while cached.
std::map<std::pair<const torch::jit::Source*, size_t>, std::pair<std::shared_ptr<torch::jit::Source>, JitContext>> g_cache;
const LocationTable* g_cache_table = nullptr;  // the table the cached ids belong to

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
    Location here{LocationKind::kTorchscript, match[1].str(), static_cast<uint32_t>(std::stoul(match[2].str())),
                  match[3].str(), ""};
    if (!any) first_frame = here;
    any = true;
    if (source_kind(here.file) == SourceKind::kUser) {
      out = here;
      return true;
    }
  }
  if (any) out = first_frame;  // no user frame: report the innermost
  return any;
}

// Whether the code at `offset` sits inside a `with ...autocast(...
// enabled=False ...)` block of the scripted source: walks out through the
// enclosing block headers (each less indented than the last).
bool inside_disabled_autocast(std::string_view text, size_t offset) {
  auto line_start_before = [&](size_t end) {
    const size_t newline = end == 0 ? std::string_view::npos : text.rfind('\n', end - 1);
    return newline == std::string_view::npos ? 0 : newline + 1;
  };
  size_t start = line_start_before(std::min(offset, text.size()));
  size_t indent = text.substr(start).find_first_not_of(" \t");
  while (start > 0 && indent > 0 && indent != std::string_view::npos) {
    const size_t end = start - 1;  // the newline ending the previous line
    start = line_start_before(end);
    const std::string_view line = text.substr(start, end - start);
    const size_t first = line.find_first_not_of(" \t");
    if (first == std::string_view::npos || line[first] == '#' || first >= indent) continue;
    indent = first;
    const std::string_view header = line.substr(first);
    if (header.starts_with("with ") && header.find("autocast(") != std::string_view::npos &&
        (header.find("enabled=False") != std::string_view::npos ||
         header.find("enabled = False") != std::string_view::npos))
      return true;
  }
  return false;
}

// The frame whose line a cast is reported at: the innermost with a source
// range in the user's code. A scripted module's nn.Linear is inlined into its
// caller's graph, so the innermost frame is torch's linear.py and the user's
// line (`self.fc(x)`, where eager mode reports it) is the next one out. With
// no frame in user code, the innermost with a range; null when none has one.
const torch::jit::StackEntry* reported_frame(const std::vector<torch::jit::StackEntry>& callstack) {
  const torch::jit::StackEntry* innermost = nullptr;
  for (const auto& entry : callstack) {
    if (!is_user_range(entry.range)) continue;  // torch's own "<string>" formulas are no user line
    if (innermost == nullptr) innermost = &entry;
    // Per op: the file name by reference, no copy. A traced graph's range is
    // the tracer's stack text, without a file: its frames are parsed later.
    const std::optional<std::string>& file = entry.range.source()->filename();
    if (!file || source_kind(*file) == SourceKind::kUser) return &entry;
  }
  return innermost;
}

// Ops the JIT inserts itself (differentiable-graph plumbing, and autocast
// casts in graphs optimized without jit_cast_lines.h's pass) have no range:
// the nearest enclosing frame with one stands in.
JitContext resolve(const std::vector<torch::jit::StackEntry>& callstack, LocationTable& locations) {
  JitContext context;
  context.mode = ExecutionMode::kScript;
  Location location;
  location.kind = LocationKind::kTorchscript;
  if (const torch::jit::StackEntry* entry = reported_frame(callstack)) {
    const auto source = entry->range.source();
    location.function = entry->filename;  // the interpreter stores the function name here
    if (parse_traced_stack(source->text_str().str(), location)) {
      context.mode = ExecutionMode::kTraced;
      context.has_source = true;
    } else if (auto file_line = entry->range.file_line_col()) {
      location.file = std::get<0>(*file_line);
      location.line = static_cast<uint32_t>(std::get<1>(*file_line));
      location.inside_disabled_autocast = inside_disabled_autocast(source->text_str().str(), entry->range.start());
      location.also_consumed_at = other_consumer_lines(source.get());
      context.has_source = true;
    }
  }
  if (location.function.empty() && !callstack.empty()) location.function = callstack.front().filename;
  context.location = locations.intern(location);
  return context;
}

}  // namespace

void forget_resolved_jit_sites() {
  std::lock_guard<std::mutex> lock(g_mutex);
  g_cache.clear();
}

bool current_jit_context(LocationTable& locations, JitContext& out) {
  const auto callstack = torch::jit::currentCallstack();  // innermost first
  if (callstack.empty()) return false;
  // Cache by the frame reported: what resolve makes depends on it alone.
  const torch::jit::StackEntry* sourced = reported_frame(callstack);
  if (sourced == nullptr) {
    out = resolve(callstack, locations);
    return true;
  }
  const auto source = sourced->range.source();
  const auto key = std::make_pair(source.get(), sourced->range.start());
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_cache_table != &locations) {  // ids are per table (a test's own runtime)
    g_cache.clear();
    g_cache_table = &locations;
  }
  auto found = g_cache.find(key);
  if (found == g_cache.end()) found = g_cache.emplace(key, std::make_pair(source, resolve(callstack, locations))).first;
  out = found->second.second;
  return true;
}

}  // namespace castscope
