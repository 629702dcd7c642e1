#include "agent/src/context/jit_cast_lines.h"

#include <torch/csrc/jit/passes/pass_manager.h>

#include <mutex>
#include <optional>

namespace castscope {
namespace {

// torch compiles symbolic_script's formulas from strings with this file name.
constexpr const char* kTorchStringSource = "<string>";

bool is_jit_cast(const torch::jit::Node* node) {
  static const auto reduced = c10::Symbol::aten("_autocast_to_reduced_precision");
  static const auto full = c10::Symbol::aten("_autocast_to_full_precision");
  return node->kind() == reduced || node->kind() == full;
}

// The consumer earliest in graph order whose range is the user's; nullptr
// when none has one (a cast only returned, or only fed to JIT plumbing).
torch::jit::Node* first_user_consumer(const torch::jit::Node* cast) {
  torch::jit::Node* first = nullptr;
  for (const auto& use : cast->output()->uses()) {
    if (!is_user_range(use.user->sourceRange())) continue;
    if (first == nullptr || use.user->isBefore(first)) first = use.user;
  }
  return first;
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
    if (torch::jit::Node* consumer = first_user_consumer(node)) {
      node->copyMetadata(consumer);
      ++attributed;
    }
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
