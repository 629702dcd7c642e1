#include "agent/src/schedule/window_schedule.h"

#include <gtest/gtest.h>

namespace castscope {
namespace {

using Change = WindowSchedule::Change;
using std::chrono::milliseconds;
const WindowSchedule::Clock::time_point t0{};

TEST(WindowSchedule, TwoStepsInAHundred) {
  WindowSchedule windows({2, 100, 5000, 60000}, t0);
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

TEST(WindowSchedule, ZeroStepsMeansAlwaysOpen) {
  WindowSchedule windows({0, 100, 5000, 60000}, t0);
  for (uint64_t step = 1; step < 500; ++step) EXPECT_EQ(windows.on_step(step, t0), Change::kNone);
  EXPECT_EQ(windows.on_tick(t0 + milliseconds(600000)), Change::kNone);
  EXPECT_TRUE(windows.open());
}

TEST(WindowSchedule, AWindowClosesAfterItsTimeAndJobsWithoutStepsGetOneNowAndThen) {
  WindowSchedule windows({2, 100, 5000, 60000}, t0);
  EXPECT_EQ(windows.on_tick(t0 + milliseconds(4999)), Change::kNone);
  EXPECT_EQ(windows.on_tick(t0 + milliseconds(5000)), Change::kClose);
  EXPECT_EQ(windows.on_tick(t0 + milliseconds(64999)), Change::kNone);
  EXPECT_EQ(windows.on_tick(t0 + milliseconds(65000)), Change::kOpen);
}

TEST(WindowSchedule, ALongSetupStillGivesTheFirstStepsAWindow) {
  WindowSchedule windows({2, 100, 5000, 60000}, t0);
  EXPECT_EQ(windows.on_tick(t0 + milliseconds(5000)), Change::kClose);
  EXPECT_EQ(windows.on_step(1, t0 + milliseconds(9000)), Change::kOpen);
  EXPECT_EQ(windows.on_step(2, t0 + milliseconds(9100)), Change::kNone);
  EXPECT_EQ(windows.on_step(3, t0 + milliseconds(9200)), Change::kClose);
}

TEST(WindowSchedule, ACaptureWindowLastsItsOwnStepsAndNoTimeLimitClosesIt) {
  WindowSchedule windows({2, 100, 5000, 60000}, t0);
  EXPECT_EQ(windows.on_step(1, t0), Change::kNone);
  EXPECT_EQ(windows.on_step(2, t0), Change::kClose);
  EXPECT_EQ(windows.open_capture(7, 200, t0), Change::kOpen);
  EXPECT_TRUE(windows.capture_window_open());
  EXPECT_EQ(windows.open_capture(8, 200, t0), Change::kNone);  // one at a time
  EXPECT_EQ(windows.on_tick(t0 + milliseconds(600000)), Change::kNone);
  EXPECT_EQ(windows.on_step(206, t0), Change::kNone);
  EXPECT_EQ(windows.on_step(207, t0), Change::kClose);
  EXPECT_FALSE(windows.capture_window_open());
  // Closed by the caller (the next skipped step) before its count.
  EXPECT_EQ(windows.open_capture(250, 200, t0), Change::kOpen);
  EXPECT_EQ(windows.close(t0), Change::kClose);
  EXPECT_EQ(windows.close(t0), Change::kNone);
}

TEST(WindowSchedule, HoldOpenKeepsAWindowPastItsStepsAndTime) {
  WindowSchedule windows({2, 100, 5000, 60000}, t0);
  EXPECT_EQ(windows.on_step(2, t0, /*hold_open=*/true), Change::kNone);
  EXPECT_EQ(windows.on_tick(t0 + milliseconds(9000), /*hold_open=*/true), Change::kNone);
  EXPECT_TRUE(windows.open());
  EXPECT_EQ(windows.on_step(3, t0 + milliseconds(9000)), Change::kClose);
}

}  // namespace
}  // namespace castscope
