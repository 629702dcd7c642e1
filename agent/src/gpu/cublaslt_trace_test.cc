#include "agent/src/gpu/cublaslt_trace.h"

#include <gtest/gtest.h>

namespace castscope {
namespace {

// Messages as cuBLAS 13.1 logged them on an H100 (tests/gpu/gemm_logger_probe.py).
constexpr const char* kBf16LinearBias =
    "A=0X7F82D6C00000 Adesc=[type=R_16BF rows=1024 cols=768 ld=1024] B=0X7F82D6A00000 Bdesc=[type=R_16BF rows=1024 "
    "cols=512 ld=1024] C=0X7F82D7520000 Cdesc=[type=R_16BF rows=768 cols=512 ld=768] D=0X7F82D7520000 "
    "Ddesc=[type=R_16BF rows=768 cols=512 ld=768] computeDesc=[computeType=COMPUTE_32F scaleType=R_32F transa=OP_T "
    "epilogue=EPILOGUE_BIAS biasPointer=0x7f82efe40000] algo=[algoId=66 tile=MATMUL_TILE_UNDEFINED]";
constexpr const char* kFp32Tf32 =
    "A=0X7F82D6C00000 Adesc=[type=R_32F rows=1024 cols=768 ld=1024] B=0X7F82D6A00000 Bdesc=[type=R_32F rows=1024 "
    "cols=512 ld=1024] C=0X7F82D7520000 Cdesc=[type=R_32F rows=768 cols=512 ld=768] D=0X7F82D7520000 "
    "Ddesc=[type=R_32F rows=768 cols=512 ld=768] computeDesc=[computeType=COMPUTE_32F_FAST_TF32 scaleType=R_32F "
    "transa=OP_T smCountTarget=132] algo=[algoId=55 tile=MATMUL_TILE_64x64 stages=MATMUL_STAGES_8x3]";

TEST(CublasLtTrace, ReadsTheMatricesAndComputeTypeOfAMatmul) {
  MatmulTrace trace;
  ASSERT_TRUE(parse_matmul_trace("cublasLtMatmul", kBf16LinearBias, trace));
  EXPECT_EQ(trace.compute, GemmCompute::k32F);
  EXPECT_EQ(trace.a, DType::kBfloat16);
  EXPECT_EQ(trace.b, DType::kBfloat16);
  EXPECT_EQ(trace.d, DType::kBfloat16);
  ASSERT_TRUE(parse_matmul_trace("cublasLtSSSMatmul", kFp32Tf32, trace));  // cuBLAS's sgemm, through cuBLASLt
  EXPECT_EQ(trace.compute, GemmCompute::k32FFastTf32);
  EXPECT_EQ(trace.a, DType::kFloat32);
  EXPECT_EQ(trace.d, DType::kFloat32);
}

TEST(CublasLtTrace, OtherFunctionsAndIncompleteMessagesAreNotMatmuls) {
  MatmulTrace trace;
  EXPECT_FALSE(parse_matmul_trace("cublasLtMatmulDescCreate", "matmulDesc=0X1 computeType=COMPUTE_32F scaleType=0", trace));
  EXPECT_FALSE(parse_matmul_trace("cublasLtMatmulAlgoGetHeuristic", kBf16LinearBias, trace));
  EXPECT_FALSE(parse_matmul_trace("cublasLtMatmul", "A=0X1 Adesc=0X7FFF661E6740 computeDesc=0X7FFF661E68A0", trace));  // the API line
  EXPECT_FALSE(parse_matmul_trace("cublasLtMatmul", "", trace));
  EXPECT_FALSE(parse_matmul_trace("cublasLtMatmul", "Adesc=[type=R_16F rows=1", trace));
  EXPECT_FALSE(parse_matmul_trace("cublasLtMatmul", "computeDesc=[computeType=COMPUTE_32F", trace));  // no A
}

TEST(CublasLtTrace, NamesTypesItDoesNotKnowAsOther) {
  EXPECT_EQ(cublas_compute_type("COMPUTE_32F_PEDANTIC"), GemmCompute::kOther);
  EXPECT_EQ(cublas_compute_type("COMPUTE_16F"), GemmCompute::k16F);
  EXPECT_EQ(cublas_compute_type("COMPUTE_32F_FAST_16BF"), GemmCompute::k32FFast16Bf);
  EXPECT_EQ(cuda_data_type("R_8F_E4M3"), DType::kFloat8E4M3Fn);
  EXPECT_EQ(cuda_data_type("R_8F_E5M2"), DType::kFloat8E5M2);
  EXPECT_EQ(cuda_data_type("R_8F_UE8M0"), DType::kFloat8);
  EXPECT_EQ(cuda_data_type("R_4F_E2M1"), DType::kOther);
  EXPECT_EQ(cuda_data_type("C_32F"), DType::kComplex64);
  EXPECT_EQ(cuda_data_type(""), DType::kUnspecified);
}

}  // namespace
}  // namespace castscope
