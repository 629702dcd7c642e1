// Tells from a CUDA kernel's name (as CUPTI reports it: usually mangled C++,
// sometimes demangled or a plain C name) whether it is a GEMM or convolution
// and in which precision it really ran. Autocast decides what dtype an op
// *asks* for; the kernel name is the only cheap witness of what the library
// then did (an fp32 matmul silently computed in TF32, a bf16 GEMM that
// accumulates in fp32).
//
// Names are vendor conventions, not an API: each is read by substring, and the
// answer says how sure it is and which name parts decided. No torch, no CUDA,
// no demangler: the parts that matter survive mangling.
#pragma once

#include <string>
#include <string_view>

namespace castscope::gpu {

struct GemmPrecision {
  // A GEMM, GEMV or convolution kernel (implicit-GEMM or direct).
  bool is_gemm = false;
  // What the multiplier consumed: "bf16", "fp16", "tf32", "fp32", "fp8", "int8",
  // "fp64"; "a/b" when the name cannot tell a from b; "" when unknown.
  std::string inputs;
  // The accumulator: "fp32", "fp16", "fp64", "int32"; "" when unknown.
  std::string accumulate;
  // Tensor-core MMA (tensorop, wmma, hmma, xmma, nvjet, gmma, ...) rather than
  // SIMT FMA. False also when the name does not say (see confidence).
  bool tensor_cores = false;
  // "high": the name spells it (CUTLASS's generated names); "medium": a
  // cuBLAS/cuDNN/nvjet convention read from observed names; "low": guessed.
  std::string confidence;
  // The name parts that decided, and what stayed unknown.
  std::string why;
};

GemmPrecision classify_kernel(std::string_view name);

}  // namespace castscope::gpu
