// The order in which native autocast casts an op's arguments.
//
// A native wrapper casts its arguments in one call expression,
// `F(cached_cast(args)...)`, whose evaluation order C++ leaves to the
// compiler: libtorch built by GCC (the wheels) casts right to left, one built
// by Clang left to right. What observes the casts sees the order: a
// profiler's list of aten::to calls, their autograd sequence numbers, the
// sequence numbers of their ToCopyBackward0 nodes (which order the backward
// engine's ready queue), and which of two arguments sharing one weight is the
// cast cache's miss. castscope's kernels cast in the order read here.
#pragma once

#include <string>

namespace castscope {

enum class CastOrder { kLeftToRight, kRightToLeft };

struct NativeCastOrder {
  CastOrder order = CastOrder::kLeftToRight;
  bool read = false;  // false: the probe could not tell (`order` is then left to right)
  std::string unread_because;  // when not read: why
};

// Reads the order once per process, by calling native autocast's CPU mm on
// two activations that need grad and comparing the sequence numbers of the
// two casts' autograd nodes; later calls return what the first read. Must
// first be called while the native CPU wrapper of aten::mm is registered
// (before castscope registers its kernels). The probe is hidden from
// RecordFunction observers and leaves autocast's state and the cast cache
// as they were.
NativeCastOrder native_cast_order();

// The probe itself, read again on each call (tests).
NativeCastOrder read_native_cast_order();

}  // namespace castscope
