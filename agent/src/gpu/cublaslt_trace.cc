#include "agent/src/gpu/cublaslt_trace.h"

namespace castscope {
namespace {

// The value after `key` up to the next space, ']' or end; empty when absent.
std::string_view value_after(std::string_view text, std::string_view key) {
  const size_t at = text.find(key);
  if (at == std::string_view::npos) return {};
  const std::string_view rest = text.substr(at + key.size());
  return rest.substr(0, rest.find_first_of(" ]"));
}

}  // namespace

DType cuda_data_type(std::string_view name) {
  if (name == "R_16F") return DType::kFloat16;
  if (name == "R_16BF") return DType::kBfloat16;
  if (name == "R_32F") return DType::kFloat32;
  if (name == "R_64F") return DType::kFloat64;
  if (name == "R_8I") return DType::kInt8;
  if (name == "R_8U") return DType::kUint8;
  if (name == "R_16I") return DType::kInt16;
  if (name == "R_32I") return DType::kInt32;
  if (name == "R_64I") return DType::kInt64;
  if (name == "C_32F") return DType::kComplex64;
  if (name == "C_64F") return DType::kComplex128;
  if (name.starts_with("R_8F_")) return DType::kFloat8;
  return name.empty() ? DType::kUnspecified : DType::kOther;
}

GemmCompute cublas_compute_type(std::string_view name) {
  if (name == "COMPUTE_16F") return GemmCompute::k16F;
  if (name == "COMPUTE_32F") return GemmCompute::k32F;
  if (name == "COMPUTE_32F_FAST_16F") return GemmCompute::k32FFast16F;
  if (name == "COMPUTE_32F_FAST_16BF") return GemmCompute::k32FFast16Bf;
  if (name == "COMPUTE_32F_FAST_TF32") return GemmCompute::k32FFastTf32;
  if (name == "COMPUTE_64F") return GemmCompute::k64F;
  if (name == "COMPUTE_32I") return GemmCompute::k32I;
  return name.empty() ? GemmCompute::kUnspecified : GemmCompute::kOther;
}

bool parse_matmul_trace(std::string_view function, std::string_view message, MatmulTrace& out) {
  if (!function.starts_with("cublasLt") || !function.ends_with("Matmul")) return false;
  const size_t compute_desc = message.find("computeDesc=[");
  if (compute_desc == std::string_view::npos) return false;
  out.compute = cublas_compute_type(value_after(message.substr(compute_desc), "computeType="));
  out.a = cuda_data_type(value_after(message, "Adesc=[type="));
  out.b = cuda_data_type(value_after(message, "Bdesc=[type="));
  out.d = cuda_data_type(value_after(message, "Ddesc=[type="));
  return out.compute != GemmCompute::kUnspecified && out.a != DType::kUnspecified;
}

}  // namespace castscope
