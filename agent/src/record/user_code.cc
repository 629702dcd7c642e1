#include "agent/src/record/user_code.h"

#include <algorithm>
#include <atomic>
#include <deque>
#include <mutex>
#include <vector>

namespace castscope {
namespace {

std::mutex g_mutex;  // writers only
std::string g_torch_dir;              // guarded by g_mutex
std::vector<std::string> g_added;     // guarded by g_mutex
std::atomic<const std::vector<std::string>*> g_dirs{nullptr};

// With g_mutex held. Every copy stays (a reader may still hold an old one),
// in a deque that never moves them and is never destroyed (threads may read
// past static destruction).
void publish() {
  static auto* published = new std::deque<std::vector<std::string>>();
  std::vector<std::string>& dirs = published->emplace_back(1, g_torch_dir);
  dirs.insert(dirs.end(), g_added.begin(), g_added.end());
  g_dirs.store(&dirs, std::memory_order_release);
}

}  // namespace

v1::enums::CastMaker maker_library(std::string_view file) {
  using v1::enums::CastMaker;
  if (file.find("/torch/distributed/fsdp/") != std::string_view::npos) return CastMaker::kFsdp;
  if (file.find("/torchao/") != std::string_view::npos) return CastMaker::kTorchao;
  if (file.find("/transformer_engine/") != std::string_view::npos) return CastMaker::kTransformerEngine;
  return CastMaker::kUnspecified;
}

SourceKind source_kind(std::string_view file, std::span<const std::string> internal_dirs) {
  if (file.starts_with("<eval_with_key>")) return SourceKind::kGenerated;
  if (file.empty() || file.starts_with("<frozen")) return SourceKind::kInternal;
  if (maker_library(file) != v1::enums::CastMaker::kUnspecified) return SourceKind::kInternal;
  for (const std::string& dir : internal_dirs)
    if (!dir.empty() && file.starts_with(dir)) return SourceKind::kInternal;
  return SourceKind::kUser;
}

SourceKind source_kind(std::string_view file) {
  const std::vector<std::string>* dirs = g_dirs.load(std::memory_order_acquire);
  return dirs == nullptr ? source_kind(file, std::span<const std::string>{}) : source_kind(file, *dirs);
}

void set_torch_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_dirs.load(std::memory_order_relaxed) != nullptr && dir == g_torch_dir) return;
  g_torch_dir = dir;
  publish();
}

void add_internal_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(g_mutex);
  if (dir.empty() || std::find(g_added.begin(), g_added.end(), dir) != g_added.end()) return;
  g_added.push_back(dir);
  publish();
}

}  // namespace castscope
