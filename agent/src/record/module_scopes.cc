#include "agent/src/record/module_scopes.h"

#include <pthread.h>

#include <algorithm>
#include <functional>
#include <memory>

namespace castscope {

namespace {
size_t slot_of(const void* tensor, size_t slots) {
  // TensorImpls are 8-byte aligned and far apart: the address's middle bits spread.
  return (reinterpret_cast<uintptr_t>(tensor) >> 4) * 0x9e3779b97f4a7c15ull >> 40 & (slots - 1);
}
}  // namespace

ModuleScopes::ModuleScopes()
    : parameter_keys_(new std::atomic<const void*>[kParameterSlots]), parameter_ids_(new std::atomic<uint32_t>[kParameterSlots]) {
  for (size_t i = 0; i < kParameterSlots; ++i) {
    parameter_keys_[i].store(nullptr, std::memory_order_relaxed);
    parameter_ids_[i].store(0, std::memory_order_relaxed);
  }
}

uint32_t ModuleScopes::declare_module(std::string_view qualified_name) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto [it, inserted] = module_ids_.try_emplace(std::string(qualified_name), 0);
  if (inserted) {
    scopes_.push_back({std::string(qualified_name), {}});
    it->second = static_cast<uint32_t>(scopes_.size());
  }
  return it->second;
}

uint32_t ModuleScopes::declare_parameter(uint32_t module, std::string_view name, const void* tensor) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (module == 0 || module > scopes_.size() || tensor == nullptr) return 0;
  // A parameter declared again (a second root walk) keeps its id when its module is the same.
  size_t slot = slot_of(tensor, kParameterSlots);
  for (size_t probes = 0; probes < kParameterSlots; ++probes, slot = (slot + 1) & (kParameterSlots - 1)) {
    const void* key = parameter_keys_[slot].load(std::memory_order_relaxed);
    if (key == tensor) {
      const uint32_t id = parameter_ids_[slot].load(std::memory_order_relaxed);
      const ModuleScope& known = scopes_[id - 1];
      if (known.module == scopes_[module - 1].module && known.parameter == name) return id;
      scopes_.push_back({scopes_[module - 1].module, std::string(name)});
      parameter_ids_[slot].store(static_cast<uint32_t>(scopes_.size()), std::memory_order_release);
      return static_cast<uint32_t>(scopes_.size());
    }
    if (key == nullptr) break;
  }
  if (parameters_ >= kParameterSlots * 3 / 4) return 0;  // full: the rest are not told apart
  scopes_.push_back({scopes_[module - 1].module, std::string(name)});
  const uint32_t id = static_cast<uint32_t>(scopes_.size());
  parameter_ids_[slot].store(id, std::memory_order_relaxed);
  parameter_keys_[slot].store(tensor, std::memory_order_release);  // the id is visible before the key
  ++parameters_;
  return id;
}

ModuleScope ModuleScopes::get(uint32_t id) const {
  std::lock_guard<std::mutex> lock(mutex_);
  if (id == 0 || id > scopes_.size()) return {};
  return scopes_[id - 1];
}

uint32_t ModuleScopes::parameter_of(const void* tensor) const {
  if (!enabled_.load(std::memory_order_relaxed)) return 0;
  size_t slot = slot_of(tensor, kParameterSlots);
  for (size_t probes = 0; probes < kParameterSlots; ++probes, slot = (slot + 1) & (kParameterSlots - 1)) {
    const void* key = parameter_keys_[slot].load(std::memory_order_acquire);
    if (key == tensor) return parameter_ids_[slot].load(std::memory_order_acquire);
    if (key == nullptr) return 0;
  }
  return 0;
}

void ModuleScopes::transition(uint64_t thread, uint64_t next_seq, uint32_t module) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto& kept = transitions_[thread];
  kept.emplace_back(next_seq, module);
  if (kept.size() > kTransitionsKept) kept.erase(kept.begin(), kept.begin() + kTransitionsKept / 2);
}

uint32_t ModuleScopes::module_at(uint64_t thread, uint64_t seq) const {
  if (!enabled_.load(std::memory_order_relaxed)) return 0;
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = transitions_.find(thread);
  if (found == transitions_.end() || found->second.empty()) return 0;
  const auto& kept = found->second;
  // The last transition at or before `seq` (several at one number: the last
  // is the one a node made then was made in).
  auto after = std::upper_bound(kept.begin(), kept.end(), seq,
                                [](uint64_t s, const std::pair<uint64_t, uint32_t>& t) { return s < t.first; });
  return after == kept.begin() ? 0 : std::prev(after)->second;
}

ModuleScopes& module_scopes() {
  static ModuleScopes* const scopes = [] {
    auto* made = new ModuleScopes();  // never freed: read at exit
    // A fork (a DataLoader worker, whose transforms may be modules) while
    // another thread holds the lock would leave the child's copy locked:
    // the fork waits for it, and both sides let go after.
    pthread_atfork([] { module_scopes().lock(); }, [] { module_scopes().unlock(); },
                   [] { module_scopes().unlock(); });
    return made;
  }();
  return *scopes;
}

}  // namespace castscope
