// Decoding and checking of batches from untrusted peers (gRPC streams, spool
// files). A batch that passes `validate_batch` is safe for the store: every
// interned id an event uses is defined once in the batch, identities are
// short printable strings, sequence numbers fit the store's composite keys,
// tensor shapes and byte counts are ones a real tensor can have.
#pragma once

#include <google/protobuf/arena.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include "castscope/v1/transport.pb.h"
#include "server/src/batch/arena_block_pool.h"
#include "server/src/status.h"

namespace castscope::collector {

// The newest version of the schema (transport.proto: the highest value is the one spoken).
inline constexpr uint32_t kProtocolVersion = castscope::v1::ProtocolVersion_MAX;
// Event seq numbers share a 64-bit row id with the agent's row: (agent << 40) | seq.
inline constexpr int kEventSeqBits = 40;
inline constexpr uint64_t kMaxEventSeq = (uint64_t{1} << kEventSeqBits) - 1;
// Tensor sizes: dims in [0, 2^48), byte counts below 2^56, at most 8 dims
// (events.proto: longer shapes are truncated). Any element is 1 to 16 bytes.
inline constexpr int64_t kMaxShapeDim = int64_t{1} << 48;
inline constexpr uint64_t kMaxBytes = uint64_t{1} << 56;
inline constexpr int kMaxBatchShapeDims = 8;
inline constexpr uint64_t kMaxElementBytes = 16;

struct BatchLimits {
  uint32_t max_events = 1u << 18;
  uint32_t max_interned = 1u << 16;  // strings and locations, each
  uint32_t max_identity_chars = 256;
  uint32_t max_string_bytes = 1u << 16;
  uint32_t max_stack_frames = 512;
};

// The arena a batch is decoded into, sized for a message of `wire_bytes`
// (decoded messages are a few times their wire size): one allocation block
// per batch instead of one per event, the block on loan from
// ArenaBlockPool::for_batches().
class BatchArena {
 public:
  BatchArena() = default;
  explicit BatchArena(size_t wire_bytes);
  BatchArena(BatchArena&&) = default;
  // The arena first: its bookkeeping lives in its first block, which must
  // not go back to the pool (and to another batch) before it is gone.
  BatchArena& operator=(BatchArena&& other) noexcept {
    if (this != &other) {
      arena_.reset();
      first_block_ = std::move(other.first_block_);
      arena_ = std::move(other.arena_);
    }
    return *this;
  }

  google::protobuf::Arena* get() const { return arena_.get(); }
  // Memory held (the first block included), for the collector's queue budget.
  size_t bytes() const { return arena_ ? arena_->SpaceAllocated() : 0; }

 private:
  ArenaBlockPool::Block first_block_;  // declared before the arena: outlives it
  std::unique_ptr<google::protobuf::Arena> arena_;
};

// What the live stream tells of a batch: its events that have a time (agent
// stats and aggregate counters have none), the newest of those times, and
// its casts.
// Found while the batch is validated, on the receiving thread, so that the
// store's writer, the one serial thread of ingest, does not walk the events
// again to publish them.
struct BatchTimeline {
  uint64_t events = 0;
  uint64_t max_ts_ns = 0;
  uint64_t casts = 0;  // cast events, timed or not: which of a commit's batches hold its newest casts
};

// A parsed batch, the arena that owns it, and its timeline facts.
class DecodedBatch {
 public:
  DecodedBatch() = default;
  DecodedBatch(BatchArena arena, const castscope::v1::Batch* batch, BatchTimeline timeline)
      : arena_(std::move(arena)), batch_(batch), timeline_(timeline) {}

  const castscope::v1::Batch& batch() const { return *batch_; }
  const BatchTimeline& timeline() const { return timeline_; }
  // Memory held, for the collector's queue budget.
  size_t bytes() const { return arena_.bytes(); }
  explicit operator bool() const { return batch_ != nullptr; }

 private:
  BatchArena arena_;
  const castscope::v1::Batch* batch_ = nullptr;
  BatchTimeline timeline_;
};

// Parses one Batch (a spool frame's payload) and validates it.
Status decode_batch(std::string_view bytes, const BatchLimits& limits, DecodedBatch& out);

// `timeline`, when given, gets the batch's timeline facts (valid when OK).
Status validate_batch(const castscope::v1::Batch& batch, const BatchLimits& limits, BatchTimeline* timeline = nullptr);

// Maps the batch-local ids of interned strings or locations to their index in
// the batch: a dense table when ids are small, a sorted table otherwise.
class LocalIdIndex {
 public:
  static constexpr int32_t kAbsent = -1;

  // Builds the index over ids[0..n). On a repeated or zero id, returns false
  // and sets `bad_position` to the element at fault.
  bool build(const std::vector<uint32_t>& ids, size_t& bad_position);
  int32_t find(uint32_t id) const;

 private:
  std::vector<int32_t> dense_;
  std::vector<std::pair<uint32_t, int32_t>> sorted_;
  bool is_dense_ = true;
};

std::vector<uint32_t> string_ids(const castscope::v1::Batch& batch);
std::vector<uint32_t> location_ids(const castscope::v1::Batch& batch);

}  // namespace castscope::collector
