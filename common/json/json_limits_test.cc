#include "common/json/json_limits.h"

#include <gtest/gtest.h>

#include <string>

namespace castscope {
namespace {

TEST(JsonLimits, CountsNestingOutsideStrings) {
  EXPECT_EQ(scan_json_nesting(R"({"a": [1, {"b": 2}]})", 8).deepest, 3u);
  EXPECT_EQ(scan_json_nesting(R"({"a": "[[[[{{{{", "b": "\"[[["})", 8).deepest, 1u);
  EXPECT_EQ(scan_json_nesting("", 8).deepest, 0u);
  EXPECT_EQ(scan_json_nesting("]]]}}}[", 8).deepest, 1u);  // stray closers never go below zero
}

TEST(JsonLimits, StopsAtTheFirstBracketPastTheLimitWithItsLine) {
  const std::string deep = "{\n\"ops\":\n" + std::string(200000, '[') + std::string(200000, ']') + "}";
  const JsonNesting nesting = scan_json_nesting(deep, 32);
  EXPECT_EQ(nesting.line, 3);
  EXPECT_EQ(nesting.deepest, 33u);
  EXPECT_EQ(scan_json_nesting(std::string(32, '[') + std::string(32, ']'), 32).line, 0);
  EXPECT_EQ(scan_json_nesting(std::string(33, '['), 32).line, 1);
}

TEST(JsonLimits, LinesCountInsideUnterminatedStrings) {
  EXPECT_EQ(scan_json_nesting("\"a\n\nb\" [[", 1).line, 3);
  EXPECT_EQ(scan_json_nesting("\"unterminated \\", 1).line, 0);  // a trailing escape reads nothing past the end
}

TEST(JsonLimits, ErrorNamesSizeOrDepth) {
  EXPECT_EQ(json_limits_error("{}", 16, 4), "");
  EXPECT_EQ(json_limits_error(std::string(17, ' '), 16, 4), "is 17 bytes; castscope reads at most 16");
  EXPECT_EQ(json_limits_error("\n[[[[[", 16, 4),
            "line 2: nested deeper than 4 levels of arrays and objects; castscope stops reading there");
}

}  // namespace
}  // namespace castscope
