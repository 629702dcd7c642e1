// A GoogleTest fixture for tests that write spool folders: a fresh folder per
// test (named by process, suite and test, so tests running side by side never
// share one), removed afterwards. Used by the spool's and the forwarder's tests.
#pragma once

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <string>

namespace castscope::testing {

class SpoolFolderTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* test = ::testing::UnitTest::GetInstance()->current_test_info();
    root_ = std::filesystem::temp_directory_path() / ("castscope-" + std::string(test->test_suite_name()) + "-" +
                                                      std::to_string(getpid()) + "-" + test->name());
    std::filesystem::remove_all(root_);
  }
  void TearDown() override { std::filesystem::remove_all(root_); }
  // One agent's folder inside the spool folder.
  std::string agent_dir() const { return (root_ / "agent-1").string(); }
  std::filesystem::path root_;
};

}  // namespace castscope::testing
