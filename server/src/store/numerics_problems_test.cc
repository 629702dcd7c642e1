#include "server/src/store/numerics_problems.h"

#include <gtest/gtest.h>
#include <sqlite3.h>

#include <string>

namespace castscope::collector {
namespace {

using Kind = v1::NumericsSummary::Kind;

// The SQL condition and the C++ test agree on every kind and combination of counts.
TEST(NumericsProblems, TheSqlAndTheCppTestAgree) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(":memory:", &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "CREATE TABLE numerics (id INTEGER PRIMARY KEY, kind, overflowed, underflowed, nonfinite, nan)",
                         nullptr, nullptr, nullptr),
            SQLITE_OK);
  int expected_problems = 0;
  int id = 0;
  for (const Kind kind : {v1::NumericsSummary::KIND_CAST, v1::NumericsSummary::KIND_OP_OUTPUT,
                          v1::NumericsSummary::KIND_SCALER_UPDATE}) {
    for (int bits = 0; bits < 16; ++bits) {
      const NumericsCounts n{kind, uint64_t(bits & 1), uint64_t((bits >> 1) & 1), uint64_t((bits >> 2) & 1),
                             uint64_t((bits >> 3) & 1)};
      expected_problems += is_numerics_problem(n) ? 1 : 0;
      const std::string insert = "INSERT INTO numerics VALUES (" + std::to_string(++id) + ", " +
                                 std::to_string(static_cast<int>(kind)) + ", " + std::to_string(n.overflowed) + ", " +
                                 std::to_string(n.underflowed) + ", " + std::to_string(n.nonfinite) + ", " +
                                 std::to_string(n.nan) + ")";
      ASSERT_EQ(sqlite3_exec(db, insert.c_str(), nullptr, nullptr, nullptr), SQLITE_OK);
    }
  }
  int found = -1;
  const std::string count = "SELECT count(*) FROM numerics WHERE 1" + numerics_problems_sql();
  ASSERT_EQ(sqlite3_exec(
                db, count.c_str(),
                [](void* out, int, char** values, char**) {
                  *static_cast<int*>(out) = std::stoi(values[0]);
                  return 0;
                },
                &found, nullptr),
            SQLITE_OK)
      << count;
  EXPECT_EQ(found, expected_problems);
  EXPECT_EQ(expected_problems, 14 + 8);  // casts: any of overflowed, underflowed, nan; ops: nonfinite; updates: none
  sqlite3_close(db);
}

TEST(NumericsProblems, TheWorstComesFirstAndUnderflowAloneIsTheMildOne) {
  EXPECT_EQ(worst_numerics_problem({v1::NumericsSummary::KIND_CAST, 1, 1, 0, 1}), NumericsProblem::kOverflow);
  EXPECT_EQ(worst_numerics_problem({v1::NumericsSummary::KIND_CAST, 0, 1, 0, 1}), NumericsProblem::kNan);
  EXPECT_EQ(worst_numerics_problem({v1::NumericsSummary::KIND_CAST, 0, 1, 5, 0}), NumericsProblem::kUnderflow);
  EXPECT_EQ(worst_numerics_problem({v1::NumericsSummary::KIND_OP_OUTPUT, 3, 0, 1, 0}), NumericsProblem::kNonfiniteOutput);
  EXPECT_EQ(worst_numerics_problem({v1::NumericsSummary::KIND_OP_OUTPUT, 3, 0, 0, 0}), NumericsProblem::kNone);
  EXPECT_EQ(numerics_problem_name(NumericsProblem::kNonfiniteOutput), "nonfinite-output");
}

TEST(NumericsProblems, OneLinePerProblemInTheTracesWords) {
  const NumericsProblemText cast{{v1::NumericsSummary::KIND_CAST, 3, 1234, 0, 2}, 4096, "aten::mm", "self", "float32",
                                 "float16", "train.py:12"};
  EXPECT_EQ(numerics_problem_lines(cast),
            (std::vector<std::string>{
                "3 of 4096 values became inf casting float32->float16 (self of aten::mm at train.py:12)",
                "2 of 4096 values were NaN before casting float32->float16 (self of aten::mm at train.py:12)",
                "1234 of 4096 values became 0 casting float32->float16 (self of aten::mm at train.py:12)"}));
  EXPECT_EQ(numerics_problem_lines(cast, grouped_count)[2],
            "1,234 of 4,096 values became 0 casting float32->float16 (self of aten::mm at train.py:12)");
  const NumericsProblemText op{{v1::NumericsSummary::KIND_OP_OUTPUT, 0, 0, 7, 0}, 64, "aten::exp", "", "float16", "", ""};
  EXPECT_EQ(numerics_problem_lines(op), (std::vector<std::string>{
                                            "aten::exp produced 7 inf/NaN of 64 values from finite inputs (float16 "
                                            "output at <no source location>)"}));
  EXPECT_EQ(grouped_count(0), "0");
  EXPECT_EQ(grouped_count(999), "999");
  EXPECT_EQ(grouped_count(1000), "1,000");
  EXPECT_EQ(grouped_count(1234567), "1,234,567");
}

}  // namespace
}  // namespace castscope::collector
