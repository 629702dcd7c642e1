// What the collector's unit tests share: the batch builders, spool files and
// stored runs of castscope_test_batches / castscope_test_store, and the
// GoogleTest-checked shorthands over them.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/testing/batch_builder.h"
#include "server/testing/spool_files.h"
#include "server/testing/stored_run.h"

namespace castscope::collector::testing {

// A new store under the temp dir `name` holding `batches`; returns its path.
inline std::string stored_run(const std::string& name, const std::vector<v1::Batch>& batches) {
  const std::string db = (temp_dir(name) / "store.db").string();
  const Status stored = store_batches(db, batches);
  EXPECT_TRUE(stored.ok()) << stored.message();
  return db;
}

// The export tests' run (export_run_batch) in a new store.
inline std::string store_export_run(const std::string& name) { return stored_run(name, {export_run_batch()}); }
// The same run with its numerics batch (export_numerics_batch).
inline std::string store_export_run_with_numerics(const std::string& name) {
  return stored_run(name, {export_run_batch(), export_numerics_batch()});
}

}  // namespace castscope::collector::testing
