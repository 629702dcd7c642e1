// castscope's own thread for the agent's start, so that what the start
// allocates stays out of the job's malloc arenas.
//
// Attaching makes hundreds of KiB of long-lived allocations (policies,
// tables, the dispatcher's registrations, the transport). glibc serves a
// thread from its arena: made on the job's thread (the main thread, whose
// arena its ops allocate from), they took that arena's free chunks, and the
// ops' small aligned allocations (c10's 64-byte alignment; glibc 2.36's
// memalign has no thread cache) then split and merged other chunks on every
// op: a 1x3x8x8 conv2d spent 600-2 500 instructions more per op in malloc
// than natively, with exactly the same requests in the same order. Made on
// a thread of castscope's, they land in that thread's arena
// (docs/performance.md, "thirteenth pass").
//
// The thread lives as long as the process, parked between starts: glibc
// gives a finished thread's arena to the next thread created, so ending it
// would put the job's next thread (an intra-op worker, autograd's device
// threads) beside those allocations instead. With MALLOC_ARENA_MAX=1 every
// thread shares one arena and nothing changes.
#pragma once

#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <system_error>
#include <thread>

namespace castscope {

class OwnArenaThread {
 public:
  // The process's, made on first use; a forked child, which has no copy of
  // the parent's thread, gets one of its own. Never destroyed: its thread
  // may still be parked when the process exits.
  static OwnArenaThread& process() {
    static std::atomic<OwnArenaThread*> current{nullptr};
    OwnArenaThread* seen = current.load(std::memory_order_acquire);
    while (seen == nullptr || seen->pid_ != getpid()) {
      auto* made = new OwnArenaThread();  // starts no thread until run()
      if (current.compare_exchange_strong(seen, made, std::memory_order_acq_rel)) return *made;
      delete made;  // another caller's won; `seen` is it
    }
    return *seen;
  }

  // Runs `work()` on the thread and returns what it returned, or rethrows
  // what it threw; on the calling thread when no thread can be started. One
  // call at a time.
  template <class Work>
  auto run(Work&& work) -> decltype(work()) {
    using Result = decltype(work());
    const std::lock_guard<std::mutex> one_at_a_time(run_mutex_);
    Result result{};
    std::exception_ptr thrown;
    const std::function<void()> task = [&] {
      try {
        result = work();
      } catch (...) {
        thrown = std::current_exception();
      }
    };
    std::unique_lock<std::mutex> lock(mutex_);
    if (!started_) {
      try {
        std::thread(&OwnArenaThread::serve, this).detach();
      } catch (const std::system_error&) {  // no thread to be had (EAGAIN): the caller's, as before
        lock.unlock();
        return work();
      }
      started_ = true;
    }
    task_ = &task;
    changed_.notify_all();
    changed_.wait(lock, [&] { return task_ == nullptr; });
    lock.unlock();
    if (thrown) std::rethrow_exception(thrown);
    return result;
  }

 private:
  OwnArenaThread() : pid_(getpid()) {}

  void serve() {
    std::unique_lock<std::mutex> lock(mutex_);
    for (;;) {
      changed_.wait(lock, [&] { return task_ != nullptr; });
      const std::function<void()>* task = task_;
      lock.unlock();
      (*task)();  // catches what the work throws
      lock.lock();
      task_ = nullptr;
      changed_.notify_all();
    }
  }

  const pid_t pid_;
  std::mutex run_mutex_;
  std::mutex mutex_;
  std::condition_variable changed_;
  const std::function<void()>* task_ = nullptr;  // the caller's, until done
  bool started_ = false;
};

}  // namespace castscope
