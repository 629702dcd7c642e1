// libFuzzer target for spool files: any bytes through the frame parser, and
// every frame it returns through batch decoding, as `load` does; the same
// bytes as an agent's accounting file. Must end (the parser always
// advances) and never crash.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include <google/protobuf/stubs/logging.h>

#include "common/spool/accounting_file.h"
#include "common/spool/spool_reader.h"
#include "server/src/batch/batch_validation.h"

// Protobuf logs every invalid UTF-8 string it refuses; the statuses say enough.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  google::protobuf::SetLogHandler(nullptr);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace castscope;
  castscope::spool::FrameParser parser(std::string_view(reinterpret_cast<const char*>(data), size), "fuzz.cspool");
  std::string_view payload;
  while (parser.next(payload)) {
    collector::DecodedBatch batch;
    (void)collector::decode_batch(payload, collector::BatchLimits(), batch);
  }
  for (const auto& problem : parser.problems()) (void)problem.str();
  if (const auto accounting = spool::parse_accounting(std::string_view(reinterpret_cast<const char*>(data), size))) {
    collector::DecodedBatch batch;
    (void)collector::decode_batch(*accounting, collector::BatchLimits(), batch);
  }
  return 0;
}
