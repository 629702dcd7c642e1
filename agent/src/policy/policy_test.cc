#include "agent/src/policy/policy.h"

#include <gtest/gtest.h>

#include <sys/stat.h>

#include <filesystem>
#include <fstream>

namespace castscope {
namespace {

PolicySet parse(const std::string& text) { return parse_policy_text(text, "overlay.json"); }

std::string only_error(const PolicySet& set) {
  EXPECT_EQ(set.errors.size(), 1u);
  return set.errors.empty() ? "" : set.errors[0].str();
}

TEST(PolicyParse, AcceptsStringAndObjectEntries) {
  const PolicySet set = parse(R"({
  "castscope_policy": 1,
  "device": "cpu",
  "ops": {
    "aten::mm": "lower_precision_fp",
    "torchvision::roi_pool": {"policy": "fp32"},
    "mylib::fused_op": {"policy": "lower_precision_fp", "dtype": "float16"},
    "aten::norm.Scalar": {"policy": "fp32_append_dtype", "redispatch": "aten::norm.ScalarOpt_dtype"}
  }
})");
  ASSERT_TRUE(set.ok()) << set.errors[0].str();
  const auto& ops = set.devices.at("cpu").ops;
  EXPECT_EQ(ops.at("aten::mm").policy, CastPolicy::kLowerPrecisionFp);
  EXPECT_EQ(ops.at("aten::mm").origin, "overlay.json:5");
  EXPECT_EQ(ops.at("torchvision::roi_pool").policy, CastPolicy::kFp32);
  EXPECT_EQ(ops.at("mylib::fused_op").dtype, DType::kFloat16);
  EXPECT_EQ(ops.at("aten::norm.Scalar").redispatch, "aten::norm.ScalarOpt_dtype");
}

TEST(PolicyCanonicalText, SameForSamePolicyWhateverTheLayout) {
  const PolicySet a = parse(R"({"castscope_policy": 1, "device": "cpu",
    "ops": {"aten::mm": "lower_precision_fp", "aten::addmm": "fp32"}})");
  const PolicySet b = parse(R"({
    "castscope_policy": 1, "device": "cpu", "ops": {
      "aten::addmm": {"policy": "fp32"},
      "aten::mm": "lower_precision_fp"}})");
  const PolicySet c = parse(R"({"castscope_policy": 1, "device": "cpu",
    "ops": {"aten::mm": {"policy": "lower_precision_fp", "dtype": "float16"}, "aten::addmm": "fp32"}})");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_EQ(canonical_policy_text(a), canonical_policy_text(b));
  EXPECT_NE(canonical_policy_text(a), canonical_policy_text(c));  // a dtype override is a different policy
}

TEST(PolicyParse, ModuleAndFunctionOverlaysNeedNoDeviceOrOps) {
  const PolicySet set = parse(R"({
  "castscope_policy": 1,
  "modules": {
    "torchvision.ops.RoIPool": "fp32",
    "mylib.layers.Attention": {"policy": "lower_precision_fp", "dtype": "float16", "output": "input_dtype"}
  },
  "functions": {"mylib.backend.fru": "promote", "mylib:Outer.method": "fp32"}
})");
  ASSERT_TRUE(set.ok()) << set.errors[0].str();
  EXPECT_TRUE(set.devices.empty());
  const CallableOverlay& pool = set.callables.at({CallableKind::kModule, "torchvision.ops.RoIPool"});
  EXPECT_EQ(pool.policy, CastPolicy::kFp32);
  EXPECT_EQ(pool.output, OutputCast::kAsIs);
  EXPECT_EQ(pool.device, "");
  EXPECT_EQ(pool.line, 4);
  const CallableOverlay& attention = set.callables.at({CallableKind::kModule, "mylib.layers.Attention"});
  EXPECT_EQ(attention.dtype, DType::kFloat16);
  EXPECT_EQ(attention.output, OutputCast::kInputDtype);
  EXPECT_EQ(set.callables.at({CallableKind::kFunction, "mylib.backend.fru"}).policy, CastPolicy::kPromote);
}

TEST(PolicyParse, CallableOverlaysTakeTheFilesDevice) {
  const PolicySet set = parse(R"({"castscope_policy": 1, "device": "cuda", "ops": {},
    "functions": {"mylib.backend.fru": "fp32"}})");
  ASSERT_TRUE(set.ok()) << set.errors[0].str();
  EXPECT_EQ(set.callables.at({CallableKind::kFunction, "mylib.backend.fru"}).device, "cuda");
}

TEST(PolicyParse, BadCallableOverlaysNameFileLineAndEntry) {
  struct Case {
    std::string entries;
    std::string expected;
  };
  const Case cases[] = {
      {R"("modules": {"RoIPool": "fp32"})", "entry \"RoIPool\": not a Python path"},
      {R"("modules": {"torchvision..RoIPool": "fp32"})", "not a Python path"},
      {R"("modules": {"torchvision.ops.1Pool": "fp32"})", "not a Python path"},
      {R"("modules": {"mylib:": "fp32"})", "not a Python path"},
      {R"("modules": {"mylib:a:b": "fp32"})", "not a Python path"},
      {R"("functions": {"mylib.fru": "banned"})", "unknown policy \"banned\" for a function overlay"},
      {R"("modules": {"mylib.Pool": {"policy": "fp32", "output": "float16"}})", "unknown output \"float16\""},
      {R"("modules": {"mylib.Pool": {"policy": "fp32", "dtype": "float16"}})", "\"dtype\" applies only to lower_precision_fp"},
      {R"("modules": {"mylib.Pool": {"policy": "fp32", "cast": "all"}})", "unknown key \"cast\""},
      {R"("modules": {"mylib.Pool": 3})", "must be a policy name or an object"},
      {R"("modules": ["mylib.Pool"])", "\"modules\" must be an object"},
      {R"("modules": {"mylib.Pool": "fp32", "mylib.Pool": "promote"})", "duplicate entry"},
  };
  for (const Case& c : cases) {
    const std::string error = only_error(parse("{\"castscope_policy\": 1,\n" + c.entries + "}"));
    EXPECT_NE(error.find("overlay.json:2"), std::string::npos) << c.entries << " -> " << error;
    EXPECT_NE(error.find(c.expected), std::string::npos) << c.entries << " -> " << error;
  }
}

TEST(PolicyParse, AFileWithNothingToApplyIsRefused) {
  EXPECT_NE(only_error(parse(R"({"castscope_policy": 1, "device": "cpu"})")).find("\"ops\" must be an object"),
            std::string::npos);
}

TEST(PolicyCanonicalText, CoversCallableOverlays) {
  const PolicySet a = parse(R"({"castscope_policy": 1, "modules": {"mylib.Pool": "fp32"}})");
  const PolicySet b = parse(R"({"castscope_policy": 1, "modules": {"mylib.Pool": {"policy": "fp32", "output": "input_dtype"}}})");
  const PolicySet c = parse(R"({"castscope_policy": 1, "functions": {"mylib.Pool": "fp32"}})");
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  EXPECT_NE(canonical_policy_text(a), "");
  EXPECT_NE(canonical_policy_text(a), canonical_policy_text(b));
  EXPECT_NE(canonical_policy_text(a), canonical_policy_text(c));
}

TEST(PolicyParse, BadJsonNamesLine) {
  const std::string error = only_error(parse("{\n  \"castscope_policy\": 1,\n  \"device\": \"cpu\"\n  \"ops\": {}\n}"));
  EXPECT_NE(error.find("overlay.json:4"), std::string::npos) << error;
  EXPECT_NE(error.find("not valid JSON"), std::string::npos) << error;
}

// Found by tests/fuzz/policy_fuzzer: a number no JSON type can hold threw
// out_of_range, which escaped the parser.
TEST(PolicyParse, HugeNumberIsAnErrorNotAnException) {
  const std::string error = only_error(parse("333333000184439296E00000000432297100330001844392961000000000000020{"));
  EXPECT_NE(error.find("not valid JSON"), std::string::npos) << error;
}

// 200 000 nested arrays (400 KB) used to grow the duplicate-key scan to
// gigabytes before any error: deep text is refused unparsed, at its line.
TEST(PolicyParse, DeepNestingIsRefusedAtItsLine) {
  const std::string deep = "{\"castscope_policy\": 1, \"device\": \"cpu\",\n\"ops\": " + std::string(200000, '[') +
                           std::string(200000, ']') + "}";
  EXPECT_EQ(only_error(parse(deep)),
            "overlay.json:2: nested deeper than 32 levels of arrays and objects (a policy file needs 3); not read "
            "further");
  // Brackets in strings are text, and an invalid file still says what JSON finds wrong with it.
  EXPECT_TRUE(parse(R"({"castscope_policy": 1, "device": "cpu", "description": ")" + std::string(100, '[') +
                    R"(", "ops": {"aten::mm": "fp32"}})")
                  .ok());
  EXPECT_NE(only_error(parse(std::string(32, '[') + "}")).find("not valid JSON"), std::string::npos);
}

TEST(PolicyParse, UnknownPolicyNamesEntryAndLine) {
  const std::string error = only_error(parse(R"({"castscope_policy": 1, "device": "cpu", "ops": {
  "aten::mm": "lower_precision_fp",
  "aten::bmm": "half"
}})"));
  EXPECT_EQ(error.rfind("overlay.json:3: entry \"aten::bmm\": unknown policy \"half\"", 0), 0u) << error;
}

TEST(PolicyParse, UnknownDtype) {
  const std::string error = only_error(parse(R"({"castscope_policy": 1, "device": "cpu", "ops": {
  "mylib::op": {"policy": "lower_precision_fp", "dtype": "float12"}
}})"));
  EXPECT_NE(error.find("overlay.json:2: entry \"mylib::op\": unknown dtype \"float12\""), std::string::npos) << error;
}

TEST(PolicyParse, DuplicateEntryPointsAtSecondOccurrence) {
  const std::string error = only_error(parse(R"({"castscope_policy": 1, "device": "cpu", "ops": {
  "aten::mm": "fp32",
  "aten::bmm": "fp32",
  "aten::mm": "lower_precision_fp"
}})"));
  EXPECT_NE(error.find("overlay.json:4: entry \"aten::mm\": duplicate entry (first at line 2)"), std::string::npos) << error;
}

// One op, spelled once plainly and once with a JSON escape for a letter.
TEST(PolicyParse, DuplicateEntryThroughAJsonEscapeIsRefused) {
  const std::string error = only_error(parse(R"({"castscope_policy": 1, "device": "cpu", "ops": {
  "aten::mm": "fp32",
  "aten::m\u006d": "lower_precision_fp"
}})"));
  EXPECT_NE(error.find("overlay.json:3: entry \"aten::mm\": duplicate entry (first at line 2 as \"aten::mm\"; JSON "
                       "reads \"aten::m\\u006d\" as the same key); keep one"),
            std::string::npos)
      << error;
}

TEST(PolicyParse, SecondOpsObjectIsRefused) {
  const std::string error = only_error(parse(R"({"castscope_policy": 1, "device": "cpu",
  "ops": {"aten::mm": "fp32"},
  "ops": {"aten::bmm": "fp32"}
})"));
  EXPECT_NE(error.find("overlay.json:3: duplicate top-level key \"ops\" (first at line 2)"), std::string::npos) << error;
}

TEST(PolicyParse, DuplicateKeyInsideAnEntryIsRefused) {
  const std::string error = only_error(parse(R"({"castscope_policy": 1, "device": "cpu", "ops": {
  "aten::mm": {"policy": "fp32",
               "policy": "lower_precision_fp"}
}})"));
  EXPECT_NE(error.find("overlay.json:3: entry \"aten::mm\": duplicate key \"policy\" (first at line 2)"),
            std::string::npos)
      << error;
  const std::string top = only_error(parse("{\"castscope_policy\": 1, \"device\": \"cpu\",\n\"devic\\u0065\": \"cuda\", \"ops\": {}}"));
  EXPECT_NE(top.find("overlay.json:2: duplicate top-level key \"device\" (first at line 1 as \"device\"; JSON reads "
                     "\"devic\\u0065\" as the same key)"),
            std::string::npos)
      << top;
}

// Lines come from the parser's keys, not from searching the text: an escaped
// op name still gets its own line, and a key elsewhere with the same text
// is no duplicate.
TEST(PolicyParse, EscapedOpNameKeepsItsLine) {
  const PolicySet set = parse(R"({"castscope_policy": 1, "device": "cpu", "description": {"aten::mm": "x"},
  "ops": {
    "aten::b\u006dm": "fp32",
    "aten::mm": "fp32"
}})");
  ASSERT_TRUE(set.ok()) << set.errors[0].str();
  EXPECT_EQ(set.devices.at("cpu").ops.at("aten::bmm").origin, "overlay.json:3");
  EXPECT_EQ(set.devices.at("cpu").ops.at("aten::mm").origin, "overlay.json:4");
}

TEST(PolicyParse, AppendDtypeNeedsRedispatch) {
  const std::string error = only_error(parse(R"({"castscope_policy": 1, "device": "cpu", "ops": {
  "aten::norm.Scalar": "fp32_append_dtype"
}})"));
  EXPECT_NE(error.find("needs \"redispatch\""), std::string::npos) << error;
}

TEST(PolicyParse, RejectsBadTopLevel) {
  EXPECT_NE(only_error(parse(R"({"castscope_policy": 2, "device": "cpu", "ops": {}})")).find("must be 1"), std::string::npos);
  EXPECT_NE(only_error(parse(R"({"castscope_policy": 1, "device": "tpu", "ops": {}})")).find("\"device\" must be one of"), std::string::npos);
  EXPECT_NE(only_error(parse(R"({"castscope_policy": 1, "device": "cpu", "ops": []})")).find("\"ops\" must be an object"), std::string::npos);
  EXPECT_NE(only_error(parse(R"({"castscope_policy": 1, "device": "cpu", "ops": {}, "opz": 1})")).find("unknown top-level key \"opz\""), std::string::npos);
  EXPECT_NE(only_error(parse("[1, 2]")).find("a policy file is a JSON object"), std::string::npos);
}

TEST(PolicyParse, RejectsBadOpNamesAndKeys) {
  EXPECT_NE(only_error(parse(R"({"castscope_policy": 1, "device": "cpu", "ops": {"mm": "fp32"}})")).find("not an operator name"), std::string::npos);
  EXPECT_NE(only_error(parse(R"({"castscope_policy": 1, "device": "cpu", "ops": {"aten::mm": {"policy": "fp32", "dtyp": "x"}}})")).find("unknown key \"dtyp\""), std::string::npos);
  EXPECT_NE(only_error(parse(R"({"castscope_policy": 1, "device": "cpu", "ops": {"aten::mm": 3}})")).find("must be a policy name"), std::string::npos);
}

TEST(PolicyLoad, OverlayOverridesBaseAndMissingFileIsAnError) {
  const std::string base = ::testing::TempDir() + "/base.json";
  const std::string overlay = ::testing::TempDir() + "/overlay.json";
  std::ofstream(base) << R"({"castscope_policy": 1, "device": "cpu", "torch_version": "2.14.1", "ops": {"aten::mm": "lower_precision_fp"}})";
  std::ofstream(overlay) << R"({"castscope_policy": 1, "device": "cpu", "ops": {"aten::mm": "fp32", "mylib::op": "promote"}})";
  const PolicySet set = load_policy_files({base, overlay});
  ASSERT_TRUE(set.ok());
  EXPECT_EQ(set.devices.at("cpu").ops.at("aten::mm").policy, CastPolicy::kFp32);
  EXPECT_EQ(set.devices.at("cpu").ops.at("mylib::op").policy, CastPolicy::kPromote);
  EXPECT_EQ(set.devices.at("cpu").torch_version, "2.14.1");

  const PolicySet missing = load_policy_files({base, ::testing::TempDir() + "/nope.json"});
  ASSERT_EQ(missing.errors.size(), 1u);
  EXPECT_NE(missing.errors[0].str().find("nope.json: cannot read the policy file: No such file or directory"),
            std::string::npos)
      << missing.errors[0].str();
}

// A directory used to read as "not valid JSON", and a FIFO blocked the
// reader until someone wrote to it.
TEST(PolicyLoad, DirectoriesAndFifosAreRefusedByWhatTheyAre) {
  const std::string dir = ::testing::TempDir() + "/policy_dir.json";
  std::filesystem::create_directories(dir);
  const PolicySet from_dir = load_policy_files({dir});
  ASSERT_EQ(from_dir.errors.size(), 1u);
  EXPECT_EQ(from_dir.errors[0].str(), dir + ": is a directory, not a policy file; give the path of a JSON policy file");

  const std::string fifo = ::testing::TempDir() + "/policy_fifo.json";
  std::filesystem::remove(fifo);
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const PolicySet from_fifo = load_policy_files({fifo});  // no writer: must not block
  ASSERT_EQ(from_fifo.errors.size(), 1u);
  EXPECT_EQ(from_fifo.errors[0].str(), fifo + ": is a FIFO, not a policy file; give the path of a JSON policy file");
  std::filesystem::remove(fifo);
}

TEST(PolicyLoad, FilesOverTheSizeLimitAreRefusedUnread) {
  const std::string big = ::testing::TempDir() + "/big_policy.json";
  {
    std::ofstream out(big);
    out << R"({"castscope_policy": 1, "device": "cpu", "description": ")" << std::string(kMaxPolicyFileBytes, 'x')
        << R"(", "ops": {}})";
  }
  const PolicySet set = load_policy_files({big});
  ASSERT_EQ(set.errors.size(), 1u);
  EXPECT_EQ(set.errors[0].str(), big + ": is larger than 4 MiB; castscope reads policy files of at most that size");
  std::filesystem::remove(big);
}

TEST(PolicyLoad, ShippedPoliciesParse) {
  for (const char* device : {"cpu", "cuda", "xpu", "mps"}) {
    const std::string path = std::string(CASTSCOPE_SOURCE_DIR) + "/policies/" + device + ".json";
    const PolicySet set = load_policy_files({path});
    ASSERT_TRUE(set.ok()) << set.errors[0].str();
    EXPECT_GT(set.devices.at(device).ops.size(), 90u) << device;
  }
}

}  // namespace
}  // namespace castscope
