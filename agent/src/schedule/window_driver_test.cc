#include "agent/src/schedule/window_driver.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>
#include <vector>

namespace castscope {
namespace {

using Change = WindowDriver::Change;

TEST(WindowDriver, OpensAtStartClosesAtItsStepAndNothingMovesAfterStop) {
  WindowDriver driver;
  std::vector<Change> changes;
  auto apply = [&](Change c) {
    if (c != Change::kNone) changes.push_back(c);
  };
  bool configured = false;
  driver.start({2, 100, 5000, 60000}, true, [&] { configured = true; }, apply);
  EXPECT_TRUE(configured);
  driver.step(1, false, apply);
  driver.step(2, false, apply);
  EXPECT_EQ(changes, (std::vector<Change>{Change::kOpen, Change::kClose}));
  bool closed = false;
  driver.stop([&] { closed = true; });
  EXPECT_TRUE(closed);
  driver.step(100, false, apply);  // would open a window: stopped, so no
  driver.tick(false, apply);
  EXPECT_EQ(changes.size(), 2u);
}

TEST(WindowDriver, ADisabledStartConfiguresButNeverOpens) {
  WindowDriver driver;
  int configured = 0, applied = 0;
  driver.start({2, 100, 5000, 60000}, false, [&] { ++configured; }, [&](Change) { ++applied; });
  driver.step(100, false, [&](Change) { ++applied; });
  EXPECT_EQ(configured, 1);
  EXPECT_EQ(applied, 0);
}

// Steps from one thread while another stops: after stop() returns, no
// apply runs (each runs under the lock, and stop takes it).
TEST(WindowDriver, AStepRacingAStopNeverAppliesAfterIt) {
  for (int round = 0; round < 50; ++round) {
    WindowDriver driver;
    std::atomic<bool> stopped{false}, applied_after{false};
    driver.start({1, 1, 5000, 60000}, true, [] {}, [](Change) {});
    std::thread stepper([&] {
      for (uint64_t step = 1; step < 2000; ++step)
        driver.step(step, false, [&](Change) {
          if (stopped.load()) applied_after.store(true);
        });
    });
    driver.stop([&] { stopped.store(true); });
    stepper.join();
    EXPECT_FALSE(applied_after.load());
  }
}

}  // namespace
}  // namespace castscope
