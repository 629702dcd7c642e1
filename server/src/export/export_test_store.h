// A small stored run for the export tests: one agent (rank 0, pid 4321,
// host "node1"), one thread, two ops with their casts, a cache sample and
// four GPU activities, one of each kind of launch:
//
//   seq  ts     what
//   1    1000   op aten::linear (500 ns, thread 1) ─ launched kernel 8
//   2    1100   cast input fp32→bf16 (op 1)        ─ launched kernel 7
//   3    1200   cast weight fp32→bf16 (op 1), cache hit
//   4    2000   op aten::mm (100 ns)
//   5    2010   cast self already bf16 (op 4)
//   6    2500   cache sample: 3 casts, 4096 bytes
//   7    1300   kernel copy (50 ns, GPU 0 stream 7), launched by cast 2
//   8    1400   kernel gemm (200 ns, stream 7), launched by op 1
//   9    900    memset (10 ns, stream 7), launched outside castscope's ops
//   10   3000   kernel (20 ns, stream 9), launched by cast 99: not stored
#pragma once

#include <memory>
#include <string>

#include "server/src/store/store_writer.h"
#include "server/testing/test_batches.h"

namespace castscope::collector::testing {

inline std::string store_export_run(const std::string& name) {
  const std::string db = (temp_dir(name) / "store.db").string();
  v1::Batch batch;
  batch.set_protocol_version(v1::ProtocolVersion_MAX);
  v1::AgentIdentity& agent = *batch.mutable_agent();
  agent.set_run_id("run");
  agent.set_agent_id("agent-a");
  agent.set_pid(4321);
  agent.set_rank(0);
  agent.set_world_size(1);
  agent.set_hostname("node1");
  agent.set_command("python train.py");
  batch.set_sequence(1);
  batch.set_events_recorded_total(10);
  uint32_t next_string = 1;
  for (const char* text : {"aten::linear", "aten::mm", "input", "weight", "self", "void copy_kernel<float>",
                           "sm90_gemm_bf16", "memset"}) {
    auto* s = batch.add_strings();
    s->set_id(next_string++);
    s->set_text(text);
  }
  auto* location = batch.add_locations();
  location->set_id(1);
  location->mutable_location()->set_kind(v1::SourceLocation::KIND_PYTHON);
  location->mutable_location()->set_file("/src/model.py");
  location->mutable_location()->set_line(42);
  location->mutable_location()->set_function("forward");

  auto op = [&](uint64_t seq, uint64_t ts, uint64_t duration, uint32_t name) {
    v1::OpEvent& o = *batch.add_events()->mutable_op();
    o.set_seq(seq);
    o.set_ts_ns(ts);
    o.set_thread(1);
    o.set_op_id(name);
    o.set_location_id(1);
    o.set_policy(v1::CAST_POLICY_LOWER_PRECISION_FP);
    o.set_device_type(v1::DEVICE_TYPE_CPU);
    o.set_output_dtype(v1::DTYPE_BFLOAT16);
    o.set_outcome(v1::OP_OUTCOME_OK);
    o.set_mode(v1::EXECUTION_MODE_EAGER);
    o.set_phase(v1::PHASE_FORWARD);
    o.set_cpu_duration_ns(duration);
  };
  auto cast = [&](uint64_t seq, uint64_t ts, uint64_t op_seq, uint32_t op_name, uint32_t arg, v1::DType src,
                  v1::CastOutcome outcome, v1::CacheOutcome cache) {
    v1::CastEvent& c = *batch.add_events()->mutable_cast();
    c.set_seq(seq);
    c.set_ts_ns(ts);
    c.set_thread(1);
    c.set_op_id(op_name);
    c.set_arg_name_id(arg);
    c.set_list_index(-1);
    c.set_policy(v1::CAST_POLICY_LOWER_PRECISION_FP);
    c.set_src_dtype(src);
    c.set_dst_dtype(v1::DTYPE_BFLOAT16);
    c.set_outcome(outcome);
    c.add_shape(16);
    c.add_shape(32);
    c.set_bytes(2048);
    c.set_device_type(v1::DEVICE_TYPE_CPU);
    c.set_op_seq(op_seq);
    c.set_role(v1::ROLE_WEIGHT);
    c.set_cache(cache);
    c.set_location_id(1);
    c.set_mode(v1::EXECUTION_MODE_EAGER);
    c.set_phase(v1::PHASE_FORWARD);
  };
  auto kernel = [&](uint64_t seq, uint64_t ts, uint64_t duration, uint32_t stream, v1::LaunchedBy by,
                    uint64_t launch_seq, uint32_t name, v1::GpuActivity activity) {
    v1::KernelEvent& k = *batch.add_events()->mutable_kernel();
    k.set_seq(seq);
    k.set_ts_ns(ts);
    k.set_duration_ns(duration);
    k.set_activity(activity);
    k.set_name_id(name);
    k.set_device(0);
    k.set_stream(stream);
    k.set_launched_by(by);
    k.set_launch_seq(launch_seq);
    k.set_correlation_id(static_cast<uint32_t>(seq));
    if (activity == v1::GPU_ACTIVITY_MEMSET) k.set_bytes(512);
  };
  op(1, 1000, 500, 1);
  cast(2, 1100, 1, 1, 3, v1::DTYPE_FLOAT32, v1::CAST_OUTCOME_CAST, v1::CACHE_OUTCOME_NOT_CACHEABLE);
  cast(3, 1200, 1, 1, 4, v1::DTYPE_FLOAT32, v1::CAST_OUTCOME_CAST, v1::CACHE_OUTCOME_HIT);
  op(4, 2000, 100, 2);
  cast(5, 2010, 4, 2, 5, v1::DTYPE_BFLOAT16, v1::CAST_OUTCOME_ALREADY_TARGET, v1::CACHE_OUTCOME_NOT_CACHEABLE);
  v1::CacheSample& sample = *batch.add_events()->mutable_cache_sample();
  sample.set_seq(6);
  sample.set_ts_ns(2500);
  sample.set_trigger(v1::CacheSample::TRIGGER_ITERATION);
  sample.set_iteration(1);
  sample.set_live_casts(3);
  sample.set_live_bytes(4096);
  kernel(7, 1300, 50, 7, v1::LAUNCHED_BY_CAST, 2, 6, v1::GPU_ACTIVITY_KERNEL);
  kernel(8, 1400, 200, 7, v1::LAUNCHED_BY_OP, 1, 7, v1::GPU_ACTIVITY_KERNEL);
  kernel(9, 900, 10, 7, v1::LAUNCHED_BY_NONE, 0, 8, v1::GPU_ACTIVITY_MEMSET);
  kernel(10, 3000, 20, 9, v1::LAUNCHED_BY_CAST, 99, 6, v1::GPU_ACTIVITY_KERNEL);

  std::unique_ptr<StoreWriter> writer;
  EXPECT_TRUE(StoreWriter::open(db, writer).ok());
  EXPECT_TRUE(writer->begin().ok());
  bool duplicate = true;
  const Status stored = writer->store_batch(batch, 1000, duplicate);
  EXPECT_TRUE(stored.ok()) << stored.message();
  EXPECT_TRUE(writer->commit().ok());
  return db;
}

}  // namespace castscope::collector::testing
