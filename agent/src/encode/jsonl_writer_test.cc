#include "agent/src/encode/jsonl_writer.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>

#include <google/protobuf/util/json_util.h>

#include "agent/testing/records.h"
#include "castscope/v1/events.pb.h"

namespace castscope {
namespace {

Record mm_cast_record() {
  Record r = testing::fp32_to_bf16_cast(7, 123456789, 1, 0);
  r.cast.ndim = 2;
  r.cast.shape[0] = 8;
  r.cast.shape[1] = 8;
  return r;
}

TEST(JsonlWriter, CastLineCarriesNamesFromOpMeta) {
  const Location where{LocationKind::kPython, "train.py", 12, "forward", "train.py:12 forward\nmain.py:3 <module>"};
  const auto line = nlohmann::json::parse(record_to_json(mm_cast_record(), OpMeta{"aten::mm", {"self", "mat2"}}, where));
  const auto& cast = line.at("cast");
  EXPECT_EQ(cast.at("op"), "aten::mm");
  EXPECT_EQ(cast.at("arg_name"), "mat2");
  EXPECT_EQ(cast.at("src_dtype"), "DTYPE_FLOAT32");
  EXPECT_EQ(cast.at("dst_dtype"), "DTYPE_BFLOAT16");
  EXPECT_EQ(cast.at("outcome"), "CAST_OUTCOME_CAST");
  EXPECT_EQ(cast.at("shape"), nlohmann::json::array({"8", "8"}));
  EXPECT_EQ(cast.at("location").at("file"), "train.py");
  EXPECT_EQ(cast.at("location").at("line"), 12);
  EXPECT_EQ(cast.at("location").at("stack"), nlohmann::json::array({"train.py:12 forward", "main.py:3 <module>"}));
}

// Every kind of line must parse as castscope.v1.Event with no unknown field:
// the dump and the proto schema cannot drift apart.
TEST(JsonlWriter, LinesParseAsProtoEvents) {
  Record op{};
  op.seq = 6;
  op.kind = RecordKind::kOp;
  op.policy = CastPolicy::kFp32;
  op.device = DeviceKind::kCpu;
  op.op.num_inputs = 2;
  op.op.input_dtypes[0] = DType::kBfloat16;
  op.op.input_dtypes[1] = DType::kInt64;
  op.op.output = DType::kFloat32;
  op.op.ok = true;
  op.op.autocast_enabled = 1u << static_cast<int>(DeviceKind::kCpu);
  Record sample{};
  sample.kind = RecordKind::kCacheSample;
  sample.sample.trigger = SampleTrigger::kIteration;
  sample.sample.live_casts = 3;
  const Location where{LocationKind::kTorchscript, "model.py", 7, "forward", ""};
  const std::vector<std::string> lines = {
      record_to_json(mm_cast_record(), OpMeta{"aten::mm", {"self", "mat2"}}, where),
      record_to_json(op, OpMeta{"aten::nll_loss", {}}, Location{}),
      record_to_json(sample, OpMeta{}, Location{}),
      stats_to_json(EventLogStats{10, 2, 1, 0, {}}, ProcessIdentity{42, 0, 0, 2}, "2.14.1", 99),
  };
  for (const auto& line : lines) {
    castscope::v1::Event event;
    google::protobuf::util::JsonParseOptions options;
    options.ignore_unknown_fields = false;
    const auto status = google::protobuf::util::JsonStringToMessage(line, &event, options);
    EXPECT_TRUE(status.ok()) << line << "\n" << status.ToString();
  }
  castscope::v1::Event event;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(lines[0], &event).ok());
  EXPECT_EQ(event.cast().dst_dtype(), castscope::v1::DTYPE_BFLOAT16);
  EXPECT_EQ(event.cast().shape_size(), 2);
  EXPECT_EQ(event.cast().location().kind(), castscope::v1::SourceLocation::KIND_TORCHSCRIPT);
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(lines[2], &event).ok());
  EXPECT_EQ(event.cache_sample().live_casts(), 3u);
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(lines[3], &event).ok());
  EXPECT_EQ(event.stats().world_size(), 2);
}

// proto3 JSON as the field's declared type says: 64-bit integers quoted,
// 32-bit ones bare, fields at their default value present, and a double that
// JSON cannot spell as a number written as protobuf's JSON mapping does.
TEST(JsonlWriter, SpellsEachFieldAsItsProtoTypeSays) {
  Record update{};
  update.seq = 5;
  update.thread = 3;
  update.kind = RecordKind::kNumerics;
  update.numerics.kind = NumericsKind::kScalerUpdate;
  update.numerics.max_abs_log2 = kNoMagnitude;
  update.numerics.found_inf = true;
  const auto line_with_scale = [&](double scale) {
    update.numerics.scale = scale;
    return record_to_json(update, OpMeta{}, Location{});
  };
  const std::string line = line_with_scale(std::numeric_limits<double>::infinity());
  EXPECT_NE(line.find("\"seq\":\"5\""), std::string::npos) << line;             // uint64
  EXPECT_NE(line.find("\"thread\":3,"), std::string::npos) << line;              // uint32
  EXPECT_NE(line.find("\"max_abs_log2\":-32768,"), std::string::npos) << line;   // sint32
  EXPECT_NE(line.find("\"overflowed\":\"0\""), std::string::npos) << line;       // default, present
  EXPECT_NE(line.find("\"scale\":\"Infinity\""), std::string::npos) << line;
  EXPECT_NE(line_with_scale(-std::numeric_limits<double>::infinity()).find("\"scale\":\"-Infinity\""),
            std::string::npos);
  EXPECT_NE(line_with_scale(std::nan("")).find("\"scale\":\"NaN\""), std::string::npos);
  EXPECT_NE(line_with_scale(0.5).find("\"scale\":0.5,"), std::string::npos);
  castscope::v1::Event event;
  ASSERT_TRUE(google::protobuf::util::JsonStringToMessage(line, &event).ok()) << line;
  EXPECT_TRUE(std::isinf(event.numerics().scale()));
  EXPECT_TRUE(event.numerics().found_inf());
}

// Events name the user's files, lines and shapes: the dump is 0600.
TEST(JsonlWriter, NewFileIsPrivateWhateverTheUmask) {
  const std::string path = ::testing::TempDir() + "/jsonl_writer_private.jsonl";
  std::remove(path.c_str());
  const mode_t previous = ::umask(022);
  JsonlWriter writer;
  const std::string error = writer.open(path);
  ::umask(previous);
  ASSERT_EQ(error, "");
  writer.write_line("{}");
  writer.close();
  struct stat info {};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace castscope
