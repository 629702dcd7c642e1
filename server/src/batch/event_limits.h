// The ranges validate_batch holds event fields to: the store packs fields
// into shared integer columns within exactly these (store/event_columns.h).
#pragma once

#include <cstdint>

namespace castscope::collector {

// casts.slot: thread, arg_index and list_index + 1 side by side.
inline constexpr uint32_t kSlotThreadLimit = 1u << 24;
inline constexpr uint32_t kSlotArgIndexLimit = 1u << 16;
inline constexpr int32_t kSlotListIndexLimit = (1 << 23) - 1;  // list_index < this

// Enum fields: kCodeBits each, so every value below kCodeLimit.
inline constexpr int kCodeBits = 6;
inline constexpr int kCodeLimit = 1 << kCodeBits;

// ops.gemm: one byte per GemmDescription field.
inline constexpr int kGemmFieldLimit = 1 << 8;

}  // namespace castscope::collector
