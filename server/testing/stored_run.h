// Runs written into a new SQLite store, for the report, viewer and export
// tests and the export bench.
#pragma once

#include <string>
#include <vector>

#include "castscope/v1/transport.pb.h"
#include "server/src/status.h"

namespace castscope::collector::testing {

// Stores `batches` in the store at `db` (created if new), batch i as received
// at 1000 * (i + 1) ns, in one transaction. A batch the store takes
// for a duplicate is an error: a fixture's batches are all new.
Status store_batches(const std::string& db, const std::vector<castscope::v1::Batch>& batches);

// The runs of the store at `db`, as a ListRuns answers them.
Status list_runs(const std::string& db, castscope::v1::ListRunsResponse& out);

}  // namespace castscope::collector::testing
