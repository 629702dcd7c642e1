// The export writers' tests: a stored run exported into a new temp dir, as a
// Perfetto or a Chrome trace. Header-only: the writers' tests link the export
// library themselves.
#pragma once

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <string>

#include "server/src/export/export_run.h"
#include "server/testing/test_batches.h"

namespace castscope::collector::testing {

enum class TraceFormat { kPerfetto, kChrome };

struct ExportedTrace {
  std::string path;
  ExportSummary summary;
};

// Exports run "run" of `db` into the new temp dir `dir_name`; a failed export,
// or a trace others may read (not mode 0600), fails the test.
inline ExportedTrace export_trace(const std::string& db, const std::string& dir_name, TraceFormat format) {
  ExportedTrace out;
  const bool perfetto = format == TraceFormat::kPerfetto;
  out.path = (temp_dir(dir_name) / (perfetto ? "run.pftrace" : "run.json")).string();
  const ExportOptions options{db, "run", perfetto ? out.path : "", perfetto ? "" : out.path};
  const Status s = export_run(options, out.summary);
  EXPECT_TRUE(s.ok()) << s.message();
  struct stat st {};
  EXPECT_EQ(::stat(out.path.c_str(), &st), 0) << out.path;
  EXPECT_EQ(st.st_mode & 0777, 0600u) << out.path;
  return out;
}

}  // namespace castscope::collector::testing
