#include "server/src/analysis/kernel_precision.h"

#include <gtest/gtest.h>

#include <string_view>

namespace castscope::gpu {
namespace {

struct Case {
  std::string_view name;
  bool is_gemm;
  std::string_view inputs;
  std::string_view accumulate;
  bool tensor_cores;
  std::string_view confidence;
};

// Kernel names as CUPTI (or a profiler) reported them. "…" marks a name cut
// short here; the reader must not need the rest.
constexpr Case kCases[] = {
    // Seen on an H100, torch 2.11, CUDA 13 (castscope's own GPU run, docs/gpu.md).
    // CUTLASS inside cuBLAS: bf16 C, 's' accumulator (fp32), bf16 A.
    {"_ZN7cutlass7Kernel2I55cutlass_75_tensorop_bf16_s1688gemm_bf16_64x64_nt_align1EEvNT_6ParamsE", true, "bf16",
     "fp32", true, "high"},
    {"_ZN7cutlass7Kernel2I67cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_32x32_64x2_nn_align2EEvNT_6ParamsE", true,
     "bf16", "fp32", true, "high"},
    {"_ZN7cutlass7Kernel2I68cutlass_80_wmma_tensorop_bf16_s161616gemm_bf16_16x16_128x2_tn_align2EEvNT_6ParamsE", true,
     "bf16", "fp32", true, "high"},
    // cuBLAS nvjet for bf16 linear layers: type code "tst" (bf16 in, fp32 compute, bf16 out).
    {"nvjet_sm90_tst_64x8_64x16_2x4_h_bz_bias_TNT", true, "bf16", "fp32", true, "medium"},
    {"nvjet_sm90_tst_32x64_64x16_4x2_h_bz_NTN", true, "bf16", "fp32", true, "medium"},
    // Seen on an H100, torch 2.11, CUDA 13, with what cuBLASLt's logger said for the same call
    // (tests/gpu/gemm_logger_probe.py). fp32 mm, TF32 off: xmma on FFMA, SIMT.
    {"sm80_xmma_gemm_f32f32_f32f32_f32_tn_n_tilesize64x64x8_stage3_warpsize1x4x1_ffma_aligna4_alignc4_execute_kernel__"
     "5x_cublas",
     true, "fp32", "fp32", false, "medium"},
    // fp32 mm with torch.backends.cuda.matmul.allow_tf32: TF32 on tensor cores.
    {"sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize64x64x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_"
     "cublas",
     true, "tf32", "fp32", true, "medium"},
    // bf16 linear with bias under autocast (cuBLASLt: A/B/D CUDA_R_16BF, COMPUTE_32F); bf16 bmm.
    {"nvjet_sm90_tst_48x64_64x15_2x1_v_bz_bias_TNN", true, "bf16", "fp32", true, "medium"},
    {"nvjet_sm90_tst_64x32_64x16_1x2_h_bz_NNT", true, "bf16", "fp32", true, "medium"},
    // fp16 mm under autocast (cuBLASLt: HSH, COMPUTE_32F).
    {"nvjet_sm90_hsh_72x64_64x12_2x4_h_bz_TNN", true, "fp16", "fp32", true, "medium"},
    // cuDNN convolutions: bf16 under autocast; fp32 with torch.backends.cudnn.allow_tf32 (its default).
    {"sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize64x64x64_stage4_warpsize2x2x1_g1_"
     "tensor16x8x16_t1r3s3_execute_kernel__5x_cudnn",
     true, "bf16", "fp32", true, "medium"},
    {"sm80_xmma_fprop_implicit_gemm_tf32f32_tf32f32_f32_nhwckrsc_nchw_tilesize128x64x32_stage5_warpsize2x2x1_g1_"
     "tensor16x8x8_execute_kernel__5x_cudnn",
     true, "tf32", "fp32", true, "medium"},
    // Autocast's casts and other ATen kernels: "bfloat16" in a name is not a GEMM.
    {"_ZN2at6native29vectorized_elementwise_kernelILi8EZNS0_25bfloat16_copy_kernel_cudaERNS_18TensorIteratorBaseEEUlfE_"
     "St5arrayIPcLm2EEEEviT0_T1_",
     false, "", "", false, "medium"},
    {"_ZN2at6native13reduce_kernelILi512ELi1ENS0_8ReduceOpIfNS0_7MeanOpsIffffEEjfLi4ELi4EEEEEvT1_", false, "", "", false,
     "medium"},
    {"memcpy DtoD", false, "", "", false, "high"},
    {"memset", false, "", "", false, "high"},

    // Classic cuBLAS, <arch>_[<out>_]<core>[_<in>]: BLAS letter = accumulator, digits = MMA shape.
    {"ampere_sgemm_128x64_nn", true, "fp32", "fp32", false, "medium"},
    {"volta_sgemm_128x64_nn", true, "fp32", "fp32", false, "medium"},
    {"ampere_h16816gemm_256x128_ldg8_stages_32x3_nn", true, "fp16", "fp16", true, "medium"},
    {"ampere_s16816gemm_fp16_128x128_ldg8_f2f_stages_32x5_nn", true, "fp16", "fp32", true, "medium"},
    // Seen on an RTX 4090 (pytorch/pytorch#181718).
    {"ampere_bf16_s1688gemm_bf16_128x128_ldg8_f2f_stages_32x1_nn", true, "bf16", "fp32", true, "medium"},
    {"volta_fp16_s884gemm_fp16_128x128_ldg8_f2f_nn", true, "fp16", "fp32", true, "medium"},

    // xmma (cuBLAS/cuDNN): <A><B>_<MMA input><accumulator>_<epilogue>.
    {"sm80_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x32_stage4_warpsize2x2x1_tensor16x8x16_kernel", true,
     "bf16", "fp32", true, "medium"},
    // TF32: fp32 tensors silently computed in TF32 (seen in TensorRT tactic logs and H100 torch profiles).
    {"sm80_xmma_gemm_f32f32_tf32f32_f32_nn_n_tilesize32x32x64_stage3_warpsize2x1x2_tensor16x8x8", true, "tf32", "fp32",
     true, "medium"},
    {"sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize128x128x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_"
     "cublas",
     true, "tf32", "fp32", true, "medium"},
    {"sm90_xmma_gemm_…", true, "", "", true, "low"},
    // Implicit-GEMM convolution in cuDNN.
    {"sm80_xmma_fprop_implicit_gemm_bf16bf16_bf16f32_f32_nhwckrsc_nhwc_tilesize128x128x32_stage4_warpsize2x2x1_g1_"
     "tensor16x8x16_kernel",
     true, "bf16", "fp32", true, "medium"},

    // CUTLASS generator names; its example 27 tells the fp32 flavours apart.
    {"cutlass_80_tensorop_s1688tf32gemm_256x128_16x3_nn_align4", true, "tf32", "fp32", true, "high"},
    {"cutlass_80_tensorop_s1688tf32gemm_…", true, "tf32", "fp32", true, "high"},
    {"cutlass_tensorop_s1688gemm_tf32_256x128_16x3_nn_align4", true, "tf32", "fp32", true, "high"},
    {"cutlass_tensorop_s1688gemm_128x128_16x4_nn_align4", true, "fp32", "fp32", true, "high"},  // 3xTF32
    {"cutlass_80_simt_sgemm_64x64_8x5_tn_align1", true, "fp32", "fp32", false, "high"},
    {"cutlass_80_tensorop_h16816gemm_128x256_32x3_nn_align8", true, "fp16", "fp16", true, "high"},
    // CUTLASS 3.x: core, then A, B, accumulator, C, D.
    {"cutlass3x_sm90_tensorop_s64x128x16gemm_bf16_bf16_f32_void_bf16_128x128x64_1x1x1_0_tnn_align8_warpspecialized_"
     "pingpong_epi_tma",
     true, "bf16", "fp32", true, "high"},
    {"cutlass3x_sm90_tensorop_gemm_bf16_bf16_f32_bf16_bf16_128x128x64_2x1x1_0_tnt_align8_warpspecialized_cooperative_"
     "epi_tma",
     true, "bf16", "fp32", true, "high"},

    // More nvjet: fp16 "hsh"/"hss"; the same kernel under cuBLAS 12.8.5 ("_v_") and 13.1.1 ("_h_");
    // fp8 "qqtst" from torch._scaled_mm; TF32 "sss_tf32".
    {"nvjet_hsh_256x128_64x4_2x1_v_bz_coopA_NNT", true, "fp16", "fp32", true, "medium"},
    {"nvjet_hss_64x8_64x16_1x1_v_bz_splitK_NNT", true, "fp16", "fp32", true, "medium"},
    {"nvjet_sm90_hss_64x8_64x16_1x1_h_bz_splitK_NNT", true, "fp16", "fp32", true, "medium"},
    {"nvjet_qqtst_128x256_128x6_2x1_2cta_v_bz_TNT", true, "fp8", "fp32", true, "medium"},
    {"nvjet_sss_tf32_128x256_TNT", true, "tf32", "fp32", true, "medium"},

    // cuDNN: BLAS-letter names and its own templates.
    {"volta_scudnn_128x64_relu_interior_nn_v1", true, "fp32", "fp32", false, "medium"},
    {"ampere_scudnn_winograd_128x128_ldg1_ldg4_relu_tile148t_nt_v1", true, "fp32", "fp32", false, "medium"},
    {"_ZN5cudnn6detail23implicit_convolve_sgemmIffLi1024ELi5ELi5ELi3ELi3ELi3ELi1ELb1ELb0ELb1EEEviiiPKT_iPT0_S3_…", true,
     "fp32", "fp32", false, "medium"},
    {"void cudnn::detail::implicit_convolve_sgemm<float, float, 128, 5, 5, 3, 3, 3, 1, true, false, true>(…)", true,
     "fp32", "fp32", false, "medium"},
    {"void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float, 512, true, 1>(…)", false, "", "", false, "medium"},
    {"void cudnn::ops::nchwToNhwcKernel<float, float, float, false, true, (cudnnKernelDataType_t)2>(…)", false, "", "",
     false, "medium"},

    // No precision in the name: a GEMM, guessed.
    {"triton_tem_fused_mm_0", true, "", "", false, "low"},
    {"void gemv2T_kernel_val<int, int, float, float, float, float, 128, 16, 4, 4, false, false, …>(…)", true, "", "",
     false, "low"},
    {"void internal::gemvx::kernel<int, int, __nv_bfloat16, __nv_bfloat16, __nv_bfloat16, float, false, true, true, "
     "false, 7, false, …>(…)",
     true, "bf16", "", false, "low"},
    {"_ZN7cutlass13device_kernelINS_4gemm6kernel13GemmUniversalIN4cute5tupleIJiiiiEEE…", true, "", "", false, "low"},
    {"void at::native::(anonymous namespace)::conv_depthwise2d_forward_kernel<3, c10::BFloat16, float, int>(…)", true,
     "bf16", "", false, "low"},

    // Not GEMMs: a GEMM's epilogue or reduction, fused attention.
    {"triton_poi_fused_addmm_relu_0", false, "", "", false, "medium"},
    {"void cublasLt::splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float, __nv_bfloat16, false, false, "
     "false>(…)",
     false, "", "", false, "medium"},
    {"fmha_cutlassF_f32_aligned_64x64_rf_sm80", false, "", "", false, "medium"},
    {"void pytorch_flash::flash_fwd_kernel<Flash_fwd_kernel_traits<128, 128, 64, 4, false, false, cutlass::bfloat16_t, "
     "…>>(…)",
     false, "", "", false, "medium"},
};

TEST(KernelPrecisionTest, ClassifiesRealKernelNames) {
  for (const Case& expected : kCases) {
    SCOPED_TRACE(expected.name);
    const GemmPrecision got = classify_kernel(expected.name);
    SCOPED_TRACE("why: " + got.why);
    EXPECT_EQ(got.is_gemm, expected.is_gemm);
    EXPECT_EQ(got.inputs, expected.inputs);
    EXPECT_EQ(got.accumulate, expected.accumulate);
    EXPECT_EQ(got.tensor_cores, expected.tensor_cores);
    EXPECT_EQ(got.confidence, expected.confidence);
    EXPECT_FALSE(got.why.empty());
  }
}

TEST(KernelPrecisionTest, DemangledAndMangledCutlassNamesAgree) {
  const GemmPrecision mangled =
      classify_kernel("_ZN7cutlass7Kernel2I55cutlass_75_tensorop_bf16_s1688gemm_bf16_64x64_nt_align1EEvNT_6ParamsE");
  const GemmPrecision demangled = classify_kernel(
      "void cutlass::Kernel2<cutlass_75_tensorop_bf16_s1688gemm_bf16_64x64_nt_align1>"
      "(cutlass_75_tensorop_bf16_s1688gemm_bf16_64x64_nt_align1::Params)");
  EXPECT_EQ(mangled.inputs, demangled.inputs);
  EXPECT_EQ(mangled.accumulate, demangled.accumulate);
  EXPECT_EQ(mangled.why, demangled.why);
}

TEST(KernelPrecisionTest, WhyNamesTheDecidingParts) {
  EXPECT_NE(classify_kernel("cutlass_80_tensorop_s1688tf32gemm_256x128_16x3_nn_align4").why.find("'tf32'"),
            std::string::npos);
  EXPECT_NE(classify_kernel("cutlass_tensorop_s1688gemm_128x128_16x4_nn_align4").why.find("3xTF32"), std::string::npos);
  // nvjet's lone h/v word is raster order, not "half": the reader must say it did not use it.
  EXPECT_NE(classify_kernel("nvjet_sm90_tst_64x8_64x16_2x4_h_bz_bias_TNT").why.find("h/v word is not read"),
            std::string::npos);
}

TEST(KernelPrecisionTest, UnknownNvjetTypeLettersAreLowConfidence) {
  // A made-up code: letters never seen with a known dtype are not guessed.
  const GemmPrecision got = classify_kernel("nvjet_sm100_oohsh_256x256_128x4_2x1_2cta_v_bz_TNT");
  EXPECT_TRUE(got.is_gemm);
  EXPECT_EQ(got.inputs, "");
  EXPECT_EQ(got.confidence, "low");
}

}  // namespace
}  // namespace castscope::gpu
