#include "server/src/analysis/kernel_precision.h"

#include <array>
#include <optional>
#include <utility>
#include <vector>

// Each reader below handles one naming family and says where its convention
// comes from. Readers are tried from the most specific (a grammar that spells
// every type) to the least (a "gemm" anywhere in the name).

namespace castscope::gpu {
namespace {

constexpr auto npos = std::string_view::npos;
using Words = std::vector<std::string_view>;

std::string lowercase(std::string_view text) {
  std::string out(text);
  for (char& c : out) {
    if (c >= 'A' && c <= 'Z') c = static_cast<char>(c - 'A' + 'a');
  }
  return out;
}

bool contains(std::string_view text, std::string_view part) { return text.find(part) != npos; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_letter(char c) { return c >= 'a' && c <= 'z'; }

bool all_digits(std::string_view word) {
  if (word.empty()) return false;
  for (char c : word) {
    if (!is_digit(c)) return false;
  }
  return true;
}

bool all_letters(std::string_view word) {
  if (word.empty()) return false;
  for (char c : word) {
    if (!is_letter(c)) return false;
  }
  return true;
}

// Where `word` begins a name part: at the start or after a non-letter (a
// mangled length such as "55cutlass_", '_', '<', ' ', ':').
size_t find_word_start(std::string_view text, std::string_view word) {
  for (size_t at = text.find(word); at != npos; at = text.find(word, at + 1)) {
    if (at == 0 || !is_letter(text[at - 1])) return at;
  }
  return npos;
}

// The '_'-separated words of the identifier that starts at `at`. In a mangled
// name the identifier runs on into the mangling ("align1eevnt_6paramse"), but
// only after the parts the readers look at.
Words words_from(std::string_view text, size_t at) {
  size_t end = at;
  while (end < text.size() && (is_letter(text[end]) || is_digit(text[end]) || text[end] == '_')) ++end;
  const std::string_view run = text.substr(at, end - at);
  Words words;
  for (size_t start = 0; start < run.size();) {
    size_t stop = run.find('_', start);
    if (stop == npos) stop = run.size();
    if (stop > start) words.push_back(run.substr(start, stop - start));
    start = stop + 1;
  }
  return words;
}

struct Spelling {
  std::string_view word;
  std::string_view precision;
};

// CUTLASS's DataTypeNames, cuBLAS's suffixes and xmma's words for each type.
constexpr std::array kTypeSpellings = {
    Spelling{"bf16", "bf16"},  Spelling{"fp16", "fp16"},   Spelling{"f16", "fp16"},  Spelling{"tf32", "tf32"},
    Spelling{"fp32", "fp32"},  Spelling{"f32", "fp32"},    Spelling{"fp64", "fp64"}, Spelling{"f64", "fp64"},
    Spelling{"e4m3", "fp8"},   Spelling{"e5m2", "fp8"},    Spelling{"fp8", "fp8"},   Spelling{"int8", "int8"},
    Spelling{"s8", "int8"},    Spelling{"u8", "int8"},     Spelling{"i8", "int8"},   Spelling{"s32", "int32"},
    Spelling{"i32", "int32"},  Spelling{"int32", "int32"},
};

std::string_view precision_of(std::string_view word) {
  for (const Spelling& spelling : kTypeSpellings) {
    if (spelling.word == word) return spelling.precision;
  }
  return {};
}

// xmma glues two types into one word ("bf16f32", "tf32f32").
std::optional<std::pair<std::string_view, std::string_view>> type_pair(std::string_view word) {
  for (const Spelling& first : kTypeSpellings) {
    if (!word.starts_with(first.word)) continue;
    const std::string_view second = precision_of(word.substr(first.word.size()));
    if (!second.empty()) return std::pair{first.precision, second};
  }
  return std::nullopt;
}

// BLAS's type letters (sgemm, dgemm, hgemm, cgemm, zgemm, igemm). As the first
// letter of a CUTLASS or cuBLAS core word they name the accumulator.
std::string_view blas_letter_precision(char letter) {
  switch (letter) {
    case 's':
    case 'c':
      return "fp32";
    case 'd':
    case 'z':
      return "fp64";
    case 'h':
      return "fp16";
    case 'i':
      return "int32";
    default:
      return {};
  }
}

bool is_convolution(std::string_view operation) {
  return operation == "fprop" || operation == "dgrad" || operation == "wgrad" || operation == "cudnn";
}

// The core word of CUTLASS and classic cuBLAS/cuDNN names: accumulator letter,
// MMA instruction shape (none: SIMT), the type fed to the MMA when it differs
// from the data, the operation. "s1688tf32gemm", "h16816gemm", "sgemm",
// "s64x128x16gemm", "s16816fprop", "scudnn"; CUTLASS 3.x may write just "gemm".
struct CoreWord {
  char accumulator_letter = 0;
  std::string_view mma_shape;
  std::string_view mma_input;
  std::string_view operation;
};

std::optional<CoreWord> parse_core_word(std::string_view word) {
  static constexpr std::array<std::string_view, 6> kOperations = {"spgemm", "gemm", "fprop", "dgrad", "wgrad", "cudnn"};
  for (const std::string_view operation : kOperations) {
    if (!word.ends_with(operation)) continue;
    CoreWord core;
    core.operation = operation;
    std::string_view head = word.substr(0, word.size() - operation.size());
    if (head.empty()) return core;
    if (blas_letter_precision(head[0]).empty()) return std::nullopt;
    core.accumulator_letter = head[0];
    head.remove_prefix(1);
    size_t shape_end = 0;
    while (shape_end < head.size() && (is_digit(head[shape_end]) || (head[shape_end] == 'x' && shape_end > 0))) {
      ++shape_end;
    }
    core.mma_shape = head.substr(0, shape_end);
    core.mma_input = head.substr(shape_end);
    if (!core.mma_input.empty() && precision_of(core.mma_input).empty()) return std::nullopt;
    return core;
  }
  return std::nullopt;
}

GemmPrecision gemm(std::string_view inputs, std::string_view accumulate, bool tensor_cores,
                   std::string_view confidence, std::string why) {
  return GemmPrecision{true, std::string(inputs), std::string(accumulate), tensor_cores, std::string(confidence),
                       std::move(why)};
}

GemmPrecision not_gemm(std::string_view confidence, std::string why) {
  return GemmPrecision{false, "", "", false, std::string(confidence), std::move(why)};
}

std::string quoted(std::string_view word) { return "'" + std::string(word) + "'"; }

// CUTLASS's generated names, as its library generator writes them (and as
// cuBLAS ships some, inside cutlass::Kernel2<...>):
//   2.x: cutlass_<cc>_<opclass>_[<C type>_]<core>_[<A type>_]<tile>..._align<n>
//        cutlass_80_tensorop_bf16_s16816gemm_relu_bf16_64x64_32x6_nn_align8
//   3.x: cutlass3x_sm<cc>_<opclass>_<core>_<A>_<B>_<acc>_<C>_<D>_<tile>...
// CUTLASS's own table (example 27): sgemm is SIMT fp32; s1688gemm on fp32 data
// is 3xTF32 emulating fp32; s1688tf32gemm is fp32 data run as TF32;
// s1688gemm_tf32 is TF32 data.
std::optional<GemmPrecision> read_cutlass_name(std::string_view lower) {
  size_t at = find_word_start(lower, "cutlass3x_");
  const bool v3 = at != npos;
  if (!v3) at = find_word_start(lower, "cutlass_");
  if (at == npos) return std::nullopt;
  const Words words = words_from(lower, at);
  size_t i = 1;
  if (i < words.size() && (all_digits(words[i]) || (words[i].starts_with("sm") && all_digits(words[i].substr(2))))) ++i;
  std::string_view opclass;
  if (i + 1 < words.size() && words[i] == "wmma" && words[i + 1] == "tensorop") {
    opclass = "wmma_tensorop";
    i += 2;
  } else if (i < words.size() && (words[i] == "simt" || words[i] == "tensorop" || words[i] == "sptensorop" ||
                                  words[i] == "bstensorop")) {
    opclass = words[i++];
  } else {
    return std::nullopt;
  }
  if (!v3 && i < words.size() && !precision_of(words[i]).empty()) ++i;  // C's type
  if (i >= words.size()) return std::nullopt;
  const std::optional<CoreWord> core = parse_core_word(words[i]);
  if (!core || core->operation == "cudnn") return std::nullopt;
  const std::string_view core_word = words[i++];
  // Types between the core and the tile: A's in 2.x (other words such as
  // "relu" skipped); A, B, accumulator, C, D in 3.x (C may be "void").
  std::vector<std::string_view> types_after;
  for (; i < words.size() && !is_digit(words[i][0]); ++i) {
    if (words[i] == "void") {
      types_after.push_back("void");
    } else if (const std::string_view precision = precision_of(words[i]); !precision.empty()) {
      types_after.push_back(precision);
    } else if (v3) {
      break;
    }
  }

  const bool tensor_cores = opclass != "simt";
  std::string why = "CUTLASS name: " + std::string(opclass) +
                    (tensor_cores ? " (tensor cores)" : " (SIMT, no tensor cores)") + "; core " + quoted(core_word);
  std::string_view accumulate;
  if (core->accumulator_letter != 0) {
    accumulate = blas_letter_precision(core->accumulator_letter);
    why += ": " + quoted(std::string(1, core->accumulator_letter)) + " = " + std::string(accumulate) + " accumulate";
    if (core->accumulator_letter == 'c' || core->accumulator_letter == 'z') why += " (complex)";
  } else if (v3 && types_after.size() >= 3) {
    accumulate = types_after[2];
    why += "; third type after the core = " + std::string(accumulate) + " accumulate";
  }
  if (is_convolution(core->operation)) why += "; implicit-GEMM convolution (" + std::string(core->operation) + ")";

  std::string inputs;
  std::string_view confidence = "high";
  if (!core->mma_input.empty()) {
    inputs = precision_of(core->mma_input);
    why += "; " + quoted(core->mma_input) + " inside the core = the MMA ran on " + inputs + " (data converted)";
  } else if (v3 && types_after.size() >= 2) {
    inputs = types_after[0] == types_after[1] ? std::string(types_after[0])
                                              : std::string(types_after[0]) + "+" + std::string(types_after[1]);
    why += "; A and B = " + inputs;
  } else if (!v3 && !types_after.empty()) {
    inputs = types_after[0];
    why += "; type after the core = " + inputs + " inputs";
  } else if (!accumulate.empty()) {
    inputs = accumulate;
    why += "; no input type, so inputs are the accumulator's type";
  } else {
    confidence = "low";
    why += "; input types not found";
  }
  if (tensor_cores && inputs == "fp32" && core->mma_input.empty()) {
    if (v3) {
      confidence = "low";
      why += "; fp32 data on tensor cores means TF32 or 3xTF32, the name does not say which";
    } else {
      why += "; fp32 on tensor cores without 'tf32' = 3xTF32 emulating fp32";
    }
  }
  return gemm(inputs, accumulate, tensor_cores, confidence, std::move(why));
}

// cuBLAS's and cuDNN's pre-Hopper names:
//   <arch>_[<out type>_]<core>[_<in type>]_<tile>...
//   ampere_sgemm_128x64_nn, ampere_h16816gemm_256x128_..., ampere_s16816gemm_fp16_...,
//   ampere_bf16_s16816gemm_bf16_..., volta_scudnn_128x64_relu_interior_nn_v1
// The same letters as CUTLASS (first letter: accumulator; digits: an MMA
// shape, so tensor cores), but read from names seen, not a published grammar.
std::optional<GemmPrecision> read_cublas_classic_name(std::string_view lower) {
  static constexpr std::array<std::string_view, 7> kArchitectures = {"maxwell", "pascal", "volta", "turing",
                                                                     "ampere",  "ada",    "hopper"};
  for (const std::string_view architecture : kArchitectures) {
    const size_t at = find_word_start(lower, std::string(architecture) + "_");
    if (at == npos) continue;
    const Words words = words_from(lower, at);
    size_t i = 1;
    if (i < words.size() && !precision_of(words[i]).empty()) ++i;  // the output's type
    if (i >= words.size()) continue;
    const std::optional<CoreWord> core = parse_core_word(words[i]);
    if (!core || core->accumulator_letter == 0) continue;
    const std::string_view core_word = words[i++];
    const std::string_view input_word = i < words.size() ? precision_of(words[i]) : std::string_view{};

    const bool tensor_cores = !core->mma_shape.empty();
    const std::string_view accumulate = blas_letter_precision(core->accumulator_letter);
    const std::string library = core->operation == "cudnn" ? "cuDNN" : "cuBLAS";
    std::string why = library + " name for " + std::string(architecture) + ", core " + quoted(core_word) + ": " +
                      quoted(std::string(1, core->accumulator_letter)) + " = " + std::string(accumulate) +
                      " accumulate (BLAS letter)";
    why += tensor_cores ? "; " + quoted(core->mma_shape) + " = tensor-core MMA shape" : "; no MMA shape = SIMT";
    if (core->operation == "cudnn") why += "; convolution";
    std::string_view confidence = "medium";
    std::string inputs;
    if (!core->mma_input.empty()) {
      inputs = precision_of(core->mma_input);
      why += "; " + quoted(core->mma_input) + " inside the core = " + inputs + " inputs";
    } else if (!input_word.empty()) {
      inputs = input_word;
      why += "; " + quoted(words[i]) + " after the core = " + inputs + " inputs";
    } else if (!tensor_cores || core->accumulator_letter != 's') {
      inputs = accumulate;
      why += "; no input type, so inputs are the accumulator's type";
    } else {
      confidence = "low";
      why += "; fp32 accumulate on tensor cores with no input type: convention not known";
    }
    return gemm(inputs, accumulate, tensor_cores, confidence, std::move(why));
  }
  return std::nullopt;
}

// NVIDIA's xmma kernels in cuBLAS and cuDNN (sm75 on):
//   sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize..._tensor16x8x16_kernel
//   sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize...
// First glued pair: A and B as stored; second: what the MMA consumed and its
// accumulator ("f32f32_tf32f32": fp32 tensors computed in TF32); then the
// epilogue's type. Read from names seen, not a published grammar.
std::optional<GemmPrecision> read_xmma_name(std::string_view lower) {
  const size_t at = find_word_start(lower, "xmma_");
  if (at == npos) return std::nullopt;
  const Words words = words_from(lower, at);
  std::optional<std::pair<std::string_view, std::string_view>> stored;
  std::optional<std::pair<std::string_view, std::string_view>> computed;
  std::string_view stored_word;
  std::string_view computed_word;
  bool convolution = false;
  bool mma_marker = false;
  std::string_view fma_word;  // "ffma": the kernel multiplies with FMA instructions (SIMT)
  for (size_t i = 1; i < words.size(); ++i) {
    const std::string_view word = words[i];
    if (word == "fprop" || word == "dgrad" || word == "wgrad") convolution = true;
    if (word.starts_with("tensor") || word.starts_with("warpgroupsize") || contains(word, "gmma")) mma_marker = true;
    if (word == "ffma" || word == "dfma" || word == "hfma2") fma_word = word;
    if (computed) continue;
    if (const auto pair = type_pair(word)) {
      if (!stored) {
        stored = pair;
        stored_word = word;
      } else {
        computed = pair;
        computed_word = word;
      }
    }
  }
  if (!computed) {
    return gemm("", "", true, "low",
                "xmma kernel (NVIDIA's tensor-core library) whose type words were not found after 'xmma'");
  }
  const std::string_view inputs = computed->first;
  const std::string_view accumulate = computed->second;
  std::string why = "xmma name: " + quoted(stored_word) + " = A, B stored as " + std::string(stored->first) + "; " +
                    quoted(computed_word) + " = MMA on " + std::string(inputs) + ", " + std::string(accumulate) +
                    " accumulate";
  if (stored->first != inputs) why += " (" + std::string(stored->first) + " data converted)";
  if (convolution) why += "; implicit-GEMM convolution";
  const bool tensor_core_type = inputs != "fp32" && inputs != "fp64";
  if (mma_marker || tensor_core_type) {
    why += mma_marker ? "; tensor/warpgroup shape = tensor cores" : "; an MMA type = tensor cores";
    return gemm(inputs, accumulate, true, "medium", std::move(why));
  }
  // Seen on an H100 for an fp32 matmul with TF32 off: "..._f32f32_f32f32_f32_..._ffma_aligna4_...".
  if (!fma_word.empty()) {
    why += "; " + quoted(fma_word) + " = FMA instructions, SIMT (no tensor cores)";
    return gemm(inputs, accumulate, false, "medium", std::move(why));
  }
  why += "; fp32/fp64 MMA type without a tensor shape: tensor cores or SIMT, not known";
  return gemm(inputs, accumulate, false, "low", std::move(why));
}

// cuBLAS's nvjet kernels (Hopper on, cuBLAS 12.x on):
//   nvjet_[sm90_]<types>_<tile>_<tile>_<cluster>_<h|v>_bz_[...]_<layouts>
// <types> has one letter per type, matched to dtypes from names seen with
// known dtypes: h fp16, t bf16, s fp32, q fp8. Three letters: inputs, compute,
// output ("tst": bf16 in, fp32 compute, bf16 out; "hss": fp16 in, fp32 out);
// five spell A and B apart ("qqtst": fp8 A and B, bf16 C, fp32 compute, bf16
// D). "sss_tf32" is fp32 data run as TF32. The lone h/v word is not a
// precision: one kernel reads "_v_" under cuBLAS 12.8 and "_h_" under 13.1.
std::string_view nvjet_letter_precision(char letter) {
  switch (letter) {
    case 'h':
      return "fp16";
    case 't':
      return "bf16";
    case 's':
      return "fp32";
    case 'q':
      return "fp8";
    default:
      return {};
  }
}

std::optional<GemmPrecision> read_nvjet_name(std::string_view lower) {
  const size_t at = find_word_start(lower, "nvjet_");
  if (at == npos) return std::nullopt;
  const Words words = words_from(lower, at);
  size_t i = 1;
  if (i < words.size() && words[i].starts_with("sm") && all_digits(words[i].substr(2))) ++i;
  const std::string_view code = i < words.size() ? words[i] : std::string_view{};
  const bool tf32 = i + 1 < words.size() && words[i + 1] == "tf32";
  const std::string why_code = "cuBLAS nvjet (tensor-core GEMM family), type code " + quoted(code);
  bool known_letters = all_letters(code);
  for (char letter : code) known_letters = known_letters && !nvjet_letter_precision(letter).empty();
  if (!known_letters || (code.size() != 3 && code.size() != 5)) {
    return gemm("", "", true, "low", why_code + ": letters or length not seen with a known dtype");
  }
  const size_t compute_at = code.size() == 3 ? 1 : 3;
  std::string inputs(nvjet_letter_precision(code[0]));
  if (code.size() == 5 && code[1] != code[0]) inputs += "+" + std::string(nvjet_letter_precision(code[1]));
  const std::string_view accumulate = nvjet_letter_precision(code[compute_at]);
  std::string why = why_code + ": " + quoted(code.substr(0, code.size() == 3 ? 1 : 2)) + " = " + inputs +
                    " inputs, " + quoted(code.substr(compute_at, 1)) + " = " + std::string(accumulate) +
                    " compute; the h/v word is not read as a precision";
  if (tf32) {
    why += "; '_tf32' = fp32 data run as TF32";
    return gemm("tf32", accumulate, true, "medium", std::move(why));
  }
  if (inputs == "fp32") {
    why += "; fp32 inputs without '_tf32': tensor cores or not, not known";
    return gemm(inputs, accumulate, false, "low", std::move(why));
  }
  return gemm(inputs, accumulate, true, "medium", std::move(why));
}

// A type named in template arguments (mangled or not): a hint only, since a
// kernel's template may name several types for different roles.
std::pair<std::string_view, std::string_view> template_type_hint(std::string_view lower) {
  struct Hint {
    std::string_view marker;
    std::string_view precision;
  };
  static constexpr std::array<Hint, 9> kHints = {
      Hint{"bfloat16", "bf16"}, Hint{"bf16", "bf16"},  Hint{"half", "fp16"},
      Hint{"fp16", "fp16"},     Hint{"tfloat32", "tf32"}, Hint{"e4m3", "fp8"},
      Hint{"e5m2", "fp8"},      Hint{"fp8", "fp8"},    Hint{"int8", "int8"},
  };
  std::string_view found;
  std::string_view marker;
  for (const Hint& hint : kHints) {
    if (!contains(lower, hint.marker)) continue;
    if (!found.empty() && found != hint.precision) return {};  // several types: no guess
    found = hint.precision;
    if (marker.empty()) marker = hint.marker;
  }
  return {found, marker};
}

std::string with_type_hint(std::string_view lower, std::string why, std::string& inputs) {
  const auto [precision, marker] = template_type_hint(lower);
  if (precision.empty()) return why + "; precision not in the name";
  inputs = precision;
  return why + "; inputs guessed from " + quoted(marker) + " in the template arguments";
}

bool has_tensor_core_marker(std::string_view lower) {
  static constexpr std::array<std::string_view, 11> kMarkers = {
      "tensorop", "wmma", "hmma", "imma", "xmma", "gmma", "umma", "tcgen05", "mma_atom", "sm80_16x8", "sm90_64x"};
  for (const std::string_view marker : kMarkers) {
    if (contains(lower, marker)) return true;
  }
  return false;
}

// cuDNN's own kernels: cudnn::detail::implicit_convolve_sgemm<float, float, ...>
// (the BLAS letter says fp32, no MMA shape says SIMT), wgrad/dgrad engines,
// winograd and FFT transforms (only hints).
std::optional<GemmPrecision> read_cudnn_name(std::string_view lower) {
  if (!contains(lower, "cudnn")) return std::nullopt;
  if (contains(lower, "convolve_sgemm")) {
    return gemm("fp32", "fp32", false, "medium",
                "cuDNN 'convolve_sgemm': 's' = fp32 (BLAS letter), no MMA shape = SIMT; convolution");
  }
  static constexpr std::array<std::string_view, 9> kConvolutionWords = {
      "convolve", "convolution", "conv2d", "conv3d", "dgrad", "wgrad", "fprop", "winograd", "fft"};
  for (const std::string_view word : kConvolutionWords) {
    if (!contains(lower, word)) continue;
    std::string inputs;
    std::string why = with_type_hint(lower, "cuDNN convolution kernel (" + quoted(word) + ")", inputs);
    return gemm(inputs, "", has_tensor_core_marker(lower), "low", std::move(why));
  }
  return std::nullopt;
}

// Inductor's template kernels (triton_tem_fused_mm_0, triton_tem_fused_addmm_1):
// a GEMM, but Triton names carry no precision. Pointwise kernels named after
// an addmm (triton_poi_fused_addmm_relu_0) are its epilogue, not the GEMM.
std::optional<GemmPrecision> read_triton_template_name(std::string_view lower) {
  const size_t at = find_word_start(lower, "triton_tem_");
  if (at == npos) return std::nullopt;
  for (const std::string_view word : words_from(lower, at)) {
    if (word == "mm" || word == "bmm" || word == "addmm" || word == "baddbmm" || word == "convolution") {
      return gemm("", "", false, "low",
                  "Inductor Triton template " + quoted(word) + ": a GEMM, the name carries no precision");
    }
  }
  return std::nullopt;
}

// Anything else that says gemm, gemv or matmul (cuBLAS's gemv2T_kernel_val,
// gemmSN_TN_kernel, CUTLASS's GemmUniversal templates), or ATen's direct
// depthwise convolution.
std::optional<GemmPrecision> read_generic_name(std::string_view lower) {
  std::string_view marker;
  size_t gemm_at = lower.find("gemm");
  while (gemm_at != npos && gemm_at + 4 < lower.size() && lower[gemm_at + 4] == 'a') {  // "gemma" is a model
    gemm_at = lower.find("gemm", gemm_at + 1);
  }
  if (gemm_at != npos) {
    marker = "gemm";
  } else if (contains(lower, "gemv")) {
    marker = "gemv";
  } else if (contains(lower, "matmul")) {
    marker = "matmul";
  } else if (contains(lower, "conv_depthwise")) {
    marker = "conv_depthwise";
  } else {
    return std::nullopt;
  }
  const bool tensor_cores = has_tensor_core_marker(lower);
  std::string why = quoted(marker) + " in a name of no known convention";
  if (marker == "gemv") why += " (matrix-vector)";
  if (marker == "conv_depthwise") why += " (ATen's direct depthwise convolution)";
  why += tensor_cores ? "; a tensor-core marker is present" : "; no tensor-core marker";
  std::string inputs;
  why = with_type_hint(lower, std::move(why), inputs);
  return gemm(inputs, "", tensor_cores, "low", std::move(why));
}

}  // namespace

GemmPrecision classify_kernel(std::string_view name) {
  const std::string lower = lowercase(name);
  if (lower.starts_with("memcpy") || lower.starts_with("memset")) {
    return not_gemm("high", "a memory copy or set, not a kernel");
  }
  // Fused attention runs matmuls inside, but its time is not GEMM time.
  static constexpr std::array<std::string_view, 5> kAttentionWords = {"fmha", "sdpa", "attention", "attn", "flash_"};
  for (const std::string_view word : kAttentionWords) {
    if (contains(lower, word)) return not_gemm("medium", "fused attention kernel (" + quoted(word) + "), not a GEMM");
  }
  if (contains(lower, "splitkreduce")) {
    return not_gemm("medium", "split-K reduction after a GEMM; the GEMM kernel carries the precision");
  }
  using Reader = std::optional<GemmPrecision> (*)(std::string_view);
  static constexpr std::array<Reader, 7> kReaders = {read_cutlass_name,         read_xmma_name,  read_nvjet_name,
                                                     read_cublas_classic_name,  read_cudnn_name, read_triton_template_name,
                                                     read_generic_name};
  for (const Reader read : kReaders) {
    if (std::optional<GemmPrecision> result = read(lower)) return *std::move(result);
  }
  return not_gemm("medium", "no GEMM or convolution marker in the name");
}

}  // namespace castscope::gpu
