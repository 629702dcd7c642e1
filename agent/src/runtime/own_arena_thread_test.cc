#include "agent/src/runtime/own_arena_thread.h"

#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <thread>

namespace castscope {
namespace {

TEST(OwnArenaThread, RunsTheWorkOnAnotherThreadAndReturnsItsResult) {
  const std::thread::id caller = std::this_thread::get_id();
  std::thread::id ran_on;
  const int result = run_on_own_thread([&] {
    ran_on = std::this_thread::get_id();
    return 7;
  });
  EXPECT_EQ(result, 7);
  EXPECT_NE(ran_on, caller);
}

TEST(OwnArenaThread, WritesTheCallersVariablesBeforeReturning) {
  std::string error;
  const int rc = run_on_own_thread([&] {
    error = "castscope: policy refused";
    return 2;
  });
  EXPECT_EQ(rc, 2);
  EXPECT_EQ(error, "castscope: policy refused");
}

TEST(OwnArenaThread, RethrowsWhatTheWorkThrewOnTheCallersThread) {
  EXPECT_THROW(run_on_own_thread([]() -> int { throw std::invalid_argument("bad config"); }), std::invalid_argument);
  try {
    run_on_own_thread([]() -> int { throw std::runtime_error("no transport"); });
    FAIL() << "nothing rethrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "no transport");
  }
}

}  // namespace
}  // namespace castscope
