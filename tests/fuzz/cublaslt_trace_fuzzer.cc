// libFuzzer target for the cuBLASLt trace reader: any function name and
// message must give an answer, never a crash or sanitizer report. The first
// line of the input is the function name, the rest the message.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "agent/src/gpu/cublaslt_trace.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  const size_t newline = text.find('\n');
  castscope::MatmulTrace trace;
  (void)castscope::parse_matmul_trace(text.substr(0, newline), newline == std::string_view::npos ? "" : text.substr(newline + 1),
                                      trace);
  return 0;
}
