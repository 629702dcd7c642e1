// The report's precision map (docs/events.md, "Modules and the precision map"): per
// nn.Module and parameter, the dtypes it was stored, computed, communicated
// and cast in, and the bytes each maker converted, per optimizer step where
// the run's steps are known.
#pragma once

#include <nlohmann/json.hpp>

#include "server/src/analysis/run_data.h"

namespace castscope::collector {

nlohmann::json precision_map_json(const RunData& run);

}  // namespace castscope::collector
