// What /metrics answers (docs/metrics.md): the core's counters, the
// transports' refusals, the live analyzer's work and a few figures of the
// store, in Prometheus' text format. Labels are only fixed words (reasons,
// finding kinds and severities): never a run, an agent or a source path.
#pragma once

#include <cstdint>
#include <string>

#include "server/src/ingest/collector_core.h"
#include "server/src/status.h"
#include "server/src/viewer/viewer_queries.h"

namespace castscope::collector {

// `core` null: a read-only viewer (castscope-collector view): the store's
// figures only. `live_viewers`: the viewer pages following live now.
Status metrics_page(CollectorCore* core, viewer::ViewerQueryPool& store, const std::string& db_path,
                    uint64_t live_viewers, std::string& out);

}  // namespace castscope::collector
