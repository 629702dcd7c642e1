// What makes a numerics summary a problem, and the words for it, said once.
//
// A problem: a cast window whose source values overflowed to inf, were NaN
// already, or underflowed to 0; an op window whose outputs went inf/NaN from
// finite inputs. The C++ test (is_numerics_problem) and the SQL condition
// over the numerics table (numerics_problems_sql) are made from one list, so
// the viewer's marks, the traces' events and /api/numerics agree; the lines
// (numerics_problem_lines) are what the traces, the viewer's tooltip and its
// detail panel say of one. The findings (numerics_findings.cc) speak of a
// site over all its windows, in sentences of their own.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "castscope/v1/events.pb.h"
#include "server/src/store/row_codec.h"

namespace castscope::collector {

// The worst problem of a summary, the first that holds: the trace event's
// name and the viewer mark's colour (underflow alone is the mild one).
enum class NumericsProblem : uint8_t { kNone, kOverflow, kNan, kUnderflow, kNonfiniteOutput };
// "overflow", "nan", "underflow", "nonfinite-output", "" for kNone.
std::string_view numerics_problem_name(NumericsProblem problem);

// A summary's counts as every reader holds them (stored rows, export events).
struct NumericsCounts {
  v1::NumericsSummary::Kind kind = v1::NumericsSummary::KIND_UNSPECIFIED;
  uint64_t overflowed = 0, underflowed = 0, nonfinite = 0, nan = 0;
};

// A stored row's counts (the numerics table, row_codec.h).
NumericsCounts numerics_counts(const StoredNumerics& row);

NumericsProblem worst_numerics_problem(const NumericsCounts& n);
inline bool is_numerics_problem(const NumericsCounts& n) { return worst_numerics_problem(n) != NumericsProblem::kNone; }
// " AND (...)": the same test over the numerics table's columns.
std::string numerics_problems_sql();

// What the lines name: the op, its argument, the cast's dtypes (an op
// window: its output's in `src`), where it ran ("file:line", or "" when
// unknown: "<no source location>") and the window's value counts.
struct NumericsProblemText {
  NumericsCounts counts;
  uint64_t values = 0;
  std::string_view op, arg, src, dst, where;
};
// One line per problem of the summary, the worst first ("3 of 32 values became
// inf casting float32->float16 (self of aten::mm at train.py:12)").
// `count`: how a count is written (the viewer groups digits: "1,234").
std::vector<std::string> numerics_problem_lines(const NumericsProblemText& text,
                                                std::string (*count)(uint64_t) = nullptr);
// 1234567 -> "1,234,567".
std::string grouped_count(uint64_t n);

}  // namespace castscope::collector
