#include "agent/src/context/jit_cast_lines.h"

#include <torch/csrc/jit/passes/pass_manager.h>

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

namespace castscope {
namespace {

// torch compiles symbolic_script's formulas from strings with this file name.
constexpr const char* kTorchStringSource = "<string>";

bool is_jit_cast(const torch::jit::Node* node) {
  static const auto reduced = c10::Symbol::aten("_autocast_to_reduced_precision");
  static const auto full = c10::Symbol::aten("_autocast_to_full_precision");
  return node->kind() == reduced || node->kind() == full;
}

// The consumers whose range is the user's, in graph order; empty when none
// has one (a cast only returned, or only fed to JIT plumbing).
std::vector<torch::jit::Node*> user_consumers(const torch::jit::Node* cast) {
  std::vector<torch::jit::Node*> consumers;
  for (const auto& use : cast->output()->uses())
    if (is_user_range(use.user->sourceRange()) &&
        std::find(consumers.begin(), consumers.end(), use.user) == consumers.end())
      consumers.push_back(use.user);
  std::sort(consumers.begin(), consumers.end(),
            [](const torch::jit::Node* a, const torch::jit::Node* b) { return a->isBefore(b); });
  return consumers;
}

std::string line_of(const torch::jit::SourceRange& range) {
  const auto file_line = range.file_line_col();
  return file_line ? std::get<0>(*file_line) + ":" + std::to_string(std::get<1>(*file_line)) : std::string();
}

// Sources made for shared casts, with their other consumers' lines; one per
// (first consumer's Source, lines), kept for the process: graphs may run
// until it ends. Bounded: past the cap a shared cast names its first
// consumer only.
constexpr size_t kMaxSharedSources = 4096;
struct SharedSource {
  std::shared_ptr<torch::jit::Source> source;
  std::string others;
};
std::mutex g_shared_mutex;
std::map<std::pair<const torch::jit::Source*, std::string>, SharedSource> g_shared_by_origin;  // guarded
std::unordered_map<const torch::jit::Source*, const SharedSource*> g_shared_by_copy;           // guarded

// `cast` (already given its first consumer's range) points into a copy of
// that Source registered with `others`.
void name_other_consumers(torch::jit::Node* cast, const std::string& others) {
  const torch::jit::SourceRange range = cast->sourceRange();
  const auto origin = range.source();
  std::lock_guard<std::mutex> lock(g_shared_mutex);
  auto found = g_shared_by_origin.find({origin.get(), others});
  if (found == g_shared_by_origin.end()) {
    if (g_shared_by_origin.size() >= kMaxSharedSources) return;
    auto copy = std::make_shared<torch::jit::Source>(origin->text_str(), origin->filename(), origin->starting_line_no());
    found = g_shared_by_origin.emplace(std::make_pair(origin.get(), others), SharedSource{copy, others}).first;
    g_shared_by_copy.emplace(copy.get(), &found->second);
  }
  cast->setSourceRange(torch::jit::SourceRange(found->second.source, range.start(), range.end()));
}

size_t attribute_block(torch::jit::Block* block) {
  size_t attributed = 0;
  for (torch::jit::Node* node : block->nodes()) {
    for (torch::jit::Block* inner : node->blocks()) attributed += attribute_block(inner);
    // Differentiable graphs and fusion groups hold their nodes in subgraphs.
    for (const auto name : node->attributeNames()) {
      if (node->kindOf(name) == torch::jit::AttributeKind::g) {
        attributed += attribute_jit_casts(*node->g(name));
      } else if (node->kindOf(name) == torch::jit::AttributeKind::gs) {
        for (const auto& graph : node->gs(name)) attributed += attribute_jit_casts(*graph);
      }
    }
    if (!is_jit_cast(node) || is_user_range(node->sourceRange())) continue;
    const auto consumers = user_consumers(node);
    if (consumers.empty()) continue;
    node->copyMetadata(consumers.front());
    ++attributed;
    std::vector<std::string> lines;  // distinct, the first consumer's first
    for (const torch::jit::Node* consumer : consumers) {
      std::string line = line_of(consumer->sourceRange());
      if (!line.empty() && std::find(lines.begin(), lines.end(), line) == lines.end()) lines.push_back(std::move(line));
    }
    std::string others;
    for (size_t i = 1; i < lines.size(); ++i) others += (i > 1 ? "\n" : "") + lines[i];
    if (!others.empty()) name_other_consumers(node, others);
  }
  return attributed;
}

std::mutex g_registration_mutex;
std::optional<torch::jit::GraphPassNameType> g_registered;  // guarded by g_registration_mutex

}  // namespace

bool is_user_range(const torch::jit::SourceRange& range) {
  const auto source = range.source();
  // Nodes torch inserts (the casts among them) get an empty source.
  if (!source || source->size() == 0) return false;
  const auto& filename = source->filename();
  return !filename || *filename != kTorchStringSource;  // traced graphs' sources have no file name
}

size_t attribute_jit_casts(torch::jit::Graph& graph) { return attribute_block(graph.block()); }

std::string other_consumer_lines(const torch::jit::Source* source) {
  std::lock_guard<std::mutex> lock(g_shared_mutex);
  const auto found = g_shared_by_copy.find(source);
  return found == g_shared_by_copy.end() ? std::string() : found->second->others;
}

// torch's list of post passes has no lock of its own: like the kernels the
// agent registers, the pass is added and removed at attach and detach, not
// while another thread optimizes a graph.
void register_jit_cast_lines() {
  std::lock_guard<std::mutex> lock(g_registration_mutex);
  if (g_registered) return;
  g_registered = torch::jit::registerPostPass([](std::shared_ptr<torch::jit::Graph>& graph) {
    if (graph) attribute_jit_casts(*graph);
  });
}

void unregister_jit_cast_lines() {
  std::lock_guard<std::mutex> lock(g_registration_mutex);
  if (!g_registered) return;
  torch::jit::clearPostPass(*g_registered);
  g_registered.reset();
}

}  // namespace castscope
