// Writes the fuzzers' builder-made seeds (checked in; run again only to
// change them): batches of the unit tests' fixtures, which reach every event
// kind and field the agent's real batches beside them may not, and a spool
// segment of them.
//
//   build/server/testing/castscope_write_fuzz_seeds tests/fuzz/corpus
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "server/testing/batch_builder.h"
#include "server/testing/spool_files.h"

namespace fixtures = castscope::collector::testing;
namespace v1 = castscope::v1;

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: castscope_write_fuzz_seeds CORPUS_DIR (tests/fuzz/corpus)\n");
    return 2;
  }
  const std::filesystem::path corpus = argv[1];
  castscope::v1::Batch aggregate = fixtures::make_batch("run", "agent", 2, 10);
  aggregate.mutable_agent()->set_aggregate(true);
  fixtures::add<v1::specs::CastCounts>(aggregate, {.seq = 20, .first_ts_ns = 1000, .last_ts_ns = 1002, .thread = 2,
                                                   .op_id = 1, .arg_name_id = 2, .location_id = 1, .arg_index = 1,
                                                   .policy = castscope::v1::CAST_POLICY_LOWER_PRECISION_FP,
                                                   .src_dtype = castscope::v1::DTYPE_FLOAT32,
                                                   .dst_dtype = castscope::v1::DTYPE_FLOAT16, .count = 2,
                                                   .bytes = 8192, .max_version_gap = 12, .round_trips = 1});
  fixtures::add<v1::specs::OpCounts>(aggregate, {.seq = 21, .first_ts_ns = 1000, .last_ts_ns = 1002, .op_id = 1,
                                                 .location_id = 1, .calls = 3, .errors = 1, .cpu_duration_ns = 900});
  const std::vector<std::pair<std::string, std::string>> batches = {
      {"builder_make_batch.bin", fixtures::make_batch("run", "agent", 1).SerializeAsString()},
      {"builder_export_run.bin", fixtures::export_run_batch().SerializeAsString()},
      {"builder_aggregate.bin", aggregate.SerializeAsString()},
  };
  std::vector<std::string> frames;
  for (const auto& [name, bytes] : batches) {
    std::ofstream(corpus / "batch" / name, std::ios::binary) << bytes;
    frames.push_back(fixtures::frame(bytes));
  }
  fixtures::write_segment(corpus / "spool" / "builder_three_frames.bin", frames);
  std::printf("wrote %zu batch seeds and a spool segment under %s\n", batches.size(), corpus.c_str());
  return 0;
}
