// castscope's own state of the calling thread, in one thread-local block.
//
// The agent is a dlopen'ed library, so each thread_local it reads costs a
// call to __tls_get_addr, and one defined in another file a call to its TLS
// wrapper too. An autocast op read about a dozen of them (the thread's ring
// three times, its id, the kernel depth twice, the unlogged flag three
// times...). Here every field sits in one block that is constant-initialized
// and trivially destructible (no wrapper, no guard): a kernel looks it up once
// per op and passes the reference down.
//
// Only the owning thread reads or writes its block. The ring it names is
// given back at thread exit by EventLog's own thread-local handle, and the
// cast cache's memo freed by the observer's owner (they have the destructors
// this block must not have).
#pragma once

#include <cstdint>

#include "agent/src/record/event_log.h"

namespace castscope {

struct CastMemo;     // context/cast_memo.h
struct Float8Scope;  // dispatch/float8_scaling.h

struct ThreadBlock {
  // EventLog: the thread's ring, the log it belongs to (0: none yet) and
  // castscope's id of the thread (0: not given yet).
  EventLog::Slot* ring = nullptr;
  uint64_t ring_log = 0;
  uint32_t thread_id = 0;
  // context/op_context.h: castscope autocast kernels on this thread's stack,
  // and the depth of the Python package's torch.jit.trace bracket.
  int autocast_kernel_depth = 0;
  int trace_recording_depth = 0;
  // dispatch: records built now are a compile-time duplicate's, not logged.
  bool unlogged = false;
  // dispatch/explicit_casts.h: a conversion castscope records (one of
  // autocast's casts, or an explicit one) is being made: the _to_copy and
  // copy_ calls inside it are its own, not conversions of their own.
  bool making_conversion = false;
  // dispatch/explicit_casts.h: a _to_copy / copy_ dispatched through autograd's keys is running.
  bool dispatched_conversion = false;
  // castscope_compiled_graph_running (agent.h): a compiled graph runs on this thread.
  int compiled_graph_depth = 0;
  // dispatch/explicit_casts.h: an autocast kernel runs an op it set a dtype
  // argument for (fp32_set_opt_dtype, fp32_append_dtype): the conversions the
  // op makes of its input are autocast's.
  bool autocast_dtype_arg = false;
  // dispatch/float8_scaling.h: a maker's float8 conversion runs on this
  // thread (castscope_float8_conversion): its role and scale. Not owned.
  const Float8Scope* float8 = nullptr;
  // castscope_float8_relabelled: the cast castscope's autocast kernel is
  // making changed a subclass's dtype label only (no data converted).
  bool float8_relabelled = false;
  // dispatch/explicit_casts.h: the grad_fn of the last autocast cast noted.
  const void* last_autocast_node = nullptr;
  uint64_t last_autocast_node_seq = 0;
  // context/cast_cache_watch.h: the casts this thread saw the cast cache
  // return. Made at the thread's first cacheable cast the memo did not know,
  // freed at thread exit by an owner touched only then; `cast_memo_gone`
  // once freed, so that none is made again.
  bool cast_memo_gone = false;
  CastMemo* cast_memo = nullptr;
  // context/op_context.h: the Python frame reader's state for this thread
  // (its sites known without the GIL), the reader's to make, free and null.
  void* python_frames = nullptr;
  // context/op_context.h: the autograd graph task whose calling line this
  // thread last asked for (-1: none) and that line.
  int64_t backward_graph_task = -1;
  uint32_t backward_caller = 0;
  // context/op_context.h: the excluded dispatch keys last seen (~0: none
  // yet) and the devices with autocast on that they say (bit per DeviceKind).
  uint64_t autocast_excluded_seen = ~uint64_t{0};
  uint8_t autocast_enabled_seen = 0;
  // Last: read once per op (module) or per module call, kept off the lines the
  // fields above share.
  // castscope_module_enter / _exit (record/module_scopes.h): the module
  // calls this thread is inside, innermost last (deeper ones counted only).
  static constexpr int kModuleDepth = 32;
  uint32_t modules[kModuleDepth] = {};
  int module_depth = 0;
  uint32_t module = 0;  // the innermost known: modules[min(depth, kModuleDepth) - 1]
  // The backward node whose forward module was last looked up, and that module.
  const void* module_node = nullptr;
  uint64_t module_node_seq = 0;
  uint32_t module_of_node = 0;
};

extern thread_local constinit ThreadBlock t_thread_block;

// Sets one of a thread block's flags for a scope (`value`, true by default)
// and puts back what it was.
template <bool ThreadBlock::*kFlag>
class ThreadFlagScope {
 public:
  explicit ThreadFlagScope(ThreadBlock& thread, bool value = true) : thread_(thread), previous_(thread.*kFlag) {
    thread.*kFlag = value;
  }
  ~ThreadFlagScope() { thread_.*kFlag = previous_; }
  ThreadFlagScope(const ThreadFlagScope&) = delete;
  ThreadFlagScope& operator=(const ThreadFlagScope&) = delete;

 private:
  ThreadBlock& thread_;
  bool previous_;
};

// The calling thread's block: one TLS lookup; keep the reference for the op.
// The address goes through an empty asm so that GCC cannot see it is
// &t_thread_block: knowing that every caller passes the block, its
// interprocedural constant propagation made clones of the callees (count_op,
// count_op_casts) that looked the block up again themselves, one
// __tls_get_addr each (docs/performance.md, "fourteenth pass").
inline ThreadBlock& this_thread_block() {
  ThreadBlock* block = &t_thread_block;
  asm("" : "+r"(block));
  return *block;
}

}  // namespace castscope
