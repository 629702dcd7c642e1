#include "server/testing/stored_run.h"

#include <memory>

#include "server/src/store/store_reader.h"
#include "server/src/store/store_writer.h"

namespace castscope::collector::testing {

Status store_batches(const std::string& db, const std::vector<castscope::v1::Batch>& batches) {
  std::unique_ptr<StoreWriter> writer;
  if (Status s = StoreWriter::open(db, writer); !s.ok()) return s;
  if (Status s = writer->begin(); !s.ok()) return s;
  uint64_t received_ns = 0;
  for (const castscope::v1::Batch& batch : batches) {
    bool duplicate = true;
    received_ns += 1000;
    if (Status s = writer->store_batch(batch, received_ns, duplicate); !s.ok()) return s;
    if (duplicate)
      return Status::internal("stored batch " + std::to_string(batch.sequence()) + " of agent " +
                              batch.agent().agent_id() + " was a duplicate");
  }
  return writer->commit();
}

Status list_runs(const std::string& db, castscope::v1::ListRunsResponse& out) {
  std::unique_ptr<StoreReader> reader;
  if (Status s = StoreReader::open(db, reader); !s.ok()) return s;
  return reader->list_runs(out);
}

}  // namespace castscope::collector::testing
