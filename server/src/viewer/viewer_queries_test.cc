#include "server/src/viewer/viewer_queries.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "server/src/ingest/collector_core.h"
#include "server/src/store/timeline_tiles.h"
#include "server/testing/test_batches.h"

namespace castscope::collector::viewer {
namespace {

}  // namespace
}  // namespace castscope::collector::viewer
