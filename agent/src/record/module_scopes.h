// The nn.Modules (and their parameters) a job's casts happen in: the
// precision map's keys (docs/events.md, "Modules and the precision map").
// The Python package declares each module's name and each parameter once
// (castscope_module_declare / castscope_parameter_declare) and brackets
// every module call (castscope_module_enter / _exit); a record carries the
// innermost module's scope id, or its source parameter's.
//
// Process-wide, never freed: ids outlive an attach (the Python package keeps
// them per module) and exporters read them at exit.
//
// Concurrency: declarations and the forward's transitions take one mutex
// (once per module call); parameter_of (per weight cast) reads a fixed
// open-addressing table without it.
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace castscope {

struct ModuleScope {
  std::string module;     // "<Root>.qualified.name"; "<Root>" for a root itself
  std::string parameter;  // the parameter's name in its module; empty: the module itself
};

class ModuleScopes {
 public:
  ModuleScopes();
  // Id 0 is "no module".
  uint32_t declare_module(std::string_view qualified_name);
  // A parameter of `module`, known by its TensorImpl (`tensor`). 0 when
  // `module` is unknown or the table of parameters is full.
  uint32_t declare_parameter(uint32_t module, std::string_view name, const void* tensor);
  // A copy; an empty scope for 0 or an unknown id.
  ModuleScope get(uint32_t id) const;
  // The parameter scope of a TensorImpl (0: not a declared parameter). Lock-free.
  uint32_t parameter_of(const void* tensor) const;

  // The forward's module transitions per autograd thread id
  // (at::RecordFunction::currentThreadId): from autograd sequence number
  // `next_seq` on, nodes are made inside `module`. A backward's node finds
  // the module its forward ran in (module_at). Old transitions are dropped.
  void transition(uint64_t thread, uint64_t next_seq, uint32_t module);
  uint32_t module_at(uint64_t thread, uint64_t seq) const;

  // Off (module_scopes: false, or no agent running): parameter_of and
  // module_at answer 0, so that no record names a module an earlier attach declared.
  void set_enabled(bool on) { enabled_.store(on, std::memory_order_relaxed); }

  // For fork (module_scopes()'s pthread_atfork handlers) alone.
  void lock() { mutex_.lock(); }
  void unlock() { mutex_.unlock(); }

 private:
  static constexpr size_t kParameterSlots = size_t{1} << 16;
  static constexpr size_t kTransitionsKept = size_t{1} << 16;  // per thread
  std::unique_ptr<std::atomic<const void*>[]> parameter_keys_;
  std::unique_ptr<std::atomic<uint32_t>[]> parameter_ids_;
  size_t parameters_ = 0;
  std::atomic<bool> enabled_{true};
  mutable std::mutex mutex_;
  std::deque<ModuleScope> scopes_;  // id - 1
  std::unordered_map<std::string, uint32_t> module_ids_;
  std::unordered_map<uint64_t, std::deque<std::pair<uint64_t, uint32_t>>> transitions_;
};

// The process's table.
ModuleScopes& module_scopes();

}  // namespace castscope
