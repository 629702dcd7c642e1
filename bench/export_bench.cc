// Trace export benchmark: writes a synthetic run of about --events events
// into a new store (one agent, four threads; per op two casts and one GPU
// kernel, a cache sample every 1000 ops), so `castscope-collector export`
// can be timed on it:
//
//   castscope_export_bench --db /tmp/export-bench.db --events 1000000
//   /usr/bin/time -v castscope-collector export --db /tmp/export-bench.db --run bench
//       --perfetto /tmp/b.pftrace --chrome /tmp/b.json
//
// Results in docs/performance.md ("Trace export").
#include <cstdio>
#include <memory>
#include <string>

#include "server/src/store/store_writer.h"
#include "server/testing/batch_builder.h"

namespace v1 = castscope::v1;
namespace fixtures = castscope::collector::testing;
using castscope::collector::Status;
using castscope::collector::StoreWriter;

int main(int argc, char** argv) {
  std::string db;
  uint64_t events = 1'000'000;
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string word = argv[i];
    if (word == "--db") db = argv[i + 1];
    else if (word == "--events") events = std::stoull(argv[i + 1]);
  }
  if (db.empty()) {
    std::fprintf(stderr, "usage: castscope_export_bench --db NEW_STORE [--events N]\n");
    return 2;
  }
  std::unique_ptr<StoreWriter> writer;
  if (Status s = StoreWriter::open(db, writer); !s.ok()) {
    std::fprintf(stderr, "%s\n", s.message().c_str());
    return 1;
  }
  uint64_t seq = 1, ts = 1'000'000'000, stored = 0, batch_sequence = 1, op_count = 0;
  while (stored < events) {
    v1::Batch batch = fixtures::batch_head(
        {.run_id = "bench", .agent_id = "bench-agent", .pid = 1000, .rank = 0, .hostname = "bench"}, batch_sequence++);
    fixtures::add_strings(batch, 1,
                          {"aten::linear", "aten::matmul", "aten::conv2d", "aten::addmm", "aten::bmm", "input",
                           "weight", "void at::native::elementwise_kernel<copy>", "sm90_gemm_bf16"});
    fixtures::add_location(batch, 1,
                           {.kind = v1::SourceLocation::KIND_PYTHON, .file = "/src/model.py", .line = 42,
                            .function = "forward"});
    for (int n = 0; n < 1024 && stored < events; ++n) {
      const uint32_t thread = static_cast<uint32_t>(seq % 4);
      const uint64_t op_seq = seq++;
      const uint32_t op_id = static_cast<uint32_t>(1 + op_seq % 5);
      fixtures::add<v1::specs::OpEvent>(batch, {.seq = op_seq, .ts_ns = ts, .thread = thread,
                                                .policy = v1::CAST_POLICY_LOWER_PRECISION_FP,
                                                .device_type = v1::DEVICE_TYPE_CUDA,
                                                .output_dtype = v1::DTYPE_BFLOAT16, .cpu_duration_ns = 3000,
                                                .outcome = v1::OP_OUTCOME_OK, .mode = v1::EXECUTION_MODE_EAGER,
                                                .phase = v1::PHASE_FORWARD, .op_id = op_id, .location_id = 1});
      uint64_t cast_seq = 0;
      for (int c = 0; c < 2; ++c)
        fixtures::add<v1::specs::CastEvent>(batch, {.seq = cast_seq = seq++,
                                                    .ts_ns = ts + 500 + 1000 * static_cast<uint64_t>(c),
                                                    .thread = thread, .list_index = -1,
                                                    .policy = v1::CAST_POLICY_LOWER_PRECISION_FP,
                                                    .src_dtype = v1::DTYPE_FLOAT32, .dst_dtype = v1::DTYPE_BFLOAT16,
                                                    .outcome = v1::CAST_OUTCOME_CAST, .shape = {64, 128},
                                                    .bytes = 32768, .device_type = v1::DEVICE_TYPE_CUDA,
                                                    .op_seq = op_seq,
                                                    .role = c == 0 ? v1::ROLE_INPUT : v1::ROLE_WEIGHT,
                                                    .cache = c == 0 ? v1::CACHE_OUTCOME_NOT_CACHEABLE
                                                                    : v1::CACHE_OUTCOME_HIT,
                                                    .mode = v1::EXECUTION_MODE_EAGER, .phase = v1::PHASE_FORWARD,
                                                    .op_id = op_id, .arg_name_id = static_cast<uint32_t>(6 + c),
                                                    .location_id = 1});
      fixtures::add<v1::specs::KernelEvent>(batch, {.seq = seq++, .ts_ns = ts + 2000, .duration_ns = 800,
                                                    .activity = v1::GPU_ACTIVITY_KERNEL, .stream = 7,
                                                    .launched_by =
                                                        op_seq % 2 ? v1::LAUNCHED_BY_CAST : v1::LAUNCHED_BY_OP,
                                                    .launch_seq = op_seq % 2 ? cast_seq : op_seq,
                                                    .name_id = op_seq % 2 ? 8u : 9u});
      stored += 4;
      if (++op_count % 1000 == 0) {
        fixtures::add<v1::specs::CacheSample>(batch, {.seq = seq++, .ts_ns = ts + 2900,
                                                      .trigger = v1::CacheSample::TRIGGER_ITERATION,
                                                      .live_casts = op_count % 7, .live_bytes = 4096 * (op_count % 7)});
        ++stored;
      }
      ts += 4000;
    }
    bool duplicate = false;
    if (Status s = writer->begin(); !s.ok()) return std::fprintf(stderr, "%s\n", s.message().c_str()), 1;
    if (Status s = writer->store_batch(batch, 0, duplicate); !s.ok())
      return std::fprintf(stderr, "%s\n", s.message().c_str()), 1;
    if (Status s = writer->commit(); !s.ok()) return std::fprintf(stderr, "%s\n", s.message().c_str()), 1;
  }
  std::printf("%s: run \"bench\", %llu events\n", db.c_str(), static_cast<unsigned long long>(stored));
  return 0;
}
