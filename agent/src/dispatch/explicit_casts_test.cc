// The explicit-cast kernels inside CPU libtorch: every conversion the code
// asks for is recorded once, with its maker; a kernel's own conversions
// inside an op (TensorIterator's CPU promotion) and castscope's autocast
// casts are not recorded again; results are the native ones.
#include "agent/src/dispatch/explicit_casts.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/autograd.h>

#include <cmath>
#include <map>
#include <tuple>
#include <vector>

#include "agent/src/context/recording_state.h"
#include "agent/src/dispatch/dispatch.h"
#include "agent/src/dispatch/float8_scaling.h"
#include "agent/src/policy/policy.h"

namespace castscope {
namespace {

using Conversion = std::tuple<std::string, DType, DType, Role, CastMaker, Phase>;

// Every cast record drained, as (op, src, dst, role, maker, phase) -> how many.
std::map<Conversion, int> conversions(RecordingState& runtime) {
  std::map<Conversion, int> out;
  runtime.events.drain([&](const Record& r) {
    if (r.kind != RecordKind::kCast) return;
    ++out[{runtime.events.op_meta(r.op_id).name, r.cast.src, r.cast.dst, r.cast.role, r.cast.maker, r.cast.phase}];
  });
  return out;
}

class ExplicitCastsTest : public ::testing::Test {
 protected:
  void SetUp() override {
    policies_ = load_policy_files({std::string(CASTSCOPE_SOURCE_DIR) + "/policies/cpu.json"});
    ASSERT_TRUE(policies_.ok());
  }
  PolicySet policies_;
  RecordingState runtime_;
};

TEST_F(ExplicitCastsTest, EachConversionTheCodeAsksForIsRecordedOnceAndOnlyThose) {
  const at::Tensor x = at::randn({4, 8});
  at::Tensor half_buffer = at::zeros({4, 8}, at::kHalf);
  DispatchRegistry registry(runtime_);
  ASSERT_TRUE(registry.register_policies(policies_).empty());
  const at::Tensor up = x.to(at::kBFloat16).to(at::kFloat);  // two, each one _to_copy (its copy_ inside is not another)
  half_buffer.copy_(x);                                       // one copy_ across dtypes
  (void)x.to(at::kFloat);                                     // same dtype: nothing converted
  (void)x.clone();                                            // a same-dtype copy_
  (void)(x * 2);                                              // a Python-style scalar: not a tensor of the job
  (void)(x.to(at::kBFloat16) + x);  // one: the add's CPU promotion of its bf16 input happens inside its kernel
  const auto seen = conversions(runtime_);
  const std::map<Conversion, int> expected = {
      {{"aten::_to_copy", DType::kFloat32, DType::kBfloat16, Role::kInput, CastMaker::kExplicit, Phase::kForward}, 2},
      {{"aten::_to_copy", DType::kBfloat16, DType::kFloat32, Role::kInput, CastMaker::kExplicit, Phase::kForward}, 1},
      {{"aten::copy_", DType::kFloat32, DType::kFloat16, Role::kInput, CastMaker::kExplicit, Phase::kForward}, 1}};
  EXPECT_EQ(seen, expected);
  EXPECT_TRUE(at::equal(up, x.to(at::kBFloat16).to(at::kFloat)));
}

TEST_F(ExplicitCastsTest, BackwardConversionsNameWhoseCastTheyUndo) {
  const at::Tensor w = at::randn({8, 8}).requires_grad_(true);
  const at::Tensor x = at::randn({4, 8});
  DispatchRegistry registry(runtime_);
  ASSERT_TRUE(registry.register_policies(policies_).empty());
  at::Tensor loss;
  {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::increment_nesting();
    const at::Tensor y = at::mm(x, w);     // autocast casts w (and x)
    loss = y.to(at::kFloat).sum();         // the code's own upcast
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCPU, false);
  }
  torch::autograd::backward({loss});
  const auto seen = conversions(runtime_);
  using C = Conversion;
  EXPECT_EQ(seen.at(C{"aten::mm", DType::kFloat32, DType::kBfloat16, Role::kWeight, CastMaker::kAutocast, Phase::kForward}), 1);
  EXPECT_EQ(seen.at(C{"aten::_to_copy", DType::kBfloat16, DType::kFloat32, Role::kActivation, CastMaker::kExplicit,
                      Phase::kForward}),
            1);
  // The upcast's gradient back to bf16 is autograd's; w's gradient back to float32 undoes autocast's cast.
  EXPECT_EQ(seen.at(C{"aten::_to_copy", DType::kFloat32, DType::kBfloat16, Role::kGradient, CastMaker::kBackward,
                      Phase::kBackward}),
            1);
  EXPECT_EQ(seen.at(C{"aten::_to_copy", DType::kBfloat16, DType::kFloat32, Role::kGradient,
                      CastMaker::kAutocastBackward, Phase::kBackward}),
            1);
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().scalar_type(), at::kFloat);
}

TEST_F(ExplicitCastsTest, AConversionStraightBackIsARoundTripOneWithWorkBetweenIsNot) {
  const at::Tensor x = at::randn({4, 8});
  DispatchRegistry registry(runtime_);
  ASSERT_TRUE(registry.register_policies(policies_).empty());
  (void)x.to(at::kBFloat16).to(at::kFloat);           // down and straight back up
  (void)x.to(at::kBFloat16).mul(2).to(at::kFloat);    // the way back converts another tensor
  (void)x.to(at::kHalf).to(at::kBFloat16);            // on to a third dtype: not back
  std::vector<bool> round_trips;
  runtime_.events.drain([&](const Record& r) {
    if (r.kind == RecordKind::kCast) round_trips.push_back(r.cast.round_trip);
  });
  EXPECT_EQ(round_trips, (std::vector<bool>{false, true, false, false, false, false}));
}

TEST_F(ExplicitCastsTest, InferenceModeConversionsAreRecorded) {
  DispatchRegistry registry(runtime_);
  ASSERT_TRUE(registry.register_policies(policies_).empty());
  {
    c10::InferenceMode inference;
    (void)at::randn({4}).to(at::kHalf);  // autograd's kernels do not run: recorded all the same
  }
  const auto seen = conversions(runtime_);
  EXPECT_EQ(seen.size(), 1u);
  EXPECT_EQ(seen.begin()->second, 1);
}

// A float8 bracket (castscope_float8_conversion_begin, as the Python package
// puts around torchao's conversion): its role on every conversion inside, and
// on the one to float8 the scale's and amax's powers of two; a zero amax (an
// infinite scale, or one at torchao's 1e-12 floor) is counted and has none.
TEST_F(ExplicitCastsTest, AFloat8BracketGivesItsRoleAndScaleToTheConversionToFloat8) {
  DispatchRegistry registry(runtime_);
  ASSERT_TRUE(registry.register_policies(policies_).empty());
  const float scale[3] = {448.0f / 3.0f, 448.0f / 0.25f, 448.0f / 1e-12f};  // amax 3, 0.25 and zero (the floor)
  Float8Scope scope{Role::kWeight, scale, 3};
  this_thread_block().float8 = &scope;
  (void)at::randn({3, 4}, at::kBFloat16).to(at::kFloat).to(at::kFloat8_e4m3fn);
  this_thread_block().float8 = nullptr;
  (void)at::randn({4}).to(at::kFloat8_e5m2);  // outside: no role given, no scaling
  std::vector<Record> casts;
  runtime_.events.drain([&](const Record& r) {
    if (r.kind == RecordKind::kCast) casts.push_back(r);
  });
  ASSERT_EQ(casts.size(), 3u);
  EXPECT_EQ(casts[0].cast.role, Role::kWeight);  // the upcast before it
  EXPECT_FALSE(casts[0].cast.float8_scaled);
  EXPECT_EQ(casts[0].cast.op_seq, 0u);
  const CastFields& float8 = casts[1].cast;
  EXPECT_EQ(float8.role, Role::kWeight);
  ASSERT_TRUE(float8.float8_scaled);
  EXPECT_EQ(float8.zero_amax, 1);
  EXPECT_EQ(float8.float8_log2[kScaleLog2Min], 7);   // 149.3
  EXPECT_EQ(float8.float8_log2[kScaleLog2Max], 48);  // 4.48e14
  EXPECT_EQ(float8.float8_log2[kAmaxLog2Min], -2);  // 0.25: the zero amax is counted apart
  EXPECT_EQ(float8.float8_log2[kAmaxLog2Max], 1);   // 3
  EXPECT_EQ(casts[2].cast.role, Role::kInput);
  // The rowwise recipes round scales down to a power of two: a zero amax's is 2^48 (amax 1.6e-12), still zero.
  const float rounded[2] = {std::ldexp(1.0f, 48), std::ldexp(1.0f, 48)};
  Float8Scope all_zero{Role::kGradient, rounded, 2};
  this_thread_block().float8 = &all_zero;
  (void)at::zeros({2, 4}).to(at::kFloat8_e4m3fn);
  this_thread_block().float8 = nullptr;
  runtime_.events.drain([&](const Record& r) {
    if (r.kind != RecordKind::kCast) return;
    EXPECT_EQ(r.cast.zero_amax, 2);
    EXPECT_EQ(r.cast.float8_log2[kAmaxLog2Min], kNoMagnitude);
    EXPECT_EQ(r.cast.float8_log2[kAmaxLog2Max], kNoMagnitude);
    EXPECT_EQ(r.cast.float8_log2[kScaleLog2Max], 48);
  });
  EXPECT_FALSE(casts[2].cast.float8_scaled);
  EXPECT_EQ(casts[2].cast.op_seq, 0u);
}

TEST_F(ExplicitCastsTest, NothingIsRecordedOnceTheRegistryIsGone) {
  {
    DispatchRegistry registry(runtime_);
    ASSERT_TRUE(registry.register_policies(policies_).empty());
  }
  (void)at::randn({4}).to(at::kHalf);
  EXPECT_TRUE(conversions(runtime_).empty());
}

}  // namespace
}  // namespace castscope
