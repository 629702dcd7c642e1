// The export writers' tests: a stored run exported into a new temp dir, as a
// Perfetto or a Chrome trace. Header-only: the writers' tests link the export
// library themselves.
#pragma once

#include <gtest/gtest.h>

#include <string>

#include "server/src/export/export_run.h"
#include "server/testing/test_batches.h"

namespace castscope::collector::testing {

enum class TraceFormat { kPerfetto, kChrome };

struct ExportedTrace {
  std::string path;  // mode 0600 (the export's)
  ExportSummary summary;
};

// Exports run "run" of `db` into the new temp dir `dir_name`; a failed export
// fails the test, naming why.
inline ExportedTrace export_trace(const std::string& db, const std::string& dir_name, TraceFormat format) {
  ExportedTrace out;
  const bool perfetto = format == TraceFormat::kPerfetto;
  out.path = (temp_dir(dir_name) / (perfetto ? "run.pftrace" : "run.json")).string();
  const ExportOptions options{db, "run", perfetto ? out.path : "", perfetto ? "" : out.path};
  const Status s = export_run(options, out.summary);
  EXPECT_TRUE(s.ok()) << s.message();
  return out;
}

}  // namespace castscope::collector::testing
