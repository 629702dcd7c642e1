// What aggregate mode (docs/aggregate.md) leaves the analyzers: counters keep
// every field a finding groups sites by, so most findings are raised as from
// events; these need what counters do not keep.
#pragma once

#include <array>
#include <string_view>

namespace castscope::collector {

struct UnavailableFinding {
  std::string_view id;
  std::string_view why;
};

inline constexpr std::array<UnavailableFinding, 3> kNotAvailableInAggregateMode = {{
    {"cast-share", "GPU kernels are joined to the cast or op event that launched them (KernelEvent.launch_seq); "
                   "counters have no such event"},
    {"tf32-matmul", "needs each op event's GEMM description (OpEvent.gemm) or the kernels joined to op events; "
                    "counters keep neither"},
    {"fp8-zero-amax", "needs each float8 conversion's scale (CastEvent.float8); counters do not keep it"},
}};

}  // namespace castscope::collector
