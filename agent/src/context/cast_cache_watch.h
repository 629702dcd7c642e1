// Watches the native autocast cast cache without changing it.
//
// at::autocast::cached_cast keeps the process-global cache; castscope keeps,
// beside it, only weak references: source TensorImpl -> (the cast it saw
// returned, the source's version when that cast was made). Seeing the same
// cast returned again is a hit; a hit whose source version moved since is a
// stale hit (the forward pass uses an old copy of the weight). Weak
// references never keep a tensor's storage alive.
//
// An entry lives as long as its cast does, which is as long as the cache
// holds it (until the outermost region exits or torch.clear_autocast_cache).
// One whose source is gone while its cast lives is orphaned: memory only the
// region's exit gives back. Samples count both, so growth inside one long
// region shows whatever the sources do.
//
// Step-free sampling: observe() counts the cacheable casts it sees, hits and
// misses alike, and says a sample is due at a miss once as many have passed
// since the last sample as the cache held then (at least `every_misses`), so
// the O(held) scan of sample() costs O(1) per cacheable cast amortised. Hits
// count because a loop that leaks shows it in misses rarer than hits (one new
// input per pass against every weight served again): spaced by casts, the
// samples of such a loop come about once per pass whatever the model's size,
// where spacing by misses alone waited for the cache to double. Only a miss
// can add an entry, so none is taken while the cache only serves hits, and a
// first forward pass, all misses, still thins out geometrically.
//
// Concurrency: one mutex around the map; taken by sample() and by a
// cacheable cast the thread has not seen before. A hit the thread has seen
// (the same source, the cache returning the same cast) is answered from the
// thread's memo of the casts it saw, without the lock: a cast the cache
// returned was held by it up to then, so no miss had replaced the source's
// entry (only a miss does, and a miss means the cache no longer held the old
// cast, which it never takes back): the memo's copy of the entry is the
// entry. The counters are atomic; a hit in flight while clear() runs may
// count after it (one hit, at stop). observe() never scans.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/TensorImpl.h>
#include <c10/core/UndefinedTensorImpl.h>
#include <c10/util/intrusive_ptr.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <unordered_map>

#include "agent/src/context/cast_memo.h"
#include "agent/src/record/cast_record.h"
#include "agent/src/record/thread_block.h"

namespace castscope {

class CastCacheWatch {
 public:
  CastCacheWatch();

  struct Observation {
    CacheOutcome outcome = CacheOutcome::kNotCacheable;
    int64_t source_version = 0;
    int64_t cached_version = 0;
    bool sample_due = false;  // a miss after enough casts since the last sample: take one now
  };
  struct Sample {
    uint64_t live_casts = 0;  // casts the cache holds, orphaned ones included
    uint64_t live_bytes = 0;
    uint64_t orphaned_casts = 0;  // of those, the ones whose source is gone
    uint64_t orphaned_bytes = 0;
    uint64_t cache_hits = 0;      // since the start (or the last clear())
    uint64_t released_casts = 0;  // cached casts the cache let go of, since the start
  };

  // The condition under which at::autocast::cached_cast consults its cache,
  // whole (the kernels know the source's role already and ask the rest).
  static bool cacheable(const at::Tensor& source, c10::ScalarType target, c10::DeviceType device) {
    return source.requires_grad() && source.is_leaf() && cacheable_leaf(source, target, device);
  }
  // The same for a source already known to need grad and to be a leaf (a
  // weight's role): the kernels ask it of a weight's cast the memo does not
  // know (observe_known).
  static bool cacheable_leaf(const at::Tensor& source, c10::ScalarType target, c10::DeviceType device);

  // The fewest cacheable casts, a miss last, between step-free samples (see
  // the file comment); 0: none.
  void set_sample_every_misses(uint64_t misses);

  // A source's version as the watch compares it. An inference tensor
  // (made under torch.inference_mode, such as a module's weights built there)
  // has no version counter and raises when asked: 0, so its casts are
  // observed, and its in-place changes, which autograd cannot see either,
  // are not. Read from the tensor's own counter, which is all that
  // Tensor::_version() reads, after a call into libtorch and autograd's
  // VariableHooks (~20 instructions a weight's cast; docs/performance.md,
  // "sixteenth pass").
  static int64_t version_of(const at::Tensor& source) {
    const c10::VariableVersion& version = source.unsafeGetTensorImpl()->version_counter();
    return version.enabled() ? version.current_version() : 0;
  }

  // Whether `result` is the cast this watch last saw cached_cast return
  // for `source` on the calling thread (its memo, cast_memo.h). Lock-free,
  // and counts nothing: the tests' question (the kernels ask observe_known,
  // which counts the hit it finds).
  bool knows_cast(const at::Tensor& source, const at::Tensor& result) const;

  // observe's answer, into `out`, when the thread's memo knows `result` as
  // `source`'s cast (a hit, stale or not): no lock, never throws. False when
  // it does not: then ask cacheable_leaf, and observe a cacheable cast. The
  // kernels ask this first, at the cast, in place of knows_cast then observe
  // (one look-up of the memo, no reference to the cast kept for later).
  bool observe_known(const ThreadBlock& thread, const at::Tensor& source, const at::Tensor& result,
                     int64_t source_version, Observation& out) {
    const SeenCast* seen = seen_cast(thread, source.unsafeGetTensorImpl(), result.unsafeGetTensorImpl(),
                                     generation_.load(std::memory_order_relaxed));
    if (seen == nullptr) return false;
    // The entry as the memo copied it (the file comment says why it is unchanged).
    out.source_version = source_version;
    out.cached_version = seen->version_at_cast;
    out.outcome = out.cached_version == out.source_version ? CacheOutcome::kHit : CacheOutcome::kStaleHit;
    out.sample_due = false;
    hits_.fetch_add(1, std::memory_order_relaxed);
    casts_since_sample_.fetch_add(1, std::memory_order_relaxed);
    return true;
  }
  // After cached_cast returned `result` for a cacheable `source`, whose
  // version was `source_version` at the cast.
  Observation observe(ThreadBlock& thread, const at::Tensor& source, const at::Tensor& result, int64_t source_version);
  Observation observe(const at::Tensor& source, const at::Tensor& result, int64_t source_version) {
    return observe(this_thread_block(), source, result, source_version);
  }
  Observation observe(const at::Tensor& source, const at::Tensor& result) {
    return observe(source, result, version_of(source));
  }

  // Casts castscope has seen the cache hold; forgets those it let go of.
  Sample sample();
  void clear();

 private:
  using WeakImpl = c10::weak_intrusive_ptr<c10::TensorImpl, c10::UndefinedTensorImpl>;
  struct Entry {
    WeakImpl source;
    WeakImpl cast;
    int64_t version_at_cast;
    uint64_t cast_bytes;
  };
  // The thread's memo names this watch's entries by generation: fresh at
  // construction and at clear(), so a memo never answers for another
  // watch or for entries it forgot.
  void remember(ThreadBlock& thread, const at::Tensor& source, const at::Tensor& result, int64_t version_at_cast) const;

  std::mutex mutex_;
  std::unordered_map<const c10::TensorImpl*, Entry> entries_;
  std::atomic<uint64_t> generation_;
  uint64_t every_misses_ = 0;
  std::atomic<uint64_t> casts_since_sample_{0};  // cacheable: hits and misses
  uint64_t next_sample_after_ = 0;               // casts; 0: no step-free samples
  std::atomic<uint64_t> hits_{0};
  uint64_t released_ = 0;
};

}  // namespace castscope
