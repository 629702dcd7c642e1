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

namespace v1 = castscope::v1;
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
  const char* ops[] = {"aten::linear", "aten::matmul", "aten::conv2d", "aten::addmm", "aten::bmm"};
  uint64_t seq = 1, ts = 1'000'000'000, stored = 0, batch_sequence = 1, op_count = 0;
  while (stored < events) {
    v1::Batch batch;
    batch.set_protocol_version(v1::ProtocolVersion_MAX);
    batch.mutable_agent()->set_run_id("bench");
    batch.mutable_agent()->set_agent_id("bench-agent");
    batch.mutable_agent()->set_pid(1000);
    batch.mutable_agent()->set_rank(0);
    batch.mutable_agent()->set_hostname("bench");
    batch.set_sequence(batch_sequence++);
    uint32_t id = 1;
    for (const char* op : ops) {
      auto* s = batch.add_strings();
      s->set_id(id++);
      s->set_text(op);
    }
    for (const char* text : {"input", "weight", "void at::native::elementwise_kernel<copy>", "sm90_gemm_bf16"}) {
      auto* s = batch.add_strings();
      s->set_id(id++);
      s->set_text(text);
    }
    auto* location = batch.add_locations();
    location->set_id(1);
    location->mutable_location()->set_kind(v1::SourceLocation::KIND_PYTHON);
    location->mutable_location()->set_file("/src/model.py");
    location->mutable_location()->set_line(42);
    location->mutable_location()->set_function("forward");
    for (int n = 0; n < 1024 && stored < events; ++n) {
      const uint32_t thread = static_cast<uint32_t>(seq % 4);
      const uint64_t op_seq = seq++;
      v1::OpEvent& op = *batch.add_events()->mutable_op();
      op.set_seq(op_seq);
      op.set_ts_ns(ts);
      op.set_thread(thread);
      op.set_op_id(static_cast<uint32_t>(1 + op_seq % 5));
      op.set_location_id(1);
      op.set_policy(v1::CAST_POLICY_LOWER_PRECISION_FP);
      op.set_device_type(v1::DEVICE_TYPE_CUDA);
      op.set_output_dtype(v1::DTYPE_BFLOAT16);
      op.set_outcome(v1::OP_OUTCOME_OK);
      op.set_mode(v1::EXECUTION_MODE_EAGER);
      op.set_phase(v1::PHASE_FORWARD);
      op.set_cpu_duration_ns(3000);
      uint64_t cast_seq = 0;
      for (int c = 0; c < 2; ++c) {
        v1::CastEvent& cast = *batch.add_events()->mutable_cast();
        cast.set_seq(cast_seq = seq++);
        cast.set_ts_ns(ts + 500 + 1000 * static_cast<uint64_t>(c));
        cast.set_thread(thread);
        cast.set_op_id(op.op_id());
        cast.set_arg_name_id(static_cast<uint32_t>(6 + c));
        cast.set_list_index(-1);
        cast.set_policy(v1::CAST_POLICY_LOWER_PRECISION_FP);
        cast.set_src_dtype(v1::DTYPE_FLOAT32);
        cast.set_dst_dtype(v1::DTYPE_BFLOAT16);
        cast.set_outcome(v1::CAST_OUTCOME_CAST);
        cast.add_shape(64);
        cast.add_shape(128);
        cast.set_bytes(32768);
        cast.set_device_type(v1::DEVICE_TYPE_CUDA);
        cast.set_op_seq(op_seq);
        cast.set_role(c == 0 ? v1::ROLE_INPUT : v1::ROLE_WEIGHT);
        cast.set_cache(c == 0 ? v1::CACHE_OUTCOME_NOT_CACHEABLE : v1::CACHE_OUTCOME_HIT);
        cast.set_location_id(1);
        cast.set_mode(v1::EXECUTION_MODE_EAGER);
        cast.set_phase(v1::PHASE_FORWARD);
      }
      v1::KernelEvent& k = *batch.add_events()->mutable_kernel();
      k.set_seq(seq++);
      k.set_ts_ns(ts + 2000);
      k.set_duration_ns(800);
      k.set_activity(v1::GPU_ACTIVITY_KERNEL);
      k.set_name_id(op_seq % 2 ? 8 : 9);
      k.set_stream(7);
      k.set_launched_by(op_seq % 2 ? v1::LAUNCHED_BY_CAST : v1::LAUNCHED_BY_OP);
      k.set_launch_seq(op_seq % 2 ? cast_seq : op_seq);
      stored += 4;
      if (++op_count % 1000 == 0) {
        v1::CacheSample& sample = *batch.add_events()->mutable_cache_sample();
        sample.set_seq(seq++);
        sample.set_ts_ns(ts + 2900);
        sample.set_trigger(v1::CacheSample::TRIGGER_ITERATION);
        sample.set_live_casts(op_count % 7);
        sample.set_live_bytes(4096 * (op_count % 7));
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
