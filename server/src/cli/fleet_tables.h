#pragma once
// The fleet questions' answers as tables for a terminal (`castscope fleet
// jobs|sites|findings|compare|job` without --json): the JSON rows of
// server/src/fleet/fleet_queries.h, columns chosen per question.

#include <ostream>
#include <string>

#include <nlohmann/json.hpp>

namespace castscope::collector {

// `what`: jobs, sites, findings, compare (job_a, job_b name its two count
// columns) or job (an object: its ranks, then its findings).
void print_fleet_table(const std::string& what, const nlohmann::json& answer, const std::string& job_a,
                       const std::string& job_b, std::ostream& out);

}  // namespace castscope::collector
