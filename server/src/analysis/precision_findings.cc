// Findings of what ran in which precision: low-precision-escape, cast-churn, cast-share,
// tf32-matmul and not-autocast.
#include "server/src/analysis/finding_rules.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <optional>
#include <set>

#include "server/src/analysis/finding_text.h"

namespace castscope::collector {

using json = nlohmann::json;

void low_precision_escape(const RunData& run, std::vector<Finding>& out) {
  struct Line {
    SiteRef site;
    uint64_t calls = 0;
    std::set<std::string> ops, inputs, outputs;
  };
  std::map<std::tuple<std::string, uint32_t>, Line> lines;  // every op of one line: one finding
  for (const auto& row : run.probe_ops) {
    if (row.reason != v1::PROBE_REASON_LOW_PRECISION_MEETS_FP32) continue;
    Line& line = lines[{row.site.file, row.site.line}];
    if (line.site.op.empty()) line.site = row.site;
    line.calls += row.calls;
    line.ops.insert(row.site.op);
    for (const auto& name : dtype_names(row.input_dtypes)) line.inputs.insert(name);
    for (const auto& name : dtype_names(row.output_dtypes)) line.outputs.insert(name);
  }
  for (auto& [key, line] : lines) {
    SiteRef by_line = line.site;  // the id: the line alone, so a new op there is not a new finding
    by_line.op.clear();
    line.site.op = joined(line.ops);
    Finding f = make_finding(FindingKind::kLowPrecisionEscape, {line.site});
    f.id = finding_id(f.kind, {by_line});
    f.summary = "a lower-precision tensor made under autocast met float32 outside the region in " + line.site.op +
                " (" + std::to_string(line.calls) + " calls; inputs " + joined(line.inputs) + ", result " +
                joined(line.outputs) + ")";
    f.explanation =
        "A tensor computed inside a torch.autocast region (here in " + joined(line.inputs) +
        ") was used after the region ended, together with a float32 tensor. Outside the region no autocast policy "
        "applies: ops either promote silently to float32 (computing on values already rounded to lower precision) "
        "or fail with 'expected scalar type' errors, depending on the op.";
    f.fix =
        "Cast the region's outputs back when they leave it (`out.float()`), as PyTorch's autocast docs advise; or "
        "move this computation (for example the loss) inside the region.";
    f.evidence = {{"calls", line.calls}, {"ops", line.ops}, {"input_dtypes", line.inputs}, {"output_dtypes", line.outputs},
                  {"observed", "op probe windows only (docs/diagnostics.md)"}};
    out.push_back(std::move(f));
  }
}

void cast_churn(const RunData& run, std::vector<Finding>& out) {
  struct Site {
    SiteRef site;
    uint64_t round_trips = 0, bytes = 0;
    std::set<std::string> pairs;
  };
  std::map<std::tuple<std::string, uint32_t, std::string>, Site> sites;
  for (const auto& row : run.sites) {
    if (row.round_trips == 0) continue;
    Site& s = sites[{row.site.file, row.site.line, row.site.op}];
    merge_site(s.site, row.site);
    s.round_trips += row.round_trips;
    s.bytes += row.round_trip_bytes;
    s.pairs.insert(dtype_name(row.dst) + "->" + dtype_name(row.src) + "->" + dtype_name(row.dst));
  }
  for (const auto& [key, s] : sites) {
    if (s.round_trips < 2) continue;  // once is a choice; repeated, it is churn
    Finding f = make_finding(FindingKind::kCastChurn, {s.site});
    f.summary = std::to_string(s.round_trips) + " times autocast cast a tensor back to the dtype it had just been " +
                "cast from (" + joined(s.pairs) + ") for " + s.site.op + ", moving " + std::to_string(s.bytes) +
                " bytes for nothing";
    f.explanation =
        "An explicit cast (`.float()`, `.to(dtype)`) turned a tensor into another dtype, and autocast then cast it "
        "straight back for this op: the data went down and up (or up and down) again, paying two copies of its "
        "bytes and gaining no precision, since the values were already rounded. It repeats every iteration.";
    f.fix =
        "Drop the explicit cast before this op (autocast casts what the op needs), or keep the tensor in the dtype "
        "the op runs in.";
    f.evidence = {{"round_trips", s.round_trips}, {"bytes_cast_back", s.bytes}, {"dtype_round_trips", s.pairs},
                  {"observed", "op probe windows only (docs/diagnostics.md)"}};
    out.push_back(std::move(f));
  }
}

namespace {

// Shares of a site's GPU time in its casts' kernels (docs/gpu.md) that make
// a finding, and the least GPU time a site needs before its share means much.
constexpr double kCastShareWarning = 0.20, kCastShareInfo = 0.05;
constexpr uint64_t kCastShareMinimumNs = 100'000;

}  // namespace

void cast_share(const RunData& run, std::vector<Finding>& out) {
  for (const auto& row : run.gpu_sites) {
    const uint64_t total = row.cast_ns + row.compute_ns;
    if (total < kCastShareMinimumNs || row.cast_ns == 0) continue;
    const double share = static_cast<double>(row.cast_ns) / static_cast<double>(total);
    if (share < kCastShareInfo) continue;
    Finding f = make_finding(FindingKind::kCastShare, share >= kCastShareWarning ? "warning" : "info", {row.site});
    char percent[16];
    std::snprintf(percent, sizeof(percent), "%.0f %%", share * 100);
    f.summary = "casts for " + row.site.op + " took " + percent + " of its GPU time (" + milliseconds(row.cast_ns) +
                " casting, " + milliseconds(row.compute_ns) + " computing)";
    f.explanation =
        "The kernels that converted this op's arguments to its autocast dtype ran for a large share of the time the "
        "op itself ran on the GPU: the lower precision saves less than the conversions cost. Typical causes: small "
        "ops whose inputs are cast on every call, float32 weights cast again every iteration outside the cast cache "
        "(no grad, or a cache cleared by leaving autocast), or activations that go back and forth between dtypes.";
    f.fix =
        "Keep the tensors in the dtype the op runs in (cast weights once, or keep activations in the autocast "
        "dtype), let several ops share one cast inside one autocast region, or run small ops outside autocast.";
    f.evidence = {{"cast_ns", row.cast_ns},
                  {"compute_ns", row.compute_ns},
                  {"cast_share", share},
                  {"cast_kernels", row.cast_kernels},
                  {"compute_kernels", row.compute_kernels},
                  {"thresholds", {{"warning", kCastShareWarning}, {"info", kCastShareInfo}}}};
    out.push_back(std::move(f));
  }
}

namespace {

// classify_kernel's confidence words, and "exact" (cuBLASLt's logger) above them.
int confidence_rank(const std::string& confidence) {
  if (confidence == "exact") return 3;
  if (confidence == "high") return 2;
  return confidence == "medium" ? 1 : 0;
}

const char* kTf32Explanation =
    "TF32 keeps float32's range but rounds each multiplication's inputs to a 10-bit mantissa (float16's "
    "precision) and accumulates in float32: on Ampere and later GPUs it is several times faster than full float32, "
    "and results differ from float32 from about the third or fourth significant digit. PyTorch runs float32 "
    "matmuls as TF32 when torch.backends.cuda.matmul.allow_tf32 is True or torch.set_float32_matmul_precision() "
    "is \"high\" or \"medium\" (off by default), and float32 convolutions while torch.backends.cudnn.allow_tf32 "
    "is True (on by default). Autocast does not decide this: it applies to every float32 matmul, inside an "
    "autocast region (an op autocast keeps in float32, or one it does not cast) or outside one.";

std::string tf32_fix(bool convolution, bool matmul) {
  std::string off;
  if (matmul)
    off = "torch.backends.cuda.matmul.allow_tf32 = False (or torch.set_float32_matmul_precision(\"highest\"))";
  if (convolution) off += std::string(off.empty() ? "" : " and ") + "torch.backends.cudnn.allow_tf32 = False";
  return "Nothing to do if TF32 is what you want: it is expected with these settings, and fast. If this computation "
         "needs full float32 precision, set " +
         off + " before it runs (or only around it), and expect it to run slower.";
}

}  // namespace

// Float32 matmuls and convolutions that ran as TF32: exact where cuBLASLt's
// logger described the op's matmuls, else read from the kernels' names.
void tf32_matmul(const RunData& run, std::vector<Finding>& out) {
  struct Site {
    SiteRef site;
    uint64_t op_calls = 0, matmuls = 0, kernels = 0, gpu_ns = 0, example_ns = 0;
    std::set<std::string> sources;
    std::string confidence, example;
  };
  std::map<std::tuple<std::string, uint32_t, std::string>, Site> sites;
  for (const auto& row : run.gemm_exact) {
    if (row.compute != v1::GEMM_COMPUTE_32F_FAST_TF32) continue;
    Site& s = sites[{row.site.file, row.site.line, row.site.op}];
    s.site = row.site;
    s.op_calls += row.ops;
    s.matmuls += row.matmuls;
    s.sources.insert("cublaslt");
    s.confidence = "exact";
  }
  for (const auto& row : run.gemm_kernels) {
    if (row.inputs != "tf32") continue;
    Site& s = sites[{row.site.file, row.site.line, row.site.op}];
    s.site = row.site;
    s.kernels += row.kernels;
    s.gpu_ns += row.gpu_ns;
    s.sources.insert("kernel_name");
    if (confidence_rank(row.confidence) > confidence_rank(s.confidence) || s.confidence.empty())
      s.confidence = row.confidence;
    if (row.gpu_ns >= s.example_ns) {
      s.example_ns = row.gpu_ns;
      s.example = row.example;
    }
  }
  for (const auto& [key, s] : sites) {
    Finding f = make_finding(FindingKind::kTf32Matmul, {s.site});
    std::string how;
    if (s.op_calls > 0) how = std::to_string(s.op_calls) + " calls as cuBLASLt reported them";
    if (s.kernels > 0)
      how += (how.empty() ? "" : "; ") + std::to_string(s.kernels) + " TF32 kernels, " + milliseconds(s.gpu_ns) +
             " on the GPU" + (s.op_calls > 0 ? "" : " (read from kernel names, " + s.confidence + " confidence)");
    const bool convolution = s.site.op.find("conv") != std::string::npos;
    f.summary = s.site.op + " ran float32 " + (convolution ? "convolutions" : "matmuls") +
                " as TF32 on tensor cores: " + how;
    f.explanation = kTf32Explanation;
    f.fix = tf32_fix(convolution, !convolution);
    std::string source;
    for (const auto& name : s.sources) source += (source.empty() ? "" : "+") + name;
    f.evidence = {{"source", source},   {"confidence", s.confidence}, {"op_calls", s.op_calls},
                  {"matmuls", s.matmuls}, {"kernels", s.kernels},     {"gpu_ns", s.gpu_ns},
                  {"example_kernel", s.example}};
    out.push_back(std::move(f));
  }
  // Launched outside autocast ops (the backward pass, float32 code outside
  // autocast regions): no op, so no site; one finding for the run.
  uint64_t kernels = 0, gpu_ns = 0, example_ns = 0;
  std::string confidence, example;
  for (const auto& row : run.gemm_unattributed) {
    if (row.inputs != "tf32") continue;
    kernels += row.kernels;
    gpu_ns += row.gpu_ns;
    if (confidence_rank(row.confidence) > confidence_rank(confidence) || confidence.empty()) confidence = row.confidence;
    if (row.gpu_ns >= example_ns) {
      example_ns = row.gpu_ns;
      example = row.example;
    }
  }
  if (kernels == 0) return;
  Finding f = make_finding(FindingKind::kTf32Matmul, {});
  f.summary = std::to_string(kernels) + " GEMM kernels launched outside autocast ops ran float32 as TF32 (" +
              milliseconds(gpu_ns) + " on the GPU; read from kernel names, " + confidence +
              " confidence): backward passes, or float32 code outside autocast regions";
  f.explanation = std::string(kTf32Explanation) +
                  " These kernels were launched by no op castscope recorded, so no source line is known; the "
                  "report's gpu.gemm_precision.outside_autocast_ops lists them by precision.";
  f.fix = tf32_fix(true, true);
  f.evidence = {{"source", "kernel_name"}, {"confidence", confidence}, {"kernels", kernels},
                {"gpu_ns", gpu_ns},        {"example_kernel", example}, {"launched", "outside autocast ops"}};
  out.push_back(std::move(f));
}

void not_autocast(const RunData& run, std::vector<Finding>& out) {
  struct Site {
    SiteRef site;
    uint64_t calls = 0;
    std::string why;
    std::set<std::string> dtypes;
  };
  std::map<std::tuple<std::string, uint32_t, std::string>, Site> sites;
  for (const auto& row : run.probe_ops) {
    if (row.reason != v1::PROBE_REASON_FULL_PRECISION_UNDER_AUTOCAST) continue;
    Site& s = sites[{row.site.file, row.site.line, row.site.op}];
    s.site = row.site;
    s.calls += row.calls;
    // "ns::name.overload", as the probe named it; its out= rule (op_probe.cc): overload "out" or "*_out".
    const std::string& op = row.site.op;
    const size_t dot = op.find('.');
    const std::string name = op.substr(0, dot);
    const std::string overload = dot == std::string::npos ? "" : op.substr(dot + 1);
    if (overload == "out" || overload.ends_with("_out")) {
      s.why = "an out= variant";
    } else if (name.ends_with("_")) {
      s.why = "an in-place variant";
    } else {
      s.why = "a custom op no autocast policy lists";
    }
    for (const auto& d : dtype_names(row.output_dtypes)) s.dtypes.insert(d);
  }
  // Lower-precision ops handed float64: autocast leaves float64 alone.
  for (const auto& row : run.sites) {
    if (row.policy != v1::CAST_POLICY_LOWER_PRECISION_FP || row.outcome != v1::CAST_OUTCOME_FLOAT64) continue;
    Site& s = sites[{row.site.file, row.site.line, row.site.op}];
    merge_site(s.site, row.site);
    s.calls += row.count;
    s.why = "given float64 inputs, which autocast never casts";
    s.dtypes.insert("float64");
  }
  for (const auto& [key, s] : sites) {
    Finding f = make_finding(FindingKind::kNotAutocast, {s.site});
    // What it computed in: "full precision" only when that is what it was
    // (an in-place op on a bfloat16 tensor ran uncast, but not at full precision).
    const bool full = std::all_of(s.dtypes.begin(), s.dtypes.end(),
                                  [](const std::string& d) { return d == "float32" || d == "float64"; });
    f.summary = s.site.op + (full ? " ran at full precision (" : " ran without autocast's casts (in ") +
                joined(s.dtypes) + ") under autocast: it is " + s.why + " (" + std::to_string(s.calls) +
                (s.why.starts_with("given") ? " argument decisions)" : " calls)");
    f.explanation =
        "Autocast casts only the functional forms of the ops on its lists, and only float32 inputs. In-place and "
        "out= variants, ops no policy lists (custom ops) and float64 inputs run as they are, so this op computed in "
        "whatever dtype it was handed, uncast, inside a region where the code around it is cast.";
    f.fix =
        "Use the functional form (`c = torch.mm(a, b)` rather than `out=` or `addmm_`), cast the inputs to the "
        "dtype you want, keep float64 out of the region, or list a custom op in a castscope policy overlay (and "
        "give it an autocast kernel of its own).";
    f.evidence = {{"calls", s.calls}, {"reason", s.why}, {"computed_dtypes", s.dtypes}};
    out.push_back(std::move(f));
  }
}

}  // namespace castscope::collector
