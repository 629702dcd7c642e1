// The JSON audit report of one run (schema: docs/schema/report.schema.json):
// metadata, totals, per-site and per-op tables, findings. Metadata and
// counts only, never tensor contents.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "server/src/status.h"
#include "server/src/analysis/run_data.h"
#include "server/src/store/sqlite_store.h"

namespace castscope::collector {

// Reads `run_id` from the store at `db_path` (read-only) and builds its
// report; with `rank`, of that rank's processes alone (NOT_FOUND when the run
// has none); `progress` as load_run_data's.
Status build_run_report(const std::string& db_path, const std::string& run_id, nlohmann::json& out,
                        std::optional<int32_t> rank = std::nullopt, const ReadProgress& progress = nullptr);

}  // namespace castscope::collector
