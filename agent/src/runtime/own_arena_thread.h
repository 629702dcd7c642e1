// Attach's work on a thread of its own, so that what it allocates stays out
// of the caller's malloc arena.
//
// Attaching makes thousands of long-lived allocations (policies, tables,
// the dispatcher's registrations, the transport). glibc serves a thread
// from its arena: made on the job's thread (the main thread, whose arena
// its ops allocate from), they left that arena's free chunks scattered
// between them, and the ops' small aligned allocations (c10's 64-byte
// alignment, glibc 2.36's memalign: no thread cache) then split and merged
// chunks on every op: a 1x3x8x8 conv2d spent 600-2 500 instructions more per
// op in malloc than natively, with exactly the same requests in the same
// order. Made on another thread, they land in another arena, and the job's
// arena looks to its ops as it does natively (docs/performance.md,
// "thirteenth pass"). With MALLOC_ARENA_MAX=1 every thread shares one arena
// and nothing changes.
#pragma once

#include <exception>
#include <system_error>
#include <thread>
#include <utility>

namespace castscope {

// Runs `work()` on a new thread and returns what it returned, or rethrows
// what it threw; on the calling thread when no thread can be started.
template <class Work>
auto run_on_own_thread(Work&& work) -> decltype(work()) {
  using Result = decltype(work());
  Result result{};
  std::exception_ptr thrown;
  std::thread worker;
  try {
    worker = std::thread([&] {
      try {
        result = work();
      } catch (...) {
        thrown = std::current_exception();
      }
    });
  } catch (const std::system_error&) {  // no thread to be had (EAGAIN): the caller's, as before
    return work();
  }
  worker.join();
  if (thrown) std::rethrow_exception(thrown);
  return result;
}

}  // namespace castscope
