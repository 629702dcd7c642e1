#include "server/src/store/numerics_problems.h"

namespace castscope::collector {
namespace {

using Kind = v1::NumericsSummary::Kind;

// The problems, worst first: which kind of window, which count, its column.
struct ProblemRule {
  NumericsProblem problem;
  Kind kind;
  uint64_t NumericsCounts::*count;
  const char* column;
};
constexpr ProblemRule kRules[] = {
    {NumericsProblem::kOverflow, v1::NumericsSummary::KIND_CAST, &NumericsCounts::overflowed, "overflowed"},
    {NumericsProblem::kNan, v1::NumericsSummary::KIND_CAST, &NumericsCounts::nan, "nan"},
    {NumericsProblem::kUnderflow, v1::NumericsSummary::KIND_CAST, &NumericsCounts::underflowed, "underflowed"},
    {NumericsProblem::kNonfiniteOutput, v1::NumericsSummary::KIND_OP_OUTPUT, &NumericsCounts::nonfinite, "nonfinite"},
};

std::string plain_count(uint64_t n) { return std::to_string(n); }

}  // namespace

std::string_view numerics_problem_name(NumericsProblem problem) {
  switch (problem) {
    case NumericsProblem::kOverflow: return "overflow";
    case NumericsProblem::kNan: return "nan";
    case NumericsProblem::kUnderflow: return "underflow";
    case NumericsProblem::kNonfiniteOutput: return "nonfinite-output";
    case NumericsProblem::kNone: break;
  }
  return "";
}

NumericsCounts numerics_counts(const StoredNumerics& row) {
  return {row.kind(), static_cast<uint64_t>(row.overflowed), static_cast<uint64_t>(row.underflowed),
          static_cast<uint64_t>(row.nonfinite), static_cast<uint64_t>(row.nan)};
}

NumericsProblem worst_numerics_problem(const NumericsCounts& n) {
  for (const ProblemRule& rule : kRules)
    if (n.kind == rule.kind && n.*rule.count > 0) return rule.problem;
  return NumericsProblem::kNone;
}

std::string numerics_problems_sql() {
  // (kind = K AND (a > 0 OR b > 0)) OR ..., one group per kind in the rules' order.
  std::string sql;
  for (size_t i = 0; i < std::size(kRules); ++i) {
    if (i > 0 && kRules[i].kind == kRules[i - 1].kind) continue;
    std::string counts;
    for (size_t j = i; j < std::size(kRules) && kRules[j].kind == kRules[i].kind; ++j)
      counts += (counts.empty() ? "" : " OR ") + std::string(kRules[j].column) + " > 0";
    sql += (sql.empty() ? "" : " OR ") + std::string("(kind = ") + std::to_string(static_cast<int>(kRules[i].kind)) +
           " AND (" + counts + "))";
  }
  return " AND (" + sql + ")";
}

std::vector<std::string> numerics_problem_lines(const NumericsProblemText& t, std::string (*count)(uint64_t)) {
  if (count == nullptr) count = plain_count;
  const std::string where = t.where.empty() ? "<no source location>" : std::string(t.where);
  const std::string of = " of " + count(t.values) + " values";
  std::vector<std::string> out;
  if (t.counts.kind == v1::NumericsSummary::KIND_OP_OUTPUT) {
    if (t.counts.nonfinite > 0)
      out.push_back(std::string(t.op) + " produced " + count(t.counts.nonfinite) + " inf/NaN" + of +
                    " from finite inputs (" + std::string(t.src) + " output at " + where + ")");
    return out;
  }
  const std::string cast = "casting " + std::string(t.src) + "->" + std::string(t.dst) + " (" + std::string(t.arg) +
                           " of " + std::string(t.op) + " at " + where + ")";
  const auto add = [&](uint64_t n, const char* what) {
    if (n > 0) out.push_back(count(n) + of + " " + what + " " + cast);
  };
  add(t.counts.overflowed, "became inf");
  add(t.counts.nan, "were NaN before");
  add(t.counts.underflowed, "became 0");
  return out;
}

std::string grouped_count(uint64_t n) {
  const std::string digits = std::to_string(n);
  std::string out;
  out.reserve(digits.size() + digits.size() / 3);
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i > 0 && (digits.size() - i) % 3 == 0) out.push_back(',');
    out.push_back(digits[i]);
  }
  return out;
}

}  // namespace castscope::collector
