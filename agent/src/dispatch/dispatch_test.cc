// castscope's autocast kernel inside CPU libtorch: registered from the native
// CPU policy against a runtime of the test's own, it must compute exactly
// what native autocast computes and record each decision.
#include "agent/src/dispatch/dispatch.h"
#include "agent/src/dispatch/native_cast_order.h"

#include <ATen/ATen.h>
#include <ATen/autocast_mode.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/SequenceNumber.h>
#include <ATen/record_function.h>
#include <c10/core/InferenceMode.h>
#include <gtest/gtest.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/accumulate_grad.h>

#include <algorithm>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "agent/src/context/cast_cache_watch.h"
#include "agent/src/numerics/numerics_windows.h"
#include "agent/src/observers/op_probe.h"
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
  std::vector<Record> casts;        // autocast's decisions
  std::vector<Record> conversions;  // every other conversion (explicit_casts.h): the tests' own .to() among them
};

// The ops and casts recorded, in the ring's order except that an op's casts
// (logged together, in the order they were made: native autocast's, which
// CastsRunInNativeAutocastsOrder checks) are put in argument order, so the
// tests below read them by position.
Drained drain(RecordingState& runtime) {
  Drained out;
  runtime.events.drain([&](const Record& r) {
    if (r.kind == RecordKind::kOp) out.ops.push_back(r);
    if (r.kind == RecordKind::kCast) (r.cast.maker == CastMaker::kAutocast ? out.casts : out.conversions).push_back(r);
  });
  for (auto first = out.casts.begin(); first != out.casts.end();) {
    const auto other_op = [&](const Record& r) { return r.cast.op_seq != first->cast.op_seq; };
    const auto last = first->cast.op_seq == 0 ? first + 1 : std::find_if(first, out.casts.end(), other_op);
    std::stable_sort(first, last, [](const Record& a, const Record& b) {
      return std::pair(a.cast.arg_index, a.cast.list_index) < std::pair(b.cast.arg_index, b.cast.list_index);
    });
    first = last;
  }
  return out;
}

// Every record, in the ring's order.
std::vector<Record> in_ring_order(RecordingState& runtime) {
  std::vector<Record> all;
  runtime.events.drain([&](const Record& r) { all.push_back(r); });
  return all;
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
  RecordingState runtime_;
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
  EXPECT_EQ(op.op.output, DType::kBfloat16);
  EXPECT_EQ(op.op.mode, ExecutionMode::kEager);
  ASSERT_EQ(records.casts.size(), 2u);
  for (const Record& cast : records.casts) {
    EXPECT_EQ(cast.cast.op_seq, op.seq);
    EXPECT_EQ(cast.thread, op.thread);
    EXPECT_EQ(cast.cast.src, DType::kFloat32);
    EXPECT_EQ(cast.cast.dst, DType::kBfloat16);
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

std::vector<Record> cache_samples(RecordingState& runtime) {
  std::vector<Record> out;
  runtime.events.drain([&](const Record& r) {
    if (r.kind == RecordKind::kCacheSample) out.push_back(r);
  });
  return out;
}

// A loop inside one region with a new leaf each pass (input-gradient
// saliency): the observer says when misses make a sample due, and the
// samples show the cache holding more while it serves the weight again.
TEST_F(AutocastKernelTest, MissesTriggerCacheSamplesThatShowGrowthInOneRegion) {
  DispatchRegistry registry(runtime_);
  ASSERT_TRUE(registry.register_policies(policies_).empty());
  runtime_.cast_cache.set_sample_every_misses(4);
  const at::Tensor weight = at::randn({8, 8}).requires_grad_(true);
  {
    CpuAutocast region;
    for (int pass = 0; pass < 24; ++pass) {
      at::Tensor x = at::randn({2, 8}).requires_grad_(true);  // dropped at the end of the pass
      (void)at::mm(x, weight);
    }
    const auto samples = cache_samples(runtime_);
    // 48 cacheable casts (an input's miss and the weight each pass, a miss
    // once, then hits), made in native autocast's order (the wheel's, right
    // to left: the weight first). A sample is due at a miss once as many
    // cacheable casts as the cache held at the last sample (at least 4) have
    // passed: at passes 1, 3, 6, 10 and 16 (counted from 0), holding 3, 5,
    // 8, 12 and 18 casts (left to right: passes 2, 4, 7, 12, 19; 4, 6, 9, 14, 21).
    const bool right_to_left = registry.cast_order().right_to_left();
    ASSERT_EQ(samples.size(), 5u);
    uint64_t previous = 0;
    for (const Record& r : samples) {
      EXPECT_EQ(r.sample.trigger, SampleTrigger::kMisses);
      EXPECT_GT(r.sample.live_casts, previous);
      EXPECT_EQ(r.sample.released_casts, 0u);
      // Each input's cast keeps, through its autograd graph, the input alive.
      EXPECT_EQ(r.sample.orphaned_casts, 0u);
      previous = r.sample.live_casts;
    }
    EXPECT_EQ(samples.back().sample.live_casts, right_to_left ? 18u : 21u);
    // The weight's hits, passes 1 to 16, that pass's cast made before its
    // input's miss (left to right: 1 to 18, pass 19's input before its weight).
    EXPECT_EQ(samples.back().sample.cache_hits, right_to_left ? 16u : 18u);
  }
  // The region's exit let go of every cast.
  const Record after = cache_sample_record(runtime_, SampleTrigger::kStop);
  EXPECT_EQ(after.sample.live_casts, 0u);
  EXPECT_EQ(after.sample.released_casts, 25u);
}

// A cast that outlives its source (the cache still holds it) is counted as
// orphaned until the cast goes. Driven through the observer directly: on
// torch 2.14.1 the cached casts of these loops keep their sources alive,
// with grad (through the cast's autograd graph) and, as observed, without.
TEST(CastCacheWatchTest, CastsOfFreedSourcesCountAsOrphanedUntilTheCastGoes) {
  CastCacheWatch observer;
  const at::Tensor kept_source = at::randn({8, 8}).requires_grad_(true);
  const at::Tensor kept_cast = kept_source.to(at::kBFloat16);
  (void)observer.observe(kept_source, kept_cast);
  at::Tensor orphan_cast;
  {
    const at::Tensor source = at::randn({2, 8}).requires_grad_(true);
    orphan_cast = source.detach().to(at::kBFloat16);  // no graph back to the source
    EXPECT_EQ(observer.observe(source, orphan_cast).outcome, CacheOutcome::kMiss);
  }
  auto sample = observer.sample();
  EXPECT_EQ(sample.live_casts, 2u);
  EXPECT_EQ(sample.orphaned_casts, 1u);
  EXPECT_EQ(sample.orphaned_bytes, 2u * 8u * 2u);
  EXPECT_EQ(sample.released_casts, 0u);
  orphan_cast.reset();  // the region's exit: the cache lets go
  sample = observer.sample();
  EXPECT_EQ(sample.live_casts, 1u);
  EXPECT_EQ(sample.orphaned_casts, 0u);
  EXPECT_EQ(sample.released_casts, 1u);
}

// Samples are due every N misses, then every `held` misses once the cache
// holds more: observe() only counts.
TEST(CastCacheWatchTest, SamplesAreDueAfterNMissesThenAfterAsManyAsHeld) {
  CastCacheWatch observer;
  observer.set_sample_every_misses(2);
  std::vector<at::Tensor> sources, casts;
  std::vector<int> due_at;
  for (int miss = 1; miss <= 12; ++miss) {
    sources.push_back(at::randn({2}).requires_grad_(true));
    casts.push_back(sources.back().to(at::kBFloat16));
    if (observer.observe(sources.back(), casts.back()).sample_due) {
      due_at.push_back(miss);
      (void)observer.sample();
    }
  }
  EXPECT_EQ(due_at, (std::vector<int>{2, 4, 8}));
  EXPECT_FALSE(observer.observe(sources[0], casts[0]).sample_due);  // a hit is not a miss
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
    EXPECT_EQ(cast.cast.src, DType::kBfloat16);
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

// mm, linear and conv2d get the unboxed kernel; TorchScript and other boxed
// callers reach it through the dispatcher's boxing wrapper. Both ways must
// compute what native autocast computes and make the same records.
TEST_F(AutocastKernelTest, UnboxedAndBoxedCallsMakeTheSameDecisionsAndRecords) {
  const at::Tensor x = at::randn({4, 16});
  const at::Tensor weight = at::randn({8, 16}).requires_grad_(true);
  const at::Tensor bias = at::randn({8});
  const at::Tensor image = at::randn({1, 3, 8, 8});
  const at::Tensor kernel = at::randn({4, 3, 3, 3});
  auto boxed_linear = [&](const c10::IValue& b) {
    torch::jit::Stack stack{x, weight, b};
    c10::Dispatcher::singleton().findSchemaOrThrow("aten::linear", "").callBoxed(&stack);
    return stack.at(0).toTensor();
  };
  std::vector<at::Tensor> native;
  {
    CpuAutocast region;
    native = {at::linear(x, weight, bias), at::linear(x, weight), at::conv2d(image, kernel), boxed_linear(bias)};
  }
  DispatchRegistry registry(runtime_);
  ASSERT_TRUE(registry.register_policies(policies_).empty());
  EXPECT_GE(registry.registered_unboxed_ops(), 3u);  // at least mm, linear, conv2d
  std::vector<at::Tensor> ours;
  {
    CpuAutocast region;
    ours = {at::linear(x, weight, bias), at::linear(x, weight), at::conv2d(image, kernel), boxed_linear(bias)};
  }
  for (size_t i = 0; i < native.size(); ++i) expect_identical(native[i], ours[i]);

  const Drained records = drain(runtime_);
  ASSERT_EQ(records.ops.size(), 4u);
  // linear with a bias, without one (Tensor? unset: no cast), conv2d, linear boxed.
  ASSERT_EQ(records.casts.size(), 3u + 2u + 2u + 3u);
  const std::vector<size_t> casts_per_op = {3, 2, 2, 3};
  const bool right_to_left = registry.cast_order().right_to_left();
  size_t next_cast = 0;
  for (size_t i = 0; i < records.ops.size(); ++i) {
    const Record& op = records.ops[i];
    EXPECT_EQ(op.op.output, DType::kBfloat16);
    EXPECT_TRUE(op.op.ok);
    EXPECT_EQ(op.op.num_inputs, casts_per_op[i]);
    for (size_t c = 0; c < casts_per_op[i]; ++c, ++next_cast) {
      const Record& cast = records.casts[next_cast];
      EXPECT_EQ(cast.cast.op_seq, op.seq);
      // The unboxed kernel takes an op's seq and its casts' with one
      // fetch_add (an unset Tensor? takes none); the boxed one takes each.
      // The casts are made, and take their seqs, in native autocast's order
      // (the wheel's: right to left).
      EXPECT_EQ(cast.seq, op.seq + 1 + (right_to_left ? casts_per_op[i] - 1 - c : c));
      EXPECT_EQ(cast.ts_ns, op.ts_ns);  // a cast carries its op's start
      EXPECT_EQ(cast.cast.arg_index, c);  // schema positions
      EXPECT_EQ(cast.cast.dst, DType::kBfloat16);
      EXPECT_EQ(cast.cast.outcome, CastOutcome::kCast);
    }
  }
  // No seq left unused between one op and the next.
  for (size_t i = 1; i < records.ops.size(); ++i)
    EXPECT_EQ(records.ops[i].seq, records.ops[i - 1].seq + 1 + casts_per_op[i - 1]);
  EXPECT_EQ(runtime_.events.op_meta(records.ops[0].op_id).name, "aten::linear");
  EXPECT_EQ(runtime_.events.op_meta(records.ops[0].op_id).arg_names, (std::vector<std::string>{"input", "weight", "bias"}));
  EXPECT_EQ(runtime_.events.op_meta(records.ops[2].op_id).name, "aten::conv2d");
  // The weight's cast: a miss, then served from the cache, boxed or not.
  EXPECT_EQ(records.casts[1].cast.cache, CacheOutcome::kMiss);
  EXPECT_EQ(records.casts[4].cast.cache, CacheOutcome::kHit);
  EXPECT_EQ(records.casts[8].cast.cache, CacheOutcome::kHit);
  for (const size_t weight_cast : {1, 4, 8}) EXPECT_EQ(records.casts[weight_cast].cast.role, Role::kWeight);
  // The same linear through the unboxed and the boxed kernel: their casts'
  // records agree on everything but their seqs and what the cache did.
  for (size_t c = 0; c < 3; ++c) {
    SCOPED_TRACE("cast " + std::to_string(c));
    const CastFields& unboxed = records.casts[c].cast;
    const CastFields& boxed = records.casts[7 + c].cast;
    EXPECT_EQ(unboxed.bytes, boxed.bytes);
    EXPECT_GT(unboxed.bytes, 0u);
    EXPECT_EQ(unboxed.ndim, boxed.ndim);
    for (int d = 0; d < kMaxShapeDims; ++d) EXPECT_EQ(unboxed.shape[d], boxed.shape[d]);
    EXPECT_EQ(unboxed.arg_index, boxed.arg_index);
    EXPECT_EQ(unboxed.list_index, boxed.list_index);
    EXPECT_EQ(unboxed.src, boxed.src);
    EXPECT_EQ(unboxed.outcome, boxed.outcome);
    EXPECT_EQ(unboxed.role, boxed.role);
    EXPECT_EQ(unboxed.location, boxed.location);
    EXPECT_EQ(unboxed.mode, boxed.mode);
    EXPECT_EQ(unboxed.phase, boxed.phase);
    EXPECT_EQ(unboxed.round_trip, boxed.round_trip);
    EXPECT_EQ(unboxed.source_version, boxed.source_version);
    EXPECT_EQ(records.casts[c].thread, records.casts[7 + c].thread);
    EXPECT_EQ(records.casts[c].policy, records.casts[7 + c].policy);
  }
  EXPECT_EQ(records.casts[0].cast.bytes, 4u * 16u * 4u);  // x: 4 x 16 float32
}

// A numerics window open from construction to destruction: the unboxed
// kernel then records each cast at once.
struct NumericsWindow {
  NumericsWindow() {
    NumericsConfig config;
    config.schedule.max_ms = 600000;
    numerics_start(config);  // open from now
  }
  ~NumericsWindow() { numerics_stop(); }
  NumericsWindow(const NumericsWindow&) = delete;
  NumericsWindow& operator=(const NumericsWindow&) = delete;
};

// What RecordFunction callbacks saw on the test's thread, one line per call:
// the op, the inputs they were shown (tensors by dtype and shape, other values as
// printed), its autograd sequence number relative to the last aten::mm's
// and how many outputs. Callbacks are plain function pointers:
// the state lives here.
struct ObservedOps {
  std::thread::id thread;
  std::vector<std::string> lines;
  int64_t mm_sequence_nr = -1;
};
ObservedOps& observed_ops() {
  static ObservedOps ops;
  return ops;
}
std::string describe_inputs(const at::RecordFunction& fn) {
  std::ostringstream out;
  for (const c10::IValue& input : fn.inputs()) {
    if (input.isTensor())
      out << " T:" << input.toTensor().scalar_type() << input.toTensor().sizes();
    else
      out << " " << input;
  }
  return out.str();
}
std::unique_ptr<at::ObserverContext> observe_start(const at::RecordFunction& fn) {
  ObservedOps& ops = observed_ops();
  if (std::this_thread::get_id() != ops.thread) return nullptr;
  if (std::string(fn.name()) == "aten::mm") ops.mm_sequence_nr = fn.seqNr();
  const std::string sequence_nr = fn.seqNr() < 0            ? "none"
                                  : ops.mm_sequence_nr < 0 ? "before any mm seen"
                                                           : std::to_string(fn.seqNr() - ops.mm_sequence_nr);
  ops.lines.push_back(std::string("start ") + fn.name() + " inputs" + describe_inputs(fn) + " seq=" + sequence_nr);
  return nullptr;
}
void observe_end(const at::RecordFunction& fn, at::ObserverContext*) {
  ObservedOps& ops = observed_ops();
  if (std::this_thread::get_id() != ops.thread) return;
  ops.lines.push_back(std::string("end ") + fn.name() + " outputs=" + std::to_string(fn.outputs().size()));
}

// Casts made without to's dispatch (cast_without_dispatch.h) take the
// RecordFunction draw that dispatch takes, and run what it drew as the
// dispatcher does: an observer of every op (thread-local, as a profiler's, or
// global, as an execution-trace observer's) sees aten::to with its inputs,
// sequence number and output, and a sampled one samples the same ops as
// natively (the same seed, the same draws). The unboxed kernel (mm) and the
// boxed one (mm called boxed) both.
TEST_F(AutocastKernelTest, RecordFunctionObserversSeeTheOpsTheySeeNatively) {
  // Inputs told apart by their shapes and autograd: an activation that needs
  // grad (its cast has a sequence number and a node) and one that does not.
  const at::Tensor x = at::randn({8, 4}).requires_grad_(true).mul(2);
  const at::Tensor y = at::randn({4, 8});
  const auto& mm_op = c10::Dispatcher::singleton().findSchemaOrThrow("aten::mm", "");
  struct Observer {
    double sampling_probability;
    bool global;
    bool needs_inputs_and_outputs;
  };
  std::vector<std::vector<std::string>> seen;
  auto job = [&](const Observer& observer) {
    return [&, observer] {
      observed_ops() = ObservedOps{std::this_thread::get_id(), {}, -1};
      at::set_record_function_seed_for_testing(42);
      auto callback = at::RecordFunctionCallback(observe_start, observe_end)
                          .samplingProb(observer.sampling_probability)
                          .needsInputs(observer.needs_inputs_and_outputs)
                          .needsOutputs(observer.needs_inputs_and_outputs)
                          .scopes({at::RecordScope::FUNCTION});
      const at::CallbackHandle handle =
          observer.global ? at::addGlobalCallback(callback) : at::addThreadLocalCallback(callback);
      at::Tensor out;
      for (int i = 0; i < 100; ++i) {
        out = at::mm(x, y);
        torch::jit::Stack stack{y, x};
        mm_op.callBoxed(&stack);
      }
      at::removeCallback(handle);
      seen.push_back(observed_ops().lines);
      return out;
    };
  };
  for (const Observer observer :
       {Observer{1.0, false, true}, Observer{1.0, true, true}, Observer{0.05, false, true}, Observer{1.0, false, false}}) {
    SCOPED_TRACE("sampling " + std::to_string(observer.sampling_probability) + (observer.global ? " global" : "") +
                 (observer.needs_inputs_and_outputs ? "" : " without inputs and outputs"));
    seen.clear();
    const uint64_t direct_before = runtime_.events.direct_casts();
    const auto [native, ours] = native_then_ours(job(observer));
    expect_identical(native, ours);
    EXPECT_EQ(runtime_.events.direct_casts() - direct_before, 400u);  // 200 mms' two casts each: without to's dispatch
    ASSERT_EQ(seen.size(), 2u);
    const std::string to_line = observer.needs_inputs_and_outputs
                                    ? "start aten::to inputs T:Float[8, 4] 15 False False None seq="
                                    : "start aten::to inputs seq=";
    EXPECT_GT(std::count_if(seen[0].begin(), seen[0].end(),
                            [&](const std::string& line) { return line.starts_with(to_line); }),
              0)
        << ::testing::PrintToString(seen[0]);
    EXPECT_EQ(seen[0], seen[1]);
  }
}

// Which of `inputs` (leaves that need grad) each cast in `out`'s autograd
// graph was made of, in the order the casts were made (their nodes'
// sequence numbers).
std::vector<size_t> inputs_in_cast_order(const at::Tensor& out, const std::vector<at::Tensor>& inputs) {
  std::vector<std::pair<uint64_t, size_t>> casts;  // (sequence number, input)
  std::vector<torch::autograd::Node*> stack{out.grad_fn().get()};
  std::vector<torch::autograd::Node*> seen;
  while (!stack.empty()) {
    torch::autograd::Node* node = stack.back();
    stack.pop_back();
    if (node == nullptr || std::find(seen.begin(), seen.end(), node) != seen.end()) continue;
    seen.push_back(node);
    for (const torch::autograd::Edge& edge : node->next_edges()) {
      const auto* leaf = dynamic_cast<const torch::autograd::AccumulateGrad*>(edge.function.get());
      if (node->name() == "ToCopyBackward0" && leaf != nullptr) {
        for (size_t i = 0; i < inputs.size(); ++i)
          if (leaf->variable.unsafeGetTensorImpl() == inputs[i].unsafeGetTensorImpl())
            casts.emplace_back(node->sequence_nr(), i);
      }
      stack.push_back(edge.function.get());
    }
  }
  std::sort(casts.begin(), casts.end());
  std::vector<size_t> order;
  for (const auto& cast : casts) order.push_back(cast.second);
  return order;
}

// castscope casts an op's arguments in the order native autocast does, read
// when it registers (native_cast_order.h; the wheel's libtorch, built by
// GCC: right to left): the casts' autograd nodes take their sequence numbers
// in the same order, for the unboxed kernel (mm, addmm) and the boxed one
// (linalg_vecdot), and records follow that order.
TEST_F(AutocastKernelTest, CastsRunInNativeAutocastsOrder) {
  const std::vector<at::Tensor> inputs = {at::randn({4, 4}).requires_grad_(true),
                                          at::randn({4, 4}).requires_grad_(true),
                                          at::randn({4, 4}).requires_grad_(true)};
  const auto& a = inputs[0];
  const auto& b = inputs[1];
  const auto& c = inputs[2];
  // Each op in a region of its own: none finds another's casts in the cache.
  auto in_region = [&](auto op) {
    const CpuAutocast region;
    return inputs_in_cast_order(op(), inputs);
  };
  auto orders = [&] {
    return std::vector<std::vector<size_t>>{in_region([&] { return at::mm(a, b); }),
                                            in_region([&] { return at::addmm(a, b, c); }),
                                            in_region([&] { return at::linalg_vecdot(b, c); })};
  };
  const std::vector<std::vector<size_t>> native = orders();
  ASSERT_EQ(native.size(), 3u);
  DispatchRegistry registry(runtime_);
  ASSERT_TRUE(registry.register_policies(policies_).empty());
  const NativeCastOrder& order = registry.cast_order();
  ASSERT_TRUE(order.read) << order.unread_because;
  const bool right_to_left = order.right_to_left();
  EXPECT_EQ(native[0], right_to_left ? std::vector<size_t>({1, 0}) : std::vector<size_t>({0, 1}));
  EXPECT_EQ(native[1], right_to_left ? std::vector<size_t>({2, 1, 0}) : std::vector<size_t>({0, 1, 2}));
  EXPECT_EQ(native[2], right_to_left ? std::vector<size_t>({2, 1}) : std::vector<size_t>({1, 2}));
  (void)drain(runtime_);
  EXPECT_EQ(orders(), native);
  std::vector<Record> casts = in_ring_order(runtime_);
  std::erase_if(casts, [](const Record& r) { return r.kind != RecordKind::kCast; });
  ASSERT_EQ(casts.size(), 2u + 3u + 2u);
  // Logged as made, their seqs taken as made.
  const std::vector<uint16_t> arg_order = right_to_left ? std::vector<uint16_t>{1, 0, 2, 1, 0, 1, 0}
                                                        : std::vector<uint16_t>{0, 1, 0, 1, 2, 0, 1};
  for (size_t i = 0; i < casts.size(); ++i) {
    EXPECT_EQ(casts[i].cast.arg_index, arg_order[i]) << "cast " << i;
    if (i > 0) {
      EXPECT_GT(casts[i].seq, casts[i - 1].seq);
    }
  }
  // One weight as both arguments: the argument cast first is the cache's
  // miss, the other its hit on that cast.
  {
    const CpuAutocast region;
    (void)at::mm(a, a);
  }
  const Drained twice = drain(runtime_);  // in argument order
  ASSERT_EQ(twice.casts.size(), 2u);
  EXPECT_EQ(twice.casts[right_to_left ? 1 : 0].cast.cache, CacheOutcome::kMiss);
  EXPECT_EQ(twice.casts[right_to_left ? 0 : 1].cast.cache, CacheOutcome::kHit);
}

// Reading native autocast's order leaves no trace on the caller's thread,
// whatever state an attach comes in: inside an autocast region (float16, a
// weight's cast in the cache) with autocast switched off, under no_grad, in
// inference mode or not. Observers see none of its ops; autocast's switch and
// dtype, grad and inference mode, the thread's dispatch keys and its autograd
// sequence number are as they were; the cache still serves the weight.
TEST_F(AutocastKernelTest, ReadingTheNativeOrderLeavesNoTrace) {
  observed_ops() = ObservedOps{std::this_thread::get_id(), {}, -1};
  const at::CallbackHandle handle = at::addThreadLocalCallback(
      at::RecordFunctionCallback(observe_start, observe_end).scopes({at::RecordScope::FUNCTION}));
  const at::Tensor weight = at::randn({4, 4}).requires_grad_(true);
  {
    CpuAutocast region;
    at::autocast::set_autocast_dtype(at::kCPU, at::kHalf);
    (void)at::mm(weight, weight);  // the weight's cast, made once and cached
    at::autocast::set_autocast_enabled(at::kCPU, false);
    const at::NoGradGuard no_grad;
    for (const bool inference : {false, true}) {
      const c10::InferenceMode mode(inference);  // (false: grad mode on again)
      const bool grad = c10::GradMode::is_enabled();
      const c10::impl::LocalDispatchKeySet keys = c10::impl::tls_local_dispatch_key_set();
      const uint64_t sequence_nr = at::sequence_number::peek();
      const NativeCastOrder order = read_native_cast_order();
      EXPECT_TRUE(order.read) << order.unread_because;
      EXPECT_FALSE(at::autocast::is_autocast_enabled(at::kCPU));
      EXPECT_EQ(at::autocast::get_autocast_dtype(at::kCPU), at::kHalf);
      EXPECT_EQ(c10::GradMode::is_enabled(), grad);
      EXPECT_EQ(c10::InferenceMode::is_enabled(), inference);
      EXPECT_EQ(c10::impl::tls_local_dispatch_key_set().included_, keys.included_);
      EXPECT_EQ(c10::impl::tls_local_dispatch_key_set().excluded_, keys.excluded_);
      EXPECT_EQ(at::sequence_number::peek(), sequence_nr);
    }
    at::autocast::set_autocast_enabled(at::kCPU, true);
    (void)at::mm(weight, weight);  // both arguments served by the cache
    at::autocast::set_autocast_dtype(at::kCPU, at::kBFloat16);
  }
  at::removeCallback(handle);
  // Only the two mms: one cast between them, two mm lines each (the
  // autocast wrapper's and the kernel's).
  const auto lines_starting = [](const std::string& start) {
    return std::count_if(observed_ops().lines.begin(), observed_ops().lines.end(),
                         [&](const std::string& line) { return line.starts_with(start); });
  };
  EXPECT_EQ(lines_starting("start aten::to "), 1) << ::testing::PrintToString(observed_ops().lines);
  EXPECT_EQ(lines_starting("start aten::mm "), 4) << ::testing::PrintToString(observed_ops().lines);
  EXPECT_EQ(lines_starting("start aten::ones"), 0);
}

// The unboxed kernel records an op's casts after the op in the steady state
// and at once inside a numerics window open when the op starts (or a probe
// window, or while compiling). Both ways make the same records, in the same
// order: what a record reads of its source does not change across the op,
// and its version is read at the cast (here a stale hit: the weight changed
// in place between two linears of one region).
TEST_F(AutocastKernelTest, CastsRecordedAfterTheOpAreThoseRecordedAtOnce) {
  const at::Tensor x = at::randn({4, 16});
  const at::Tensor weight = at::randn({8, 16}).requires_grad_(true);
  const at::Tensor bias = at::randn({8});
  DispatchRegistry registry(runtime_);
  ASSERT_TRUE(registry.register_policies(policies_).empty());
  auto linear_twice = [&] {
    CpuAutocast region;  // each pass its own region: a miss, then a stale hit
    at::linear(x, weight, bias);
    {
      at::NoGradGuard no_grad;
      weight.mul_(1);  // a new version; the cache still serves the old cast
    }
    at::linear(x, weight, bias);
  };
  ASSERT_FALSE(numerics_window_open() || probe_window_open());  // the first pass records after each op
  linear_twice();
  const std::vector<Record> after = in_ring_order(runtime_);
  {
    const NumericsWindow window;
    ASSERT_TRUE(numerics_window_open());
    linear_twice();  // recorded at once
  }
  const std::vector<Record> at_once = in_ring_order(runtime_);

  // Per linear: its three casts, then the op (no cache sample is due).
  const std::vector<RecordKind> kinds = {RecordKind::kCast, RecordKind::kCast, RecordKind::kCast, RecordKind::kOp,
                                         RecordKind::kCast, RecordKind::kCast, RecordKind::kCast, RecordKind::kOp};
  ASSERT_EQ(after.size(), kinds.size());
  ASSERT_EQ(at_once.size(), kinds.size());
  for (size_t i = 0; i < kinds.size(); ++i) {
    SCOPED_TRACE("record " + std::to_string(i));
    EXPECT_EQ(after[i].kind, kinds[i]);
    EXPECT_EQ(at_once[i].kind, kinds[i]);
    if (kinds[i] != RecordKind::kCast) continue;
    const Record& a = after[i];
    const Record& b = at_once[i];
    const Record& a_op = after[i / 4 * 4 + 3];
    const Record& b_op = at_once[i / 4 * 4 + 3];
    EXPECT_EQ(a.seq - a_op.seq, b.seq - b_op.seq);
    EXPECT_EQ(a.cast.op_seq, a_op.seq);
    EXPECT_EQ(b.cast.op_seq, b_op.seq);
    EXPECT_EQ(a.ts_ns, a_op.ts_ns);
    EXPECT_EQ(b.ts_ns, b_op.ts_ns);
    EXPECT_EQ(a.thread, b.thread);
    EXPECT_EQ(a.op_id, b.op_id);
    EXPECT_EQ(a.policy, b.policy);
    EXPECT_EQ(a.cast.arg_index, b.cast.arg_index);
    EXPECT_EQ(a.cast.list_index, b.cast.list_index);
    EXPECT_EQ(a.cast.src, b.cast.src);
    EXPECT_EQ(a.cast.dst, b.cast.dst);
    EXPECT_EQ(a.cast.outcome, b.cast.outcome);
    EXPECT_EQ(a.cast.role, b.cast.role);
    EXPECT_EQ(a.cast.cache, b.cast.cache);
    EXPECT_EQ(a.cast.bytes, b.cast.bytes);
    EXPECT_EQ(a.cast.ndim, b.cast.ndim);
    for (int d = 0; d < kMaxShapeDims; ++d) EXPECT_EQ(a.cast.shape[d], b.cast.shape[d]);
    EXPECT_EQ(a.cast.mode, b.cast.mode);
    EXPECT_EQ(a.cast.phase, b.cast.phase);
    EXPECT_EQ(a.cast.round_trip, b.cast.round_trip);
    // Versions move on with each pass's in-place change: compared by their gap.
    EXPECT_EQ(a.cast.source_version - a.cast.cached_version, b.cast.source_version - b.cast.cached_version);
  }
  // The weight's casts (argument 1, wherever the order puts them): a miss,
  // then a hit on the cast of an older version.
  for (const std::vector<Record>* records : {&after, &at_once}) {
    std::vector<Record> weight_casts;
    for (const Record& r : *records)
      if (r.kind == RecordKind::kCast && r.cast.arg_index == 1) weight_casts.push_back(r);
    ASSERT_EQ(weight_casts.size(), 2u);
    EXPECT_EQ(weight_casts[0].cast.cache, CacheOutcome::kMiss);
    EXPECT_EQ(weight_casts[1].cast.cache, CacheOutcome::kStaleHit);
    EXPECT_EQ(weight_casts[1].cast.source_version, weight_casts[1].cast.cached_version + 1);
  }
}

// A module built under torch.inference_mode has inference tensors for
// weights: leaves that require grad, which cached_cast's condition admits,
// but with no version counter (asking raises). Their casts are recorded and
// observed, the same when recorded after the op and at once, with no internal
// error. (torch 2.14.1's cache did not serve them again here: each is a miss.)
TEST_F(AutocastKernelTest, InferenceTensorWeightsAreRecordedAndObserved) {
  // Weights made under inference mode are inference tensors (no version
  // counter: asking raises). Used outside it, the cast cache keeps their casts
  // and the observer follows them at version 0; under inference mode torch's
  // cached_cast keeps nothing, so neither is observed.
  at::Tensor x, weight;
  {
    c10::InferenceMode inference;
    x = at::randn({4, 16});
    weight = at::randn({8, 16}).requires_grad_(true);
    EXPECT_FALSE(CastCacheWatch::cacheable(weight, at::kBFloat16, at::kCPU));
  }
  ASSERT_TRUE(weight.is_inference());
  ASSERT_TRUE(CastCacheWatch::cacheable(weight, at::kBFloat16, at::kCPU));
  DispatchRegistry registry(runtime_);
  ASSERT_TRUE(registry.register_policies(policies_).empty());
  auto linear_twice = [&] {
    const c10::AutoGradMode no_grad(false);  // an inference tensor cannot be saved for backward
    CpuAutocast region;
    at::linear(x, weight);
    at::linear(x, weight);
  };
  linear_twice();  // recorded after each op
  {
    const NumericsWindow window;
    linear_twice();  // recorded at once
  }
  {
    c10::InferenceMode inference;
    linear_twice();
  }
  const Drained records = drain(runtime_);
  ASSERT_EQ(records.ops.size(), 6u);
  ASSERT_EQ(records.casts.size(), 12u);
  for (size_t weight_cast : {1, 3}) {
    SCOPED_TRACE("cast " + std::to_string(weight_cast));
    const CastFields& after = records.casts[weight_cast].cast;
    const CastFields& at_once = records.casts[4 + weight_cast].cast;
    const CastFields& inference = records.casts[8 + weight_cast].cast;
    EXPECT_EQ(after.role, Role::kWeight);
    EXPECT_NE(after.cache, CacheOutcome::kNotCacheable);
    EXPECT_EQ(after.cache, at_once.cache);
    EXPECT_EQ(after.source_version, 0u);
    EXPECT_EQ(inference.role, Role::kWeight);
    EXPECT_EQ(inference.cache, CacheOutcome::kNotCacheable);
  }
  EXPECT_EQ(runtime_.events.stats().internal_errors, 0u);
}

TEST_F(AutocastKernelTest, UnusualSourcesAndAFailedOpKeepTheirCastsRecords) {
  // Seven dims (past the kMaxShapeDims a record holds), a float64 weight
  // (left as it is, so the op raises), an empty input: each op's casts are
  // recorded in order with their seqs and bytes, a failed op's with it.
  const at::Tensor deep = at::randn({2, 1, 1, 1, 1, 3, 16});
  const at::Tensor weight = at::randn({8, 16});
  const at::Tensor wide = at::randn({8, 16}, at::kDouble);
  const at::Tensor empty = at::randn({0, 16});
  DispatchRegistry registry(runtime_);
  ASSERT_TRUE(registry.register_policies(policies_).empty());
  {
    CpuAutocast region;
    at::linear(deep, weight);
    EXPECT_THROW(at::linear(empty, wide), c10::Error);  // bfloat16 against float64, as natively
  }
  const Drained records = drain(runtime_);
  const bool right_to_left = registry.cast_order().right_to_left();  // the seqs' order
  ASSERT_EQ(records.ops.size(), 2u);
  ASSERT_EQ(records.casts.size(), 4u);
  const Record& deep_cast = records.casts[0];
  EXPECT_EQ(deep_cast.cast.ndim, 7);  // the dims past kMaxShapeDims are cut from the shape, not from ndim or bytes
  EXPECT_EQ(deep_cast.cast.shape[5], 3);
  EXPECT_EQ(deep_cast.cast.bytes, 2u * 3u * 16u * 4u);
  EXPECT_EQ(deep_cast.cast.arg_index, 0);
  EXPECT_EQ(records.casts[1].cast.ndim, 2);
  EXPECT_EQ(records.casts[1].cast.bytes, 8u * 16u * 4u);
  EXPECT_EQ(records.casts[1].cast.arg_index, 1);
  for (size_t op = 0; op < 2; ++op)
    for (size_t c = 0; c < 2; ++c) {
      EXPECT_EQ(records.casts[2 * op + c].cast.op_seq, records.ops[op].seq);
      EXPECT_EQ(records.casts[2 * op + c].seq, records.ops[op].seq + 1 + (right_to_left ? 1 - c : c));
    }
  EXPECT_EQ(records.casts[2].cast.bytes, 0u);  // 0 x 16
  EXPECT_EQ(records.casts[2].cast.ndim, 2);
  EXPECT_EQ(records.casts[3].cast.outcome, CastOutcome::kFloat64);
  EXPECT_EQ(records.casts[3].cast.src, DType::kFloat64);
  EXPECT_EQ(records.casts[3].cast.bytes, 8u * 16u * 8u);
  EXPECT_TRUE(records.ops[0].op.ok);
  EXPECT_FALSE(records.ops[1].op.ok);
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
