#include "agent/src/record/cast_counters.h"

#include <bit>
#include <cstring>

namespace castscope {
namespace {

size_t slots_for(size_t max_keys) {
  size_t slots = 16;
  while (slots * 3 < max_keys * 4) slots <<= 1;  // load factor at most 3/4
  return slots;
}

uint64_t mix(uint64_t h, uint64_t word) {
  h ^= word;
  h *= 0xff51afd7ed558ccdull;
  return h ^ (h >> 32);
}

uint64_t hash_key(const CounterKey& key) {
  uint64_t words[4] = {};
  std::memcpy(words, &key, sizeof(key));
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (uint64_t w : words) h = mix(h, w);
  return h;
}

// One more cast at `ts_ns` in its key's counter; `cast` its record's
// CastFields or its CastCount (the same members).
template <class Fields>
inline void add_cast(CountFields& entry, uint64_t ts_ns, const Fields& cast) {
  ++entry.count;
  entry.last_ts_ns = ts_ns;
  entry.sum += cast.bytes;
  entry.extra += cast.round_trip ? 1 : 0;
  if (cast.cache == CacheOutcome::kStaleHit) [[unlikely]] {
    const int64_t gap = int64_t{cast.source_version} - int64_t{cast.cached_version};
    if (gap > entry.max_version_gap) entry.max_version_gap = gap;
  }
}

// One more op in its key's counter.
inline void add_op(CountFields& entry, const Record& op) {
  ++entry.count;
  entry.last_ts_ns = op.ts_ns;
  entry.sum += op.op.cpu_duration_ns;
  entry.extra += op.op.ok ? 0 : 1;
}

bool same_key(const CounterKey& a, const CounterKey& b) { return std::memcmp(&a, &b, sizeof(CounterKey)) == 0; }

// A cast's part of a key, from a cast record or a cast counted under an op
// (the two name these fields alike).
template <typename Cast>
void set_cast_part(CounterKey& key, const Cast& cast) {
  key.arg_index = cast.arg_index;
  key.src = cast.src;
  key.dst = cast.dst;
  key.outcome = cast.outcome;
  key.role = cast.role;
  key.cache = cast.cache;
}

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
    key.mode = cast.mode;
    key.phase = cast.phase;
    key.maker = cast.maker;
    set_cast_part(key, cast);
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

CounterKey counter_key(const CounterKey& op_key, const CastCount& cast) {
  CounterKey key = op_key;
  key.kind = RecordKind::kCast;
  set_cast_part(key, cast);
  key.maker = CastMaker::kAutocast;  // an op group's casts are its autocast kernel's (and autocast_enabled, an op's only, shares the byte)
  key.probe = ProbeReason{};
  return key;
}

CounterTable::CounterTable(size_t max_keys)
    : max_keys_(max_keys == 0 ? 1 : max_keys),
      mask_(slots_for(max_keys_) - 1),
      slots_(std::make_unique<CountFields[]>(mask_ + 1)),
      groups_(std::make_unique<Group[]>(kGroups)) {}

inline uint32_t CounterTable::slot_locked(const CounterKey& key, uint64_t ts_ns, uint64_t iteration) {
  size_t i = hash_key(key) & mask_;
  while (slots_[i].count != 0 && !same_key(slots_[i].key, key)) i = (i + 1) & mask_;
  CountFields& entry = slots_[i];
  if (entry.count == 0) {
    if (used_ >= max_keys_) return kRefused;
    ++used_;
    entry = CountFields{};
    entry.key = key;
    entry.first_ts_ns = ts_ns;
    entry.iteration = iteration;
  }
  return static_cast<uint32_t>(i);
}

// Inlined into fold and fold_op: as a call, fold_op's three cost more than
// the two locks it saves (docs/performance.md, "eighth pass").
inline bool CounterTable::fold_locked(const Record& record, uint64_t iteration) {
  const uint32_t slot = slot_locked(counter_key(record), record.ts_ns, iteration);
  if (slot == kRefused) return false;
  if (record.kind == RecordKind::kCast) {
    add_cast(slots_[slot], record.ts_ns, record.cast);
  } else {
    add_op(slots_[slot], record);
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

// Whether `group` holds the key `words` (kGroupKeyWords of them) and was
// remembered in `generation`: compared two words at a time (SSE2, x86-64's
// baseline), half the instructions of a word-by-word compare.
bool CounterTable::same_group(const Group& group, const uint64_t* words, uint64_t generation) {
  using Pair = uint64_t __attribute__((vector_size(16)));
  static_assert(kGroupKeyWords % 2 == 0);
  Pair differ = {group.generation ^ generation, 0};
  for (size_t w = 0; w < kGroupKeyWords; w += 2) {
    Pair held, wanted;
    std::memcpy(&held, &group.key[w], sizeof(Pair));
    std::memcpy(&wanted, &words[w], sizeof(Pair));
    differ |= held ^ wanted;
  }
  return (differ[0] | differ[1]) == 0;
}

size_t CounterTable::fold_op_casts(const Record& op, const CastCount* casts, size_t n, uint64_t iteration) {
  // The group's key (Group::key): the op's key and the cast count, then each cast's part.
  alignas(16) uint64_t words[kGroupKeyWords] = {};
  char* const bytes = reinterpret_cast<char*>(words);
  const CounterKey op_key = counter_key(op);
  std::memcpy(bytes, &op_key, sizeof(op_key));
  const uint32_t cast_count = static_cast<uint32_t>(n);
  std::memcpy(bytes + sizeof(op_key), &cast_count, sizeof(cast_count));
  const bool grouped = n <= kGroupCasts;
  for (size_t c = 0; c < n && c < kGroupCasts; ++c) {
    std::memcpy(&words[4 + c], &casts[c], 8);
    bytes[8 * (4 + c) + offsetof(CastCount, round_trip)] = 0;  // not in the key
  }
  // Every word, used or zero, in straight-line code: shorter than loops over
  // the used ones, and the look-up's code is what an op misses in the
  // instruction cache (docs/performance.md, "tenth pass"). Folded with a
  // rotate and an xor (two instructions a word), then mixed once: a group
  // only needs a spread-out index (the words are compared in full), and
  // mixing each word cost ~25 more instructions per op.
  uint64_t folded = 0;
  for (size_t w = 0; w < kGroupKeyWords; ++w) folded = std::rotl(folded, 5) ^ words[w];
  const uint64_t h = mix(0x9e3779b97f4a7c15ull, folded);
  Group& group = groups_[h & (kGroups - 1)];

  lock();
  if (grouped && same_group(group, words, generation_)) [[likely]] {
    for (size_t c = 0; c < n; ++c) add_cast(slots_[group.slot[c]], op.ts_ns, casts[c]);
    add_op(slots_[group.slot[n]], op);
    unlock();
    return 0;
  }
  const size_t refused = fold_op_casts_key_by_key(op, op_key, casts, n, iteration, grouped ? &group : nullptr, words);
  unlock();
  return refused;
}

// Out of line and cold: the look-up above stays a few cache lines of code.
size_t CounterTable::fold_op_casts_key_by_key(const Record& op, const CounterKey& op_key, const CastCount* casts,
                                              size_t n, uint64_t iteration, Group* group, const uint64_t* words) {
  size_t refused = 0;
  uint32_t slots[kGroupCasts + 1];
  for (size_t c = 0; c < n; ++c) {
    const uint32_t slot = slot_locked(counter_key(op_key, casts[c]), op.ts_ns, iteration);
    if (slot == kRefused) {
      ++refused;
    } else {
      add_cast(slots_[slot], op.ts_ns, casts[c]);
    }
    if (c < kGroupCasts) slots[c] = slot;
  }
  const uint32_t op_slot = slot_locked(op_key, op.ts_ns, iteration);
  if (op_slot == kRefused) {
    ++refused;
  } else {
    add_op(slots_[op_slot], op);
  }
  if (group != nullptr && refused == 0) {
    std::memcpy(group->key, words, sizeof(group->key));
    group->generation = generation_;
    for (size_t c = 0; c < n; ++c) group->slot[c] = slots[c];
    group->slot[n] = op_slot;
  }
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
    ++generation_;  // the slots the groups remember are empty now
  }
  unlock();
}

void CounterTable::clear() {
  lock();
  for (size_t i = 0; i <= mask_; ++i) slots_[i].count = 0;
  used_ = 0;
  ++generation_;
  unlock();
}

}  // namespace castscope
