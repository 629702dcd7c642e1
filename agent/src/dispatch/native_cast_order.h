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

  bool right_to_left() const { return order == CastOrder::kRightToLeft; }
};

// The order, read by calling native autocast's CPU mm on two activations
// that need grad, on a thread of its own, and comparing the sequence numbers
// of the two casts' autograd nodes. Once read, later calls return it; a
// probe that could not tell (`read` false) is tried again on the next call.
// Must be called while the native CPU wrapper of aten::mm is registered
// (before castscope registers its kernels). The probe's thread starts with
// none of the caller's thread-local state and leaves it as it was; the
// probe is hidden from RecordFunction observers, and the cast cache keeps
// nothing of it.
NativeCastOrder native_cast_order();

// The probe itself, read again on each call (tests).
NativeCastOrder read_native_cast_order();

}  // namespace castscope
