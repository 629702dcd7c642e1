#include "agent/src/runtime/cublaslt_logger_control.h"

#include <atomic>

#include "common/log/log.h"
#if CASTSCOPE_HAVE_CUBLASLT
#include "agent/src/gpu/cublaslt_logger.h"
#endif

namespace castscope {
namespace {
std::atomic<bool> g_asked{false};  // by the current attach's configuration
}  // namespace

std::string start_cublaslt_logger(const AgentConfig& config) {
  g_asked.store(config.gpu.cublaslt_logger);
  if (!config.gpu.cublaslt_logger) return "";
#if CASTSCOPE_HAVE_CUBLASLT
  const std::string state =
      cublaslt_logger_start(cublaslt_candidates(config.gpu.cublaslt_library, config.internal_path_prefix));
  if (state == "on") {
    log::info("cuBLASLt logger on: autocast ops get the compute type of their matmuls");
  } else {
    log::warn("cuBLASLt logger " + state);
  }
  return state;
#else
  return "off: this castscope was built without cuBLASLt headers";
#endif
}

void stop_cublaslt_logger() {
#if CASTSCOPE_HAVE_CUBLASLT
  cublaslt_logger_stop();
#endif
}

nlohmann::json cublaslt_logger_status() {
  if (!g_asked.load()) return {{"state", ""}};
#if CASTSCOPE_HAVE_CUBLASLT
  const CublasLtLoggerStats stats = cublaslt_logger_stats();
  return {{"state", cublaslt_logger_state()},
          {"matmuls_in_ops", stats.matmuls_in_ops},
          {"matmuls_outside_ops", stats.matmuls_outside_ops},
          {"tf32_outside_ops", stats.tf32_outside_ops},
          {"unread", stats.unread}};
#else
  return {{"state", "off: this castscope was built without cuBLASLt headers"}};
#endif
}

}  // namespace castscope
