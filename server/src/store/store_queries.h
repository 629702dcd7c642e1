// Aggregate reads of the store that are not row reads: existence checks,
// bounds of a key range, and the GPU-time sums the analysis needs. Their SQL
// and ordinals stay here, in store/, beside the row codec (row_codec.h); a
// second dialect implements these too.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "castscope/v1/events.pb.h"
#include "server/src/status.h"
#include "server/src/store/store_schema.h"

namespace castscope::collector {

// Whether the store has `table` (a store of an older version, read as it is,
// may not: version 12 has no counter tables).
Status table_exists(sqlite3* db, const schema::Table& table, bool& out);

// The largest row id of `table` in [first, end); none when the range is empty.
Status last_row_in(sqlite3* db, const schema::Table& table, int64_t first, int64_t end, std::optional<int64_t>& out);

// GPU time of kernels in [first, end) (one agent's range), grouped by what
// launched them: the launching cast's or op's location and op ids (the cast
// or op row is the kernel's agent with launch_seq as its seq), and for ops,
// by kernel name and activity too (GEMM precision reads the names).
// `unjoined_ns` grows by the time of kernels whose launching row is not stored.
struct LaunchedKernelTime {
  int64_t location = 0, op = 0;  // of the launching cast or op
  int64_t name = 0;              // strings id; by ops only
  int activity = 0;              // castscope::v1::GpuActivity; by ops only
  uint64_t ns = 0, kernels = 0;
};
Status kernel_time_by_launcher(sqlite3* db, int64_t first, int64_t end, castscope::v1::LaunchedBy by,
                               std::vector<LaunchedKernelTime>& out, uint64_t& unjoined_ns);
// Kernels (GPU_ACTIVITY_KERNEL) launched outside castscope's ops, by name
// (location and op 0).
Status unlaunched_kernel_time_by_name(sqlite3* db, int64_t first, int64_t end, std::vector<LaunchedKernelTime>& out);
// `out` grows by the time of kernels in [first, end) launched outside castscope's casts and ops.
Status unattributed_kernel_ns(sqlite3* db, int64_t first, int64_t end, uint64_t& out);

}  // namespace castscope::collector
