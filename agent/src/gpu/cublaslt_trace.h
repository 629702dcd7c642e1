// Reads one cuBLASLt "Trace" log message (level 2, performance trace) of a
// matmul: the types of its matrices and its compute type. Observed on an H100
// with cuBLAS 13.1 (docs/gpu.md, "GEMM precision"); cuBLAS's own matmuls
// log through cuBLASLt too, as cublasLtSSSMatmul, cublasLtHSHMatmul, ...:
//
//   A=0X7F.. Adesc=[type=R_16BF rows=1024 cols=768 ld=1024] B=0X.. Bdesc=[...]
//   C=.. Cdesc=[...] D=.. Ddesc=[type=R_16BF ...]
//   computeDesc=[computeType=COMPUTE_32F scaleType=R_32F transa=OP_T ...] algo=[...]
//
// The format is the library's, not an API: anything unexpected reads as
// "not a matmul trace", never as a guess. Torch-free and CUDA-free (fuzzed).
#pragma once

#include <string_view>

#include "agent/src/record/cast_record.h"

namespace castscope {

struct MatmulTrace {
  GemmCompute compute = GemmCompute::kUnspecified;
  DType a = DType::kUnspecified, b = DType::kUnspecified, d = DType::kUnspecified;
};

// `function` is the logger's function name: cublasLtMatmul or
// cublasLt<XYZ>Matmul. False when it is not a matmul or the message lacks
// the compute type or A's type.
bool parse_matmul_trace(std::string_view function, std::string_view message, MatmulTrace& out);

// cudaDataType_t names (R_16BF, R_32F, C_32F, R_8F_E4M3, ...) and
// cublasComputeType_t names (COMPUTE_32F_FAST_TF32, ...), as logged.
DType cuda_data_type(std::string_view name);
GemmCompute cublas_compute_type(std::string_view name);

}  // namespace castscope
