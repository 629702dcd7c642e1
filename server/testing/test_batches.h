// Batches for the collector's tests: small, complete, easy to vary.
#pragma once

#include <unistd.h>
#include <zlib.h>

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "castscope/v1/transport.pb.h"
#include "common/spool/spool_format.h"

namespace castscope::collector::testing {

namespace v1 = castscope::v1;

// A batch of `casts` cast events (seq from first_seq), one op and one cache sample,
// with two interned strings and one location.
inline v1::Batch make_batch(const std::string& run_id, const std::string& agent_id, uint64_t sequence,
                            uint64_t first_seq = 1, int casts = 3) {
  v1::Batch batch;
  batch.set_protocol_version(v1::ProtocolVersion_MAX);
  batch.mutable_agent()->set_run_id(run_id);
  batch.mutable_agent()->set_agent_id(agent_id);
  batch.mutable_agent()->set_pid(1234);
  batch.mutable_agent()->set_rank(-1);
  batch.mutable_agent()->set_hostname("host");
  batch.set_sequence(sequence);
  batch.set_events_recorded_total(sequence * 10);
  batch.set_events_dropped_total(sequence);
  auto* op_name = batch.add_strings();
  op_name->set_id(1);
  op_name->set_text("aten::linear");
  auto* arg_name = batch.add_strings();
  arg_name->set_id(2);
  arg_name->set_text("weight");
  auto* location = batch.add_locations();
  location->set_id(1);
  location->mutable_location()->set_kind(v1::SourceLocation::KIND_PYTHON);
  location->mutable_location()->set_file("/src/model.py");
  location->mutable_location()->set_line(42);
  location->mutable_location()->set_function("forward");
  location->mutable_location()->add_stack("/src/model.py:42 forward");
  location->mutable_location()->add_stack("/src/train.py:7 <module>");
  location->mutable_location()->add_also_consumed_at("/src/model.py:44");
  uint64_t seq = first_seq;
  v1::OpEvent& op = *batch.add_events()->mutable_op();
  op.set_seq(seq++);
  op.set_ts_ns(1000);
  op.set_op_id(1);
  op.set_location_id(1);
  op.set_policy(v1::CAST_POLICY_LOWER_PRECISION_FP);
  op.set_device_type(v1::DEVICE_TYPE_CUDA);
  op.add_input_dtypes(v1::DTYPE_FLOAT32);
  op.add_input_dtypes(v1::DTYPE_FLOAT16);
  op.set_output_dtype(v1::DTYPE_FLOAT16);
  op.set_cpu_duration_ns(555);
  op.set_outcome(v1::OP_OUTCOME_OK);
  op.set_autocast_dtype(v1::DTYPE_FLOAT16);
  op.set_mode(v1::EXECUTION_MODE_EAGER);
  op.set_phase(v1::PHASE_FORWARD);
  op.add_autocast_enabled(v1::DEVICE_TYPE_CUDA);
  op.set_autocast_nesting(1);
  op.set_probe_reason(v1::PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST);
  for (int i = 0; i < casts; ++i) {
    v1::CastEvent& cast = *batch.add_events()->mutable_cast();
    cast.set_seq(seq++);
    cast.set_ts_ns(1000 + static_cast<uint64_t>(i));
    cast.set_thread(2);
    cast.set_op_id(1);
    cast.set_arg_index(1);
    cast.set_arg_name_id(2);
    cast.set_list_index(-1);
    cast.set_policy(v1::CAST_POLICY_LOWER_PRECISION_FP);
    cast.set_src_dtype(v1::DTYPE_FLOAT32);
    cast.set_dst_dtype(v1::DTYPE_FLOAT16);
    cast.set_outcome(v1::CAST_OUTCOME_CAST);
    cast.add_shape(16);  // 1024 fp32 elements: 4096 bytes
    cast.add_shape(4);
    cast.add_shape(16);
    cast.set_shape_truncated(i == 1);
    cast.set_round_trip(i == 1);
    cast.set_bytes(4096);
    cast.set_device_type(v1::DEVICE_TYPE_CUDA);
    cast.set_op_seq(first_seq);
    cast.set_role(v1::ROLE_WEIGHT);
    cast.set_cache(v1::CACHE_OUTCOME_STALE_HIT);
    cast.set_source_version(9);
    cast.set_cached_version(-3);
    cast.set_location_id(i == 2 ? 0 : 1);
    cast.set_mode(v1::EXECUTION_MODE_EAGER);
    cast.set_phase(v1::PHASE_BACKWARD);
  }
  v1::CacheSample& sample = *batch.add_events()->mutable_cache_sample();
  sample.set_seq(seq++);
  sample.set_ts_ns(2000);
  sample.set_trigger(v1::CacheSample::TRIGGER_ITERATION);
  sample.set_iteration(3);
  sample.set_live_casts(4);
  sample.set_live_bytes(5);
  v1::AgentStats& stats = *batch.add_events()->mutable_stats();
  stats.set_internal_errors(2);
  return batch;
}

inline std::string frame(const std::string& payload) {
  uint8_t header[spool::kFrameHeaderBytes];
  spool::put_u32le(header, spool::kFrameMagic);
  spool::put_u32le(header + 4, static_cast<uint32_t>(payload.size()));
  spool::put_u32le(header + 8, static_cast<uint32_t>(crc32(crc32(0L, Z_NULL, 0),
                                                            reinterpret_cast<const Bytef*>(payload.data()),
                                                            static_cast<uInt>(payload.size()))));
  return std::string(reinterpret_cast<const char*>(header), sizeof(header)) + payload;
}

inline void write_segment(const std::filesystem::path& path, const std::vector<std::string>& frames) {
  std::filesystem::create_directories(path.parent_path());
  std::ofstream out(path, std::ios::binary);
  out.write(spool::kFileMagic, sizeof(spool::kFileMagic));
  for (const auto& f : frames) out << f;
}

// A fresh directory under the test temp dir.
inline std::filesystem::path temp_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("castscope_collector_test_" + name + "_" +
                                                       std::to_string(::getpid()));
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

}  // namespace castscope::collector::testing
