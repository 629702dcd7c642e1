#include "agent/forwarder/give_up_rule.h"

#include <gtest/gtest.h>

namespace castscope {
namespace {

using std::chrono::seconds;

TEST(GiveUpRuleTest, NeverWhileTheAgentLives) {
  GiveUpRule rule(seconds(10));
  const auto t0 = GiveUpRule::Clock::time_point{} + seconds(100);
  rule.unreachable(t0);
  EXPECT_FALSE(rule.give_up(t0 + seconds(1000), /*agent_alive=*/true));
  EXPECT_TRUE(rule.give_up(t0 + seconds(1000), /*agent_alive=*/false));
}

TEST(GiveUpRuleTest, CountsOnlyTheOutageGoingOnNow) {
  GiveUpRule rule(seconds(10));
  const auto t0 = GiveUpRule::Clock::time_point{} + seconds(100);
  rule.unreachable(t0);  // a first outage of 2 s
  rule.unreachable(t0 + seconds(1));
  rule.reached();
  EXPECT_FALSE(rule.unreachable_for(t0 + seconds(3)).has_value());
  // A second outage 20 s after the first began: 2 s old, not 20.
  rule.unreachable(t0 + seconds(20));
  EXPECT_EQ(*rule.unreachable_for(t0 + seconds(22)), seconds(2));
  EXPECT_FALSE(rule.give_up(t0 + seconds(22), false));
  EXPECT_FALSE(rule.give_up(t0 + seconds(29), false));
  EXPECT_TRUE(rule.give_up(t0 + seconds(30), false));
}

TEST(GiveUpRuleTest, ZeroLimitGivesUpAtTheFirstFailureOnceTheAgentIsGone) {
  GiveUpRule rule(seconds(0));
  const auto t0 = GiveUpRule::Clock::time_point{} + seconds(5);
  EXPECT_FALSE(rule.give_up(t0, false));  // never failed yet
  rule.unreachable(t0);
  EXPECT_TRUE(rule.give_up(t0, false));
}

}  // namespace
}  // namespace castscope
