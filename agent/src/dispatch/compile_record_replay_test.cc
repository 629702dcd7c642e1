#include "agent/src/dispatch/compile_record_replay.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace castscope {
namespace {

uint32_t python_line(LocationTable& locations, uint32_t line) {
  Location where;
  where.kind = LocationKind::kPython;
  where.file = "/job/model.py";
  where.line = line;
  where.function = "forward";
  return locations.intern(where);
}

// What a trace logs: an op and its cast, compiling, in the backward.
std::vector<Record> traced(RecordingState& runtime) {
  const uint32_t linear = runtime.events.intern_op("aten::linear");
  runtime.events.set_arg_names(linear, {"input", "weight", "bias"});
  Record op = runtime.events.new_record(RecordKind::kOp, 7, 40);
  op.op_id = linear;
  op.op.location = python_line(runtime.locations, 12);
  op.op.mode = ExecutionMode::kCompiling;
  op.op.phase = Phase::kBackward;
  op.op.autocast_dtype = DType::kBfloat16;
  Record cast = runtime.events.new_record(RecordKind::kCast, 7, 41);
  cast.op_id = linear;
  cast.cast.op_seq = 40;
  cast.cast.location = op.op.location;
  cast.cast.mode = ExecutionMode::kCompiling;
  cast.cast.phase = Phase::kBackward;
  cast.cast.arg_index = 1;
  cast.cast.src = DType::kFloat32;
  cast.cast.dst = DType::kBfloat16;
  cast.cast.outcome = CastOutcome::kCast;
  cast.cast.bytes = 1024;
  return {cast, op};
}

std::vector<Record> drained(RecordingState& runtime) {
  std::vector<Record> all;
  runtime.events.drain([&](const Record& r) { all.push_back(r); });
  return all;
}

TEST(CompileRecordReplay, ARecordComesBackInAnotherProcessWithItsOpLineAndArguments) {
  RecordingState tracing;
  const std::string json = compile_records_json(traced(tracing), tracing.events, tracing.locations);

  RecordingState served;  // another process: nothing interned yet, other ids
  served.events.intern_op("aten::mm");
  python_line(served.locations, 99);
  std::string error;
  ASSERT_EQ(replay_compile_records(json, served, error), 2) << error;
  const std::vector<Record> records = drained(served);
  ASSERT_EQ(records.size(), 2u);
  const Record& cast = records[0];
  const Record& op = records[1];
  EXPECT_EQ(op.kind, RecordKind::kOp);
  EXPECT_EQ(served.events.op_meta(op.op_id).name, "aten::linear");
  EXPECT_EQ(served.events.op_meta(op.op_id).arg_names, (std::vector<std::string>{"input", "weight", "bias"}));
  EXPECT_EQ(served.locations.get(op.op.location).line, 12u);
  EXPECT_EQ(op.op.phase, Phase::kBackward);
  EXPECT_EQ(cast.kind, RecordKind::kCast);
  EXPECT_EQ(cast.cast.op_seq, op.seq);  // tied to its op's new seq
  EXPECT_NE(cast.seq, op.seq);
  EXPECT_EQ(cast.cast.location, op.op.location);
  EXPECT_EQ(cast.cast.bytes, 1024u);
  EXPECT_EQ(cast.cast.dst, DType::kBfloat16);
}

TEST(CompileRecordReplay, AnOpTheCompileLoggedAlreadyIsNotLoggedAgainNorItsCasts) {
  RecordingState tracing;
  const std::vector<Record> records = traced(tracing);
  const std::string json = compile_records_json(records, tracing.events, tracing.locations);
  std::string error;
  ASSERT_EQ(replay_compile_records(json, tracing, error), 2) << error;
  EXPECT_EQ(replay_compile_records(json, tracing, error), 0) << error;  // the same compile: its key is known
  tracing.compile.new_epoch();
  EXPECT_EQ(replay_compile_records(json, tracing, error), 2) << error;  // a new compile logs it again
}

TEST(CompileRecordReplay, NamesWhatIsWrongAndLogsNothing) {
  RecordingState tracing;
  const nlohmann::json good = nlohmann::json::parse(
      compile_records_json(traced(tracing), tracing.events, tracing.locations));
  auto error_of = [](const std::string& json) {
    RecordingState served;
    std::string error;
    EXPECT_EQ(replay_compile_records(json, served, error), -1) << json;
    EXPECT_TRUE(drained(served).empty());
    return error;
  };
  EXPECT_EQ(error_of("{}"), "compile records: not a JSON array");
  nlohmann::json bad = good;
  bad[1]["record"] = bad[1]["record"].get<std::string>().substr(2);
  EXPECT_EQ(error_of(bad.dump()), "compile records: [1]: \"record\" has " + std::to_string(2 * sizeof(Record) - 2) +
                                      " hex digits, not " + std::to_string(2 * sizeof(Record)) +
                                      " (another agent build's?)");
  bad = good;
  bad[0].erase("op");
  EXPECT_EQ(error_of(bad.dump()), "compile records: [0]: \"op\" is missing or of the wrong type");
  bad = good;
  bad[0]["location"]["line"] = -3;
  EXPECT_EQ(error_of(bad.dump()), "compile records: [0]: \"location.line\" is missing or of the wrong type");
  // A record not made while compiling: an eager cast must never be logged twice.
  RecordingState other;
  std::vector<Record> eager = traced(other);
  eager[0].cast.mode = ExecutionMode::kEager;
  EXPECT_EQ(error_of(compile_records_json(eager, other.events, other.locations)),
            "compile records: [0]: a cast record not made while compiling");
}

}  // namespace
}  // namespace castscope
