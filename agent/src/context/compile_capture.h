// torch.compile (docs/compile.md): what the autocast kernel needs to know
// while torch.compile traces a graph, and what it keeps for the Python side.
//
// - Tracing is told by a FakeTensor mode on the calling thread (Dynamo's fake
//   propagation, AOTAutograd's metadata pass and joint trace all run under
//   one): the kernel's decisions then are COMPILING records, made on fake
//   tensors, converting nothing.
// - Those records are deduplicated per compile (an epoch the Python side
//   starts when Dynamo begins a compile): Dynamo and AOTAutograd trace the
//   same code several times.
// - While the Python side collects (around AOTAutograd's graph capture, on
//   its thread), every cast decision is also kept, duplicates included, so
//   the compiled graphs' cast nodes can be matched to the op and argument
//   autocast decided them for; and every COMPILING record logged, so that a
//   graph AOTAutogradCache serves later (no trace runs then) can have the
//   trace's records logged again (compile_record_replay.h).
#pragma once

#include <c10/core/impl/LocalDispatchKeySet.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <unordered_set>
#include <utility>
#include <vector>

#include "agent/src/record/cast_record.h"

namespace castscope {

// A FakeTensor mode is active on this thread (torch.compile or export tracing).
bool compile_tracing_now() noexcept;
// The same from the thread's dispatch keys read already (op_context.h): while
// any dispatch mode is set, torch keeps the Python key included, so without
// it no mode's state is read at all.
bool compile_tracing_now(const c10::impl::LocalDispatchKeySet& keys) noexcept;

// One cast decision made while collecting: the cast record's fields.
struct CompileDecision {
  uint32_t op_id = 0;
  CastPolicy policy = CastPolicy::kUnspecified;
  DeviceKind device = DeviceKind::kUnspecified;
  CastFields cast{};
};

// What makes a compile-time op record the same as another: line, op, phase,
// input dtypes and the region's dtype.
uint64_t compile_record_key(const Record& op);

class CompileCapture {
 public:
  // A new compile began: every record key is new again.
  void new_epoch();
  // True the first time `key` is seen in this epoch.
  bool first_in_epoch(uint64_t key);

  // Per thread: keep decisions while on.
  static void set_collecting(bool on) noexcept;
  static bool collecting() noexcept;
  // False when the decision was dropped (kMaxDecisions reached): the caller counts it.
  bool keep(const CompileDecision& decision);
  // The decisions kept so far (all threads), forgotten here.
  std::vector<CompileDecision> take();
  // While collecting: a COMPILING record (op or cast) just logged. Past
  // kMaxDecisions it is dropped, false returned (counted by the caller).
  bool keep_logged(const Record& record);
  // The records kept so far (all threads), in the order logged, forgotten here.
  std::vector<Record> take_logged();

 private:
  // At most this many of each: a runaway trace must not grow without bound.
  // Past kMaxKeys new keys are no longer remembered (their records are kept,
  // not deduplicated); past kMaxDecisions decisions are dropped and counted
  // as internal errors by the kernel (their casts then go unmatched).
  static constexpr size_t kMaxKeys = 1 << 16;
  static constexpr size_t kMaxDecisions = 1 << 18;
  // Appended to by any thread, taken whole by the Python side.
  template <typename T>
  class BoundedList {
   public:
    bool push(const T& item) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (items_.size() >= kMaxDecisions) return false;
      items_.push_back(item);
      return true;
    }
    std::vector<T> take() {
      std::lock_guard<std::mutex> lock(mutex_);
      return std::exchange(items_, {});
    }

   private:
    std::mutex mutex_;
    std::vector<T> items_;
  };

  std::mutex mutex_;  // keys_
  std::unordered_set<uint64_t> keys_;
  BoundedList<CompileDecision> decisions_;
  BoundedList<Record> logged_;
};

}  // namespace castscope
