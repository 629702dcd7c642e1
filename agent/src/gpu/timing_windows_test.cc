#include "agent/src/gpu/timing_windows.h"

#include <gtest/gtest.h>

namespace castscope {
namespace {

using Change = TimingWindows::Change;
using std::chrono::milliseconds;
const TimingWindows::Clock::time_point t0{};

TEST(TimingWindows, TwoStepsInAHundred) {
  TimingWindows windows({2, 100, 5000, 60000}, t0);
  EXPECT_TRUE(windows.open());  // from the start
  EXPECT_EQ(windows.on_step(1, t0), Change::kNone);
  EXPECT_EQ(windows.on_step(2, t0), Change::kClose);
  int open_steps = 0;
  for (uint64_t step = 3; step <= 1001; ++step) {
    windows.on_step(step, t0);
    open_steps += windows.open() ? 1 : 0;
  }
  // Opened after steps 100, 200, ..., 1000: open while the next two steps run.
  EXPECT_EQ(open_steps, 20);
}

TEST(TimingWindows, ZeroStepsMeansAlwaysOpen) {
  TimingWindows windows({0, 100, 5000, 60000}, t0);
  for (uint64_t step = 1; step < 500; ++step) EXPECT_EQ(windows.on_step(step, t0), Change::kNone);
  EXPECT_EQ(windows.on_tick(t0 + milliseconds(600000)), Change::kNone);
  EXPECT_TRUE(windows.open());
}

TEST(TimingWindows, AWindowClosesAfterItsTimeAndJobsWithoutStepsGetOneNowAndThen) {
  TimingWindows windows({2, 100, 5000, 60000}, t0);
  EXPECT_EQ(windows.on_tick(t0 + milliseconds(4999)), Change::kNone);
  EXPECT_EQ(windows.on_tick(t0 + milliseconds(5000)), Change::kClose);
  EXPECT_EQ(windows.on_tick(t0 + milliseconds(64999)), Change::kNone);
  EXPECT_EQ(windows.on_tick(t0 + milliseconds(65000)), Change::kOpen);
}

TEST(TimingWindows, ALongSetupStillGivesTheFirstStepsAWindow) {
  TimingWindows windows({2, 100, 5000, 60000}, t0);
  EXPECT_EQ(windows.on_tick(t0 + milliseconds(5000)), Change::kClose);
  EXPECT_EQ(windows.on_step(1, t0 + milliseconds(9000)), Change::kOpen);
  EXPECT_EQ(windows.on_step(2, t0 + milliseconds(9100)), Change::kNone);
  EXPECT_EQ(windows.on_step(3, t0 + milliseconds(9200)), Change::kClose);
}

}  // namespace
}  // namespace castscope
