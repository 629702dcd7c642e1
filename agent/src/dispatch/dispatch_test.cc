// castscope's autocast kernel inside CPU libtorch: registered from the native
// CPU policy against a runtime of the test's own, it must compute exactly
// what native autocast computes and record each decision.
#include "agent/src/dispatch/dispatch.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <gtest/gtest.h>

#include <vector>

#include "agent/src/policy/policy.h"

namespace castscope {
namespace {

// torch.autocast("cpu", dtype=torch.bfloat16) as the Python context manager
// does it: the cast cache is cleared when the outermost region exits.
class CpuAutocast {
 public:
  CpuAutocast() {
    at::autocast::set_autocast_enabled(at::kCPU, true);
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
    at::autocast::increment_nesting();
  }
  ~CpuAutocast() {
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    at::autocast::set_autocast_enabled(at::kCPU, false);
  }
};

struct Drained {
  std::vector<Record> ops;
  std::vector<Record> casts;
};

Drained drain(Runtime& runtime) {
  Drained out;
  runtime.events.drain([&](const Record& r) {
    if (r.kind == RecordKind::kOp) out.ops.push_back(r);
    if (r.kind == RecordKind::kCast) out.casts.push_back(r);
  });
  return out;
}

void expect_identical(const at::Tensor& native, const at::Tensor& ours) {
  EXPECT_EQ(native.scalar_type(), ours.scalar_type());
  EXPECT_TRUE(at::equal(native, ours));
}

class AutocastKernelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    policies_ = load_policy_files({std::string(CASTSCOPE_SOURCE_DIR) + "/policies/cpu.json"});
    ASSERT_TRUE(policies_.ok());
    at::manual_seed(0);
  }

  // Runs `job` natively, then with castscope's kernels registered against
  // this test's runtime; returns both results.
  template <typename Job>
  std::pair<at::Tensor, at::Tensor> native_then_ours(Job job) {
    at::Tensor native;
    {
      CpuAutocast region;
      native = job();
    }
    DispatchRegistry registry(runtime_);
    EXPECT_TRUE(registry.register_policies(policies_).empty());
    EXPECT_GT(registry.registered_ops(), 100u);
    CpuAutocast region;
    return {native, job()};
  }

  PolicySet policies_;
  Runtime runtime_;
};

TEST_F(AutocastKernelTest, LowerPrecisionOpCastsInputsAndRecordsEachCast) {
  const at::Tensor input = at::randn({4, 8});
  const at::Tensor weight = at::randn({8, 3}).requires_grad_(true);
  const auto [native, ours] = native_then_ours([&] { return at::mm(input, weight); });
  expect_identical(native, ours);
  EXPECT_EQ(ours.scalar_type(), at::kBFloat16);

  const Drained records = drain(runtime_);
  ASSERT_EQ(records.ops.size(), 1u);
  const Record& op = records.ops[0];
  EXPECT_EQ(runtime_.events.op_meta(op.op_id).name, "aten::mm");
  EXPECT_EQ(op.policy, CastPolicy::kLowerPrecisionFp);
  EXPECT_EQ(op.op.output, DType::kBFloat16);
  EXPECT_EQ(op.op.mode, ExecutionMode::kEager);
  ASSERT_EQ(records.casts.size(), 2u);
  for (const Record& cast : records.casts) {
    EXPECT_EQ(cast.cast.op_seq, op.seq);
    EXPECT_EQ(cast.thread, op.thread);
    EXPECT_EQ(cast.cast.src, DType::kFloat32);
    EXPECT_EQ(cast.cast.dst, DType::kBFloat16);
    EXPECT_EQ(cast.cast.outcome, CastOutcome::kCast);
  }
  EXPECT_EQ(records.casts[0].cast.role, Role::kInput);
  EXPECT_EQ(records.casts[0].cast.cache, CacheOutcome::kNotCacheable);
  EXPECT_EQ(records.casts[1].cast.role, Role::kWeight);
  EXPECT_EQ(records.casts[1].cast.cache, CacheOutcome::kMiss);
  EXPECT_EQ(records.casts[1].cast.ndim, 2);
  EXPECT_EQ(records.casts[1].cast.bytes, 8u * 3u * 4u);
}

TEST_F(AutocastKernelTest, CastCacheServesTheWeightOnTheSecondCall) {
  const at::Tensor input = at::randn({2, 8});
  const at::Tensor weight = at::randn({8, 8}).requires_grad_(true);
  const auto [native, ours] = native_then_ours([&] {
    at::Tensor first = at::mm(input, weight);
    return at::mm(first.to(at::kFloat), weight);
  });
  expect_identical(native, ours);
  std::vector<CacheOutcome> weight_outcomes;
  for (const Record& cast : drain(runtime_).casts)
    if (cast.cast.role == Role::kWeight) weight_outcomes.push_back(cast.cast.cache);
  EXPECT_EQ(weight_outcomes, (std::vector<CacheOutcome>{CacheOutcome::kMiss, CacheOutcome::kHit}));
}

TEST_F(AutocastKernelTest, Fp32OpCastsLowerPrecisionInputsUp) {
  const at::Tensor probabilities = at::rand({16}).to(at::kBFloat16);
  const at::Tensor target = at::rand({16}).round().to(at::kBFloat16);
  const auto [native, ours] =
      native_then_ours([&] { return at::binary_cross_entropy(probabilities, target); });
  expect_identical(native, ours);
  EXPECT_EQ(ours.scalar_type(), at::kFloat);
  const Drained records = drain(runtime_);
  ASSERT_EQ(records.casts.size(), 2u);
  for (const Record& cast : records.casts) {
    EXPECT_EQ(cast.policy, CastPolicy::kFp32);
    EXPECT_EQ(cast.cast.src, DType::kBFloat16);
    EXPECT_EQ(cast.cast.dst, DType::kFloat32);
  }
}

TEST_F(AutocastKernelTest, PromoteOpCastsToTheWidestType) {
  const at::Tensor low = at::randn({3}).to(at::kBFloat16);
  const at::Tensor full = at::randn({3});
  const auto [native, ours] = native_then_ours([&] { return at::cat({low, full}); });
  expect_identical(native, ours);
  EXPECT_EQ(ours.scalar_type(), at::kFloat);
  const Drained records = drain(runtime_);
  ASSERT_EQ(records.casts.size(), 2u);
  EXPECT_EQ(records.casts[0].cast.list_index, 0);
  EXPECT_EQ(records.casts[0].cast.outcome, CastOutcome::kCast);
  EXPECT_EQ(records.casts[1].cast.list_index, 1);
  EXPECT_EQ(records.casts[1].cast.outcome, CastOutcome::kAlreadyTarget);
}

TEST_F(AutocastKernelTest, OutsideAutocastTheKernelDoesNotRun) {
  DispatchRegistry registry(runtime_);
  ASSERT_TRUE(registry.register_policies(policies_).empty());
  const at::Tensor result = at::mm(at::randn({2, 2}), at::randn({2, 2}));
  EXPECT_EQ(result.scalar_type(), at::kFloat);
  EXPECT_TRUE(drain(runtime_).ops.empty());
}

TEST_F(AutocastKernelTest, DestroyingTheRegistryRestoresNativeKernels) {
  {
    DispatchRegistry registry(runtime_);
    ASSERT_TRUE(registry.register_policies(policies_).empty());
  }
  CpuAutocast region;
  EXPECT_EQ(at::mm(at::randn({2, 2}), at::randn({2, 2})).scalar_type(), at::kBFloat16);
  EXPECT_TRUE(drain(runtime_).ops.empty());
}

}  // namespace
}  // namespace castscope
