// `castscope-collector load`: imports spool directories (see
// common/spool/spool_format.h) through the collector core, so validation and
// dedup are the same as for live streams (loading twice stores once).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "server/src/batch/batch_validation.h"
#include "server/src/ingest/collector_core.h"

namespace castscope::collector {

struct SpoolImportReport {
  uint64_t agent_dirs = 0;
  uint64_t segments = 0;
  uint64_t batches_stored = 0;
  uint64_t batches_duplicate = 0;
  uint64_t batches_failed = 0;  // valid, but the store failed
  uint64_t events_stored = 0;
  uint64_t frames_skipped = 0;  // corrupt, cut off, or not a valid batch
  uint64_t accounting_batches = 0;  // agents' accounting files taken (their last batches were lost)
  std::vector<std::string> problems;  // one per skip: file, byte offset or frame, why

  bool clean() const { return frames_skipped == 0 && batches_failed == 0; }
};

// Bytes of spool segments read so far, of all there are (for a progress line).
using SpoolProgress = std::function<void(uint64_t done_bytes, uint64_t total_bytes)>;

// Each path is a spool directory (one folder per agent) or one agent folder.
// Returns once every batch is acknowledged. `progress`, if set, is called on
// this thread after each batch is queued.
SpoolImportReport import_spool(CollectorCore& core, const std::vector<std::string>& paths, const BatchLimits& limits,
                               const SpoolProgress& progress = nullptr);

}  // namespace castscope::collector
