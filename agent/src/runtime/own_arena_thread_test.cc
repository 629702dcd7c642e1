#include "agent/src/runtime/own_arena_thread.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace castscope {
namespace {

std::thread::id run_and_tell_thread() {
  return OwnArenaThread::process().run([] { return std::this_thread::get_id(); });
}

TEST(OwnArenaThread, RunsTheWorkOnAnotherThreadAndReturnsItsResult) {
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  const int result = OwnArenaThread::process().run([&] {
    ran_on = std::this_thread::get_id();
    return 7;
  });
  EXPECT_EQ(result, 7);
  EXPECT_NE(ran_on, caller);
}

// One thread for every start: a finished thread's arena would go to the
// job's next thread (own_arena_thread.h).
TEST(OwnArenaThread, EveryRunUsesTheSameThreadWhichStaysAlive) {
  const std::thread::id first = run_and_tell_thread();
  EXPECT_EQ(run_and_tell_thread(), first);
  std::thread([&] { EXPECT_EQ(run_and_tell_thread(), first); }).join();
  EXPECT_EQ(&OwnArenaThread::process(), &OwnArenaThread::process());
}

TEST(OwnArenaThread, WritesTheCallersVariablesBeforeReturning) {
  std::string error;
  const int rc = OwnArenaThread::process().run([&] {
    error = "castscope: policy refused";
    return 2;
  });
  EXPECT_EQ(rc, 2);
  EXPECT_EQ(error, "castscope: policy refused");
}

TEST(OwnArenaThread, RethrowsWhatTheWorkThrewOnTheCallersThreadAndServesOn) {
  EXPECT_THROW(OwnArenaThread::process().run([]() -> int { throw std::invalid_argument("bad config"); }),
               std::invalid_argument);
  try {
    OwnArenaThread::process().run([]() -> int { throw std::runtime_error("no transport"); });
    FAIL() << "nothing rethrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "no transport");
  }
  EXPECT_EQ(OwnArenaThread::process().run([] { return 3; }), 3);
}

TEST(OwnArenaThread, CallersFromSeveralThreadsEachGetTheirOwnResult) {
  std::vector<std::thread> callers;
  std::vector<int> results(8, -1);
  for (int i = 0; i < 8; ++i)
    callers.emplace_back([&results, i] { results[i] = OwnArenaThread::process().run([i] { return i * i; }); });
  for (auto& caller : callers) caller.join();
  for (int i = 0; i < 8; ++i) EXPECT_EQ(results[i], i * i);
}

// A forked child has no copy of the parent's thread: it starts its own
// rather than waiting on one that does not exist there.
TEST(OwnArenaThread, AForkedChildGetsAThreadOfItsOwn) {
  const std::thread::id parents = run_and_tell_thread();
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const int result = OwnArenaThread::process().run([] { return 42; });
    _exit(result == 42 ? 0 : 1);
  }
  int status = 0;
  ASSERT_EQ(waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
  EXPECT_EQ(run_and_tell_thread(), parents);
}

}  // namespace
}  // namespace castscope
