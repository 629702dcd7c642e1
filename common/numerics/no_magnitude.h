// NumericsSummary.max_abs_log2 when no value had a magnitude (all were 0,
// or none finite): the one value of that field that is not floor(log2(x))
// (proto/castscope/v1/events.proto). The agent writes it, the collector
// checks, stores, reads and exports it. Torch-free, protobuf-free.
#pragma once

#include <cstdint>

namespace castscope {

inline constexpr int16_t kNoMagnitude = -32768;

}  // namespace castscope
