#include "agent/src/record/cast_counters.h"

#include <cstring>

namespace castscope {
namespace {

size_t slots_for(size_t max_keys) {
  size_t slots = 16;
  while (slots * 3 < max_keys * 4) slots <<= 1;  // load factor at most 3/4
  return slots;
}

uint64_t hash_key(const CounterKey& key) {
  uint64_t words[4] = {};
  std::memcpy(words, &key, sizeof(key));
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (uint64_t w : words) {
    h ^= w;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 32;
  }
  return h;
}

bool same_key(const CounterKey& a, const CounterKey& b) { return std::memcmp(&a, &b, sizeof(CounterKey)) == 0; }

}  // namespace

CounterKey counter_key(const Record& record) {
  CounterKey key;
  std::memset(&key, 0, sizeof(key));
  key.op_id = record.op_id;
  key.thread = record.thread;
  key.kind = record.kind;
  key.policy = record.policy;
  key.device = record.device;
  if (record.kind == RecordKind::kCast) {
    const CastFields& cast = record.cast;
    key.location = cast.location;
    key.arg_index = cast.arg_index;
    key.mode = cast.mode;
    key.phase = cast.phase;
    key.src = cast.src;
    key.dst = cast.dst;
    key.outcome = cast.outcome;
    key.role = cast.role;
    key.cache = cast.cache;
  } else {
    const OpFields& op = record.op;
    key.location = op.location;
    key.mode = op.mode;
    key.phase = op.phase;
    key.src = op.output;
    key.dst = op.autocast_dtype;
    key.autocast_enabled = op.autocast_enabled;
    key.probe = op.probe;
  }
  return key;
}

CounterTable::CounterTable(size_t max_keys)
    : max_keys_(max_keys == 0 ? 1 : max_keys),
      mask_(slots_for(max_keys_) - 1),
      slots_(std::make_unique<CountFields[]>(mask_ + 1)) {}

// Inlined into fold and fold_op: as a call, fold_op's three cost more than
// the two locks it saves (docs/performance.md, "eighth pass").
inline bool CounterTable::fold_locked(const Record& record, uint64_t iteration) {
  const CounterKey key = counter_key(record);
  const bool is_cast = record.kind == RecordKind::kCast;
  size_t i = hash_key(key) & mask_;
  while (slots_[i].count != 0 && !same_key(slots_[i].key, key)) i = (i + 1) & mask_;
  CountFields& entry = slots_[i];
  if (entry.count == 0) {
    if (used_ >= max_keys_) return false;
    ++used_;
    entry = CountFields{};
    entry.key = key;
    entry.first_ts_ns = record.ts_ns;
    entry.iteration = iteration;
  }
  ++entry.count;
  entry.last_ts_ns = record.ts_ns;
  if (is_cast) {
    entry.sum += record.cast.bytes;
    entry.extra += record.cast.round_trip ? 1 : 0;
    if (record.cast.cache == CacheOutcome::kStaleHit) {
      const int64_t gap = int64_t{record.cast.source_version} - int64_t{record.cast.cached_version};
      if (gap > entry.max_version_gap) entry.max_version_gap = gap;
    }
  } else {
    entry.sum += record.op.cpu_duration_ns;
    entry.extra += record.op.ok ? 0 : 1;
  }
  return true;
}

bool CounterTable::fold(const Record& record, uint64_t iteration) {
  lock();
  const bool counted = fold_locked(record, iteration);
  unlock();
  return counted;
}

size_t CounterTable::fold_op(const Record* before, size_t n, const Record& op, uint64_t iteration) {
  size_t refused = 0;
  lock();
  for (size_t i = 0; i < n; ++i)
    if (folds(before[i])) refused += fold_locked(before[i], iteration) ? 0 : 1;
  refused += fold_locked(op, iteration) ? 0 : 1;
  unlock();
  return refused;
}

void CounterTable::take(std::vector<CountFields>& out) {
  lock();
  if (used_ > 0) {
    for (size_t i = 0; i <= mask_; ++i) {
      if (slots_[i].count == 0) continue;
      out.push_back(slots_[i]);
      slots_[i].count = 0;
    }
    used_ = 0;
  }
  unlock();
}

void CounterTable::clear() {
  lock();
  for (size_t i = 0; i <= mask_; ++i) slots_[i].count = 0;
  used_ = 0;
  unlock();
}

}  // namespace castscope
