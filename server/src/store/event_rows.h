// How each event kind's row is bound for the store writer's INSERTs: the
// event's fields at their columns (store_schema.h; ordinals from
// event_columns.h), with the interned ids (op, argument, location) the
// writer resolved for the batch. One function per kind, so a new field is
// bound in one place.
#pragma once

#include <cstdint>

#include "castscope/v1/events.pb.h"
#include "server/src/store/sqlite_store.h"
#include "server/src/store/store_schema.h"

namespace castscope::collector {

// Every column of each event table, in the order the writer's INSERTs name
// them (their own namespace: readers name their column lists alike).
namespace event_rows {
inline constexpr auto kCast = schema::all_columns<schema::kCasts>();
inline constexpr auto kOp = schema::all_columns<schema::kOps>();
inline constexpr auto kCacheSample = schema::all_columns<schema::kCacheSamples>();
inline constexpr auto kKernel = schema::all_columns<schema::kKernels>();
inline constexpr auto kCastCounts = schema::all_columns<schema::kCastCounts>();
inline constexpr auto kNumerics = schema::all_columns<schema::kNumerics>();
inline constexpr auto kOpCounts = schema::all_columns<schema::kOpCounts>();
}  // namespace event_rows

// One event of a batch on its way into its table: the row id (agent, seq)
// and the store's ids of the strings and location it names (0: none).
struct PendingRow {
  const castscope::v1::Event* event;
  int64_t id, op, arg_name, location;
  int64_t module = 0, parameter = 0;  // casts: string ids (0: none)
};

// Each binds `pending`'s row from parameter `p` on.
void bind_cast_row(Statement& s, int p, const PendingRow& pending);
void bind_op_row(Statement& s, int p, const PendingRow& pending);
void bind_cache_sample_row(Statement& s, int p, const PendingRow& pending);
void bind_kernel_row(Statement& s, int p, const PendingRow& pending);
void bind_cast_counts_row(Statement& s, int p, const PendingRow& pending);
void bind_op_counts_row(Statement& s, int p, const PendingRow& pending);
void bind_numerics_row(Statement& s, int p, const PendingRow& pending);

}  // namespace castscope::collector
