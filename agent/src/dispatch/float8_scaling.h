// Float8 conversions a library makes with a scale (torchao's Float8Linear:
// hp * scale converted to float8, scale = float8 max / amax): the role and
// the scale it passed, told by the Python package around the library's
// conversion function (castscope_float8_conversion, agent.h), so that the
// conversion's record carries them (events.proto Float8Scaling).
//
// Only powers of two leave the process, never values. The scale is read
// where it lies on the host (float32, contiguous): on a GPU it is not read,
// since that would wait for the device inside the job's step (docs/events.md,
// "Float8 scaling").
#pragma once

#include <c10/core/ScalarType.h>

#include <cstdint>

#include "agent/src/record/cast_record.h"

namespace castscope {

struct Float8Scope {
  Role role = Role::kUnspecified;  // of every conversion inside (the upcast before it too)
  const float* scale = nullptr;    // nullptr: not on the host
  uint64_t scale_numel = 0;
};

// An amax at or below this is zero: torchao clamps amax to its EPS, 1e-12,
// before it divides (float8_utils.amax_to_scale), so an all-zero tensor
// reads as amax 1e-12, or up to twice that where the recipe rounds scales
// down to a power of two (the rowwise recipes: 448 / 2^48 = 1.6e-12). No
// tensor worth scaling to float8 has a true amax that small.
inline constexpr double kZeroAmax = 2.5e-12;

// Fills `cast`'s float8 scaling from `scope` when `target` is a float8
// dtype and the scale is on the host; leaves it unset otherwise.
void describe_float8_scaling(const Float8Scope& scope, c10::ScalarType target, CastFields& cast);

}  // namespace castscope
