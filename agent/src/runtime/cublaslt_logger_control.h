// When the agent turns the cuBLASLt logger on (docs/gpu.md, "GEMM
// precision"), and what it says when it does not. Wraps
// agent/src/gpu/cublaslt_logger.h, absent from builds without cuBLASLt headers.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "agent/src/config/agent_config.h"

namespace castscope {

// "on", "off: <why>", or "" when the configuration did not ask for it.
std::string start_cublaslt_logger(const AgentConfig& config);
void stop_cublaslt_logger();
// State and counts, for the agent's status.
nlohmann::json cublaslt_logger_status();

}  // namespace castscope
