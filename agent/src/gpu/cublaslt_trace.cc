#include "agent/src/gpu/cublaslt_trace.h"

#include "common/names/named_values.h"

namespace castscope {
namespace {

// The value after `key` up to the next space, ']' or end; empty when absent.
std::string_view value_after(std::string_view text, std::string_view key) {
  const size_t at = text.find(key);
  if (at == std::string_view::npos) return {};
  const std::string_view rest = text.substr(at + key.size());
  return rest.substr(0, rest.find_first_of(" ]"));
}

// cudaDataType_t and cublasComputeType_t as the logger spells them.
constexpr NamedValue<DType> kCudaDataTypes[] = {
    {"R_16F", DType::kFloat16}, {"R_16BF", DType::kBfloat16}, {"R_32F", DType::kFloat32},
    {"R_64F", DType::kFloat64}, {"R_8I", DType::kInt8},       {"R_8U", DType::kUint8},
    {"R_16I", DType::kInt16},   {"R_32I", DType::kInt32},     {"R_64I", DType::kInt64},
    {"C_32F", DType::kComplex64}, {"C_64F", DType::kComplex128},
};
constexpr NamedValue<GemmCompute> kComputeTypes[] = {
    {"COMPUTE_16F", GemmCompute::k16F},   {"COMPUTE_32F", GemmCompute::k32F},
    {"COMPUTE_64F", GemmCompute::k64F},   {"COMPUTE_32I", GemmCompute::k32I},
    {"COMPUTE_32F_FAST_16F", GemmCompute::k32FFast16F},   {"COMPUTE_32F_FAST_16BF", GemmCompute::k32FFast16Bf},
    {"COMPUTE_32F_FAST_TF32", GemmCompute::k32FFastTf32},
};

}  // namespace

DType cuda_data_type(std::string_view name) {
  if (name == "R_8F_E4M3") return DType::kFloat8E4M3Fn;
  if (name == "R_8F_E5M2") return DType::kFloat8E5M2;
  if (name.starts_with("R_8F_")) return DType::kFloat8;  // the rest (UE8M0, ...)
  return value_named(kCudaDataTypes, name).value_or(name.empty() ? DType::kUnspecified : DType::kOther);
}

GemmCompute cublas_compute_type(std::string_view name) {
  return value_named(kComputeTypes, name).value_or(name.empty() ? GemmCompute::kUnspecified : GemmCompute::kOther);
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
