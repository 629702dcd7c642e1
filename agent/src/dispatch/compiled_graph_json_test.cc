#include "agent/src/dispatch/compiled_graph_json.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

namespace castscope {
namespace {

constexpr const char* kLinearWeight =
    R"({"op": "aten::linear", "arg_index": 1, "list_index": -1, "policy": 1, "device": 1, "role": 1,
        "src": 1, "dst": 3, "shape": [16, 16], "bytes": 1024, "file": "/job/model.py", "line": 8, "function": "forward"})";

TEST(CompiledGraphJson, ParsesAGraphAndInternsItsLines) {
  EventLog events;
  LocationTable locations;
  std::string error;
  const std::string json = std::string(R"({"kind": "backward", "casts": [)") + kLinearWeight +
                           R"(, {"op": "aten::linear", "arg_index": 0, "list_index": -1, "policy": 1, "device": 1,
                                 "role": 2, "src": 1, "dst": 3, "shape": [8, 16], "bytes": 512, "phase": 1}]})";
  const auto graph = parse_compiled_graph(json, events, locations, error);
  ASSERT_TRUE(graph) << error;
  EXPECT_EQ(graph->phase, Phase::kBackward);
  EXPECT_EQ(events.op_meta(graph->op_id).name, "compiled::backward");
  ASSERT_EQ(graph->casts.size(), 2u);
  const CompiledCast& weight = graph->casts[0];
  EXPECT_EQ(events.op_meta(weight.cast.op_id).name, "aten::linear");
  EXPECT_EQ(weight.cast.role, Role::kWeight);
  EXPECT_EQ(weight.cast.dst, DType::kBfloat16);
  EXPECT_EQ(weight.cast.shape, (std::vector<int64_t>{16, 16}));
  EXPECT_EQ(locations.get(weight.location).file, "/job/model.py");
  EXPECT_EQ(locations.get(weight.location).line, 8u);
  EXPECT_EQ(graph->casts[1].location, 0u);  // no line: the run's calling line
  EXPECT_EQ(weight.phase, Phase::kBackward);  // the graph's
  EXPECT_EQ(graph->casts[1].phase, Phase::kForward);  // its own
}

TEST(CompiledGraphJson, NamesWhatIsWrong) {
  EventLog events;
  LocationTable locations;
  auto error_of = [&](const std::string& json) {
    std::string error;
    EXPECT_FALSE(parse_compiled_graph(json, events, locations, error)) << json;
    return error;
  };
  EXPECT_EQ(error_of("{"), "compiled graph: not a JSON object");
  EXPECT_EQ(error_of(R"({"kind": "sideways", "casts": []})"),
            "compiled graph: \"kind\" must be \"forward\", \"backward\" or \"inference\"");
  EXPECT_EQ(error_of(R"({"kind": "forward"})"), "compiled graph: \"casts\" is not an array");
  nlohmann::json bad = nlohmann::json::parse(kLinearWeight);
  bad["dst"] = 99;
  EXPECT_EQ(error_of(R"({"kind": "forward", "casts": [)" + std::string(kLinearWeight) + "," + bad.dump() + "]}"),
            "compiled graph: casts[1]: \"dst\" is 99, not in [1, 14]");
  bad = nlohmann::json::parse(kLinearWeight);
  bad.erase("role");
  EXPECT_EQ(error_of(R"({"kind": "forward", "casts": [)" + bad.dump() + "]}"), "compiled graph: casts[0]: missing \"role\"");
  bad = nlohmann::json::parse(kLinearWeight);
  bad["shape"] = {16, -1};
  EXPECT_EQ(error_of(R"({"kind": "forward", "casts": [)" + bad.dump() + "]}"),
            "compiled graph: casts[0]: \"shape\" holds a non-size");
}

TEST(CompiledGraphJson, DecisionsOutCarryOpLineAndDtypes) {
  EventLog events;
  LocationTable locations;
  CompileDecision d;
  d.op_id = events.intern_op("aten::mm");
  d.policy = CastPolicy::kLowerPrecisionFp;
  d.device = DeviceKind::kCpu;
  d.cast.src = DType::kFloat32;
  d.cast.dst = DType::kBfloat16;
  d.cast.phase = Phase::kBackward;
  d.cast.ndim = 2;
  d.cast.shape[0] = 8;
  d.cast.shape[1] = 4;
  d.cast.location = locations.intern(Location{LocationKind::kPython, "/job/f.py", 12, "f", ""});
  const auto out = nlohmann::json::parse(compile_decisions_json({d}, events, locations));
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out[0]["op"], "aten::mm");
  EXPECT_EQ(out[0]["phase"], 2);
  EXPECT_EQ(out[0]["src"], 1);
  EXPECT_EQ(out[0]["dst"], 3);
  EXPECT_EQ(out[0]["shape"], nlohmann::json({8, 4}));
  EXPECT_EQ(out[0]["file"], "/job/f.py");
  EXPECT_EQ(out[0]["line"], 12);
}

}  // namespace
}  // namespace castscope
