// libFuzzer target for what a collector reads from the network: any bytes,
// as an IngestRequest (gRPC) and as a Batch (spool frame), must decode and
// validate to a status, never a crash or a sanitizer report. Valid batches
// are resolved too, as the store and subscribers would.
#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

#include <google/protobuf/stubs/logging.h>

#include "server/src/batch/batch_validation.h"
#include "server/src/batch/stored_events.h"

// Protobuf logs every invalid UTF-8 string it refuses; the statuses say enough.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace castscope::collector;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  const BatchLimits limits;

  DecodedBatch batch;
  if (decode_batch(bytes, limits, batch).ok()) {
    std::vector<castscope::v1::StoredEvent> events;
    resolve_batch_events(batch.batch(), events);
  }

  castscope::v1::IngestRequest request;
  if (request.ParseFromArray(data, static_cast<int>(size)) && request.has_batch())
    (void)validate_batch(request.batch(), limits).message();
  return 0;
}
