#include "agent/src/numerics/numerics_windows.h"

#include <ATen/ATen.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <limits>
#include <mutex>
#include <optional>
#include <unordered_map>
#include <vector>

#include "agent/src/context/op_context.h"
#include "agent/src/context/recording_state.h"
#include "agent/src/numerics/value_checks.h"
#include "agent/src/schedule/window_driver.h"

namespace castscope {

std::atomic<bool> g_numerics_window_open{false};

namespace {

// Per window; a job with more sites than this keeps the first ones and
// counts the rest (numerics_sites_dropped).
constexpr size_t kMaxSites = 4096;
constexpr int64_t kNoSeq = std::numeric_limits<int64_t>::max();

// What makes two checks one site. No padding: hashed and compared bytewise.
struct NumericsSiteKey {
  uint32_t op_id;
  uint32_t location;
  uint32_t thread;
  uint16_t arg_index;
  NumericsKind kind;
  DeviceKind device;
  DType src;
  DType dst;
  ExecutionMode mode;
  Phase phase;
  // The device's index: device-side sums of cuda:0 and cuda:1 cannot be one site's.
  int8_t device_index;
  uint8_t reserved[3];  // 0: no padding, keys compare bytewise
  bool operator==(const NumericsSiteKey& other) const {
    return std::memcmp(this, &other, sizeof(NumericsSiteKey)) == 0;
  }
};
static_assert(sizeof(NumericsSiteKey) == 24, "NumericsSiteKey must have no padding");

struct NumericsSiteKeyHash {
  size_t operator()(const NumericsSiteKey& key) const {
    uint64_t h = 1469598103934665603ull;
    const auto* bytes = reinterpret_cast<const unsigned char*>(&key);
    for (size_t i = 0; i < sizeof(key); ++i) h = (h ^ bytes[i]) * 1099511628211ull;
    return static_cast<size_t>(h);
  }
};

// One site's counts in the current window: read at once (CPU), or summed on
// the device and read when the window closes (CUDA).
struct SiteTotals {
  uint64_t first_ts_ns = 0, last_ts_ns = 0, iteration = 0, tensors = 0, values = 0;
  uint64_t overflowed = 0, underflowed = 0, nonfinite = 0, nan = 0, saturated = 0, first_seq = 0;
  double max_abs = 0;
  at::Tensor device_counts;     // int64 [overflowed, underflowed, nonfinite, nan, saturated]
  at::Tensor device_max_abs;    // float32 scalar
  at::Tensor device_first_seq;  // int64 scalar; kNoSeq: none yet
};
using SiteMap = std::unordered_map<NumericsSiteKey, SiteTotals, NumericsSiteKeyHash>;

WindowDriver g_windows;  // its mutex guards the state below; g_open follows its schedule
std::atomic<const NumericsConfig*> g_config{nullptr};
std::atomic<bool>& g_open = g_numerics_window_open;
uint64_t g_iteration = 0;
bool g_captured_once = false;
uint64_t g_last_capture_iteration = 0;

// CUDA graphs being captured (the Python package brackets torch.cuda.graph):
// no checks of CUDA tensors then (their kernels would join the graph), and no
// window closes (reading device sums synchronises, which a capture forbids).
std::atomic<int> g_cuda_captures{0};

std::mutex g_sites_mutex;  // g_sites
SiteMap g_sites;
std::atomic<uint64_t> g_sites_dropped{0};

RecordingState& state() { return process_recording_state(); }

void add_cpu(SiteTotals& totals, const numerics::HostCounts& counts, uint64_t seq) {
  totals.overflowed += static_cast<uint64_t>(counts.overflowed);
  totals.underflowed += static_cast<uint64_t>(counts.underflowed);
  totals.nonfinite += static_cast<uint64_t>(counts.nonfinite);
  totals.nan += static_cast<uint64_t>(counts.nan);
  totals.saturated += static_cast<uint64_t>(counts.saturated);
  if (counts.max_abs > totals.max_abs) totals.max_abs = counts.max_abs;
  if (seq != 0 && totals.first_seq == 0) totals.first_seq = seq;
}

// Device-side counts (check_cast's, or check_values' nonfinite alone) and max |x| read on the host.
numerics::HostCounts read_counts(const at::Tensor& counts, const at::Tensor& max_abs) {
  const at::Tensor host = counts.cpu();
  const int64_t* c = host.data_ptr<int64_t>();
  numerics::HostCounts out;
  out.overflowed = c[0];
  out.underflowed = c[1];
  out.nonfinite = c[2];
  out.nan = c[3];
  out.saturated = c[4];
  out.max_abs = max_abs.item<double>();
  return out;
}

// `first_candidate`: an int64 scalar on the device, the call's seq when it
// counts as non-finite, kNoSeq otherwise.
void add_device(SiteTotals& totals, const at::Tensor& counts, const at::Tensor& max_abs,
                const at::Tensor& first_candidate) {
  if (!totals.device_counts.defined()) {
    totals.device_counts = counts.clone();
    totals.device_max_abs = max_abs.clone();
    totals.device_first_seq = first_candidate.clone();
    return;
  }
  totals.device_counts.add_(counts);
  totals.device_max_abs = at::maximum(totals.device_max_abs, max_abs);
  totals.device_first_seq = at::minimum(totals.device_first_seq, first_candidate);
}

// The calling site's totals, made on first use; null when the window is full.
SiteTotals* site(const NumericsSiteKey& key, uint64_t ts_ns) {
  auto it = g_sites.find(key);
  if (it == g_sites.end()) {
    if (g_sites.size() >= kMaxSites) {
      g_sites_dropped.fetch_add(1, std::memory_order_relaxed);
      return nullptr;
    }
    it = g_sites.emplace(key, SiteTotals{}).first;
    it->second.first_ts_ns = ts_ns;
    it->second.iteration = state().steps.load(std::memory_order_relaxed);
  }
  it->second.last_ts_ns = ts_ns;
  return &it->second;
}

// The site of a check made for `r`: an autocast op's record, or an explicit
// conversion's own (kind kCast), whose line, mode and phase are its cast fields.
NumericsSiteKey key_of(const Record& r, NumericsKind kind, uint16_t arg_index, DType src, DType dst,
                const at::Tensor& on) {
  NumericsSiteKey key{};
  std::memset(&key, 0, sizeof key);
  key.device_index = static_cast<int8_t>(on.device().index());
  key.op_id = r.op_id;
  key.thread = r.thread;
  key.arg_index = arg_index;
  key.kind = kind;
  key.device = r.device;
  key.src = src;
  key.dst = dst;
  const bool conversion = r.kind == RecordKind::kCast;
  key.location = conversion ? r.cast.location : r.op.location;
  key.mode = conversion ? r.cast.mode : r.op.mode;
  key.phase = conversion ? r.cast.phase : r.op.phase;
  return key;
}

// The window's sites as records, read from the device where they were summed.
// Called by whoever closes the window, outside the windows' lock.
void flush_sites() {
  SiteMap sites;
  {
    std::lock_guard<std::mutex> lock(g_sites_mutex);
    sites.swap(g_sites);
  }
  EventLog& log = state().events;
  for (auto& [key, totals] : sites) {
    try {
      if (totals.device_counts.defined()) {
        const numerics::CheckScope scope;  // the user's dispatch modes never see castscope's reads
        const int64_t first = totals.device_first_seq.cpu().item<int64_t>();
        add_cpu(totals, read_counts(totals.device_counts, totals.device_max_abs),
                first == kNoSeq ? 0 : static_cast<uint64_t>(first));
      }
      Record r = log.new_record(RecordKind::kNumerics, key.thread, log.next_seq(), totals.first_ts_ns);
      r.op_id = key.op_id;
      r.device = key.device;
      NumericsFields& n = r.numerics;
      n.kind = key.kind;
      n.location = key.location;
      n.arg_index = key.arg_index;
      n.src = key.src;
      n.dst = key.dst;
      n.mode = key.mode;
      n.phase = key.phase;
      n.iteration = totals.iteration;
      n.last_ts_ns = totals.last_ts_ns;
      n.tensors = totals.tensors;
      n.values = totals.values;
      n.overflowed = totals.overflowed;
      n.underflowed = totals.underflowed;
      n.nonfinite = totals.nonfinite;
      n.nan = totals.nan;
      n.saturated = totals.saturated;
      n.first_nonfinite_seq = totals.first_seq;
      n.max_abs_log2 = numerics::magnitude_log2(totals.max_abs);
      log.record(r);
    } catch (...) {
      log.count_internal_error();
    }
  }
}

void open_locked() { g_open.store(true, std::memory_order_relaxed); }

// Returns whether a window was open: then the caller flushes, after unlocking.
bool close_locked() { return g_open.exchange(false, std::memory_order_relaxed); }

// Returns whether a window closed: then the caller flushes, after unlocking.
bool apply_locked(WindowSchedule::Change change) {
  if (change == WindowSchedule::Change::kOpen) open_locked();
  return change == WindowSchedule::Change::kClose && close_locked();
}

// A CUDA graph capture in progress keeps a window open: closing one reads
// device sums, which synchronises, which a capture forbids.
bool capturing_a_cuda_graph() { return g_cuda_captures.load() > 0; }

}  // namespace

void numerics_start(const NumericsConfig& config) {
  g_windows.start(
      config.schedule, config.enabled,
      [&] {
        g_config.store(new NumericsConfig(config), std::memory_order_release);  // leaked on purpose: read unlocked
        g_captured_once = false;
        g_iteration = g_last_capture_iteration = 0;
      },
      apply_locked);
}

void numerics_stop() {
  bool flush = false;
  g_windows.stop([&] { flush = close_locked(); });
  if (flush) flush_sites();
}

void numerics_on_iteration(uint64_t iteration) {
  bool flush = false;
  g_windows.step(iteration, capturing_a_cuda_graph(), [&](WindowDriver::Change change) {
    g_iteration = iteration;
    flush = apply_locked(change);
  });
  if (flush) flush_sites();
}

void numerics_on_tick() {
  bool flush = false;
  g_windows.tick(capturing_a_cuda_graph(), [&](WindowDriver::Change change) { flush = apply_locked(change); });
  if (flush) flush_sites();
}

namespace {

// One check of `values` elements into its site's totals, where `add` puts
// its counts; nothing when the window closed since the kernel looked (its
// counts went out) or the window is full.
template <typename Add>
void add_to_site(const NumericsSiteKey& key, const Record& op, uint64_t values, Add&& add) {
  std::lock_guard<std::mutex> lock(g_sites_mutex);
  if (!g_open.load(std::memory_order_relaxed)) return;
  SiteTotals* totals = site(key, op.ts_ns);
  if (totals == nullptr) return;
  ++totals->tensors;
  totals->values += values;
  add(*totals);
}

// Counts read now (the CPU).
void add_host_counts(const NumericsSiteKey& key, const Record& op, uint64_t values, const numerics::HostCounts& counts,
                     uint64_t first_seq) {
  add_to_site(key, op, values, [&](SiteTotals& totals) { add_cpu(totals, counts, first_seq); });
}

// Counts as device tensors, summed where they are (CUDA).
void add_device_counts(const NumericsSiteKey& key, const Record& op, uint64_t values, const at::Tensor& counts,
                       const at::Tensor& max_abs, const at::Tensor& nonfinite_now) {
  const at::Tensor first = at::where(nonfinite_now, at::scalar_tensor(static_cast<int64_t>(op.seq), counts.options()),
                                     at::scalar_tensor(kNoSeq, counts.options()));
  add_to_site(key, op, values, [&](SiteTotals& totals) { add_device(totals, counts, max_abs, first); });
}

// One cast's counts into `key`'s site; `op` (the cast's op, or the
// conversion's own record) gives the time and, with `first_nonfinite`, the
// seq of a first overflow (the cast a GradScaler skip is traced back to).
void check_cast_into(const NumericsSiteKey& key, const Record& op, const at::Tensor& source, const at::Tensor& result,
                     bool first_nonfinite = true) {
  const auto values = static_cast<uint64_t>(source.numel());
  // The CPU's usual case: one pass over the data, no ATen op.
  numerics::HostCounts counts;
  if (numerics::count_cast_on_host(source, result, counts)) {
    add_host_counts(key, op, values, counts, first_nonfinite && counts.overflowed > 0 ? op.seq : 0);
    return;
  }
  const numerics::CheckScope scope;
  const numerics::CastCheck check = numerics::check_cast(source, result);
  if (source.is_cuda()) {
    const at::Tensor counts_as_first =
        first_nonfinite ? check.counts[0] > 0 : at::zeros({}, check.counts.options().dtype(at::kBool));
    add_device_counts(key, op, values, check.counts, check.max_abs, counts_as_first);
    return;
  }
  counts = read_counts(check.counts, check.max_abs);  // a CPU tensor that is not contiguous, or float8
  add_host_counts(key, op, values, counts, first_nonfinite && counts.overflowed > 0 ? op.seq : 0);
}

bool checkable_cast(const at::Tensor& source, const at::Tensor& result) {
  if (!numerics::checkable(source) || !numerics::checkable(result) || source.sizes() != result.sizes()) return false;
  return !(source.is_cuda() && g_cuda_captures.load(std::memory_order_relaxed) > 0);
}

}  // namespace

void numerics_check_cast(const Record& op, uint16_t arg_index, const at::Tensor& source,
                         const at::Tensor& result) noexcept {
  try {
    if (source.scalar_type() != at::kFloat || !(result.scalar_type() == at::kHalf || result.scalar_type() == at::kBFloat16))
      return;
    if (!checkable_cast(source, result)) return;
    check_cast_into(key_of(op, NumericsKind::kCast, arg_index, to_dtype(source.scalar_type()),
                           to_dtype(result.scalar_type()), source),
                    op, source, result);
  } catch (...) {
    state().events.count_internal_error();
  }
}

void numerics_check_conversion(const Record& cast, const at::Tensor& source, const at::Tensor& result) noexcept {
  try {
    if (numerics::float8_max(result.scalar_type()) == 0 || !checkable_cast(source, result)) return;
    // Float8 overflows are fp8-saturation's, not the first non-finite value scaler-skips names.
    check_cast_into(key_of(cast, NumericsKind::kCast, cast.cast.arg_index, cast.cast.src, cast.cast.dst, source), cast,
                    source, result, /*first_nonfinite=*/false);
  } catch (...) {
    state().events.count_internal_error();
  }
}

namespace {

// inf/NaN values of one tensor read now, by the host loop when it can.
numerics::HostCounts host_values(const at::Tensor& t) {
  numerics::HostCounts counts;
  if (numerics::count_values_on_host(t, counts)) return counts;
  const numerics::CheckScope scope;
  const numerics::ValueCheck check = numerics::check_values(t);
  counts.nonfinite = check.nonfinite.item<int64_t>();
  counts.max_abs = check.max_abs.item<double>();
  return counts;
}

}  // namespace

void numerics_check_op(const Record& op, std::span<const at::Tensor> inputs,
                       std::span<const at::Tensor> outputs) noexcept {
  try {
    const at::Tensor* first_output = nullptr;
    uint64_t values = 0;
    for (const at::Tensor& t : outputs) {
      if (!numerics::checkable(t)) continue;
      if (first_output == nullptr) first_output = &t;
      values += static_cast<uint64_t>(t.numel());
    }
    if (first_output == nullptr) return;
    if (first_output->is_cuda() && g_cuda_captures.load(std::memory_order_relaxed) > 0) return;
    const NumericsSiteKey key =
        key_of(op, NumericsKind::kOpOutput, 0, to_dtype(first_output->scalar_type()), DType::kUnspecified, *first_output);
    if (first_output->is_cuda()) {
      // Everything on the device: the inputs are checked whatever the outputs hold.
      const numerics::CheckScope scope;
      at::Tensor out_nonfinite, max_abs;
      for (const at::Tensor& t : outputs) {
        if (!numerics::checkable(t) || !t.is_cuda()) continue;
        const numerics::ValueCheck check = numerics::check_values(t);
        out_nonfinite = out_nonfinite.defined() ? out_nonfinite + check.nonfinite : check.nonfinite;
        max_abs = max_abs.defined() ? at::maximum(max_abs, check.max_abs) : check.max_abs;
      }
      at::Tensor in_nonfinite = at::zeros({}, out_nonfinite.options());
      for (const at::Tensor& t : inputs)
        if (numerics::checkable(t) && t.is_cuda()) in_nonfinite = in_nonfinite + numerics::check_values(t).nonfinite;
      const at::Tensor zero = at::zeros({}, out_nonfinite.options());
      const at::Tensor produced = at::where(in_nonfinite == 0, out_nonfinite, zero);
      add_device_counts(key, op, values, at::stack({zero, zero, produced, zero, zero}), max_abs, produced > 0);
      return;
    }
    // CPU: the inputs only when an output holds inf or NaN.
    numerics::HostCounts outs;
    for (const at::Tensor& t : outputs) {
      if (!numerics::checkable(t)) continue;
      const numerics::HostCounts counts = host_values(t);
      outs.nonfinite += counts.nonfinite;
      outs.max_abs = std::max(outs.max_abs, counts.max_abs);
    }
    numerics::HostCounts produced;
    produced.max_abs = outs.max_abs;
    if (outs.nonfinite > 0) {
      int64_t in_nonfinite = 0;
      for (const at::Tensor& t : inputs)
        if (numerics::checkable(t)) in_nonfinite += host_values(t).nonfinite;
      if (in_nonfinite == 0) produced.nonfinite = outs.nonfinite;
    }
    add_host_counts(key, op, values, produced, produced.nonfinite > 0 ? op.seq : 0);
  } catch (...) {
    state().events.count_internal_error();
  }
}

void numerics_on_scaler_update(double scale, bool found_inf, uint64_t updates) noexcept {
  if (!g_record_events.load(std::memory_order_relaxed)) return;
  RecordingState& runtime = state();
  try {
    Record r = runtime.events.new_record(RecordKind::kNumerics);
    r.op_id = 0;
    r.device = DeviceKind::kUnspecified;
    NumericsFields& n = r.numerics;
    n.kind = NumericsKind::kScalerUpdate;
    n.location = current_op_context(runtime.locations).location;
    n.iteration = runtime.steps.load(std::memory_order_relaxed);
    n.last_ts_ns = r.ts_ns;
    n.tensors = updates;
    n.scale = scale;
    n.found_inf = found_inf;
    n.max_abs_log2 = kNoMagnitude;
    runtime.events.record(r);
  } catch (...) {
    runtime.events.count_internal_error();
  }
  if (!found_inf) return;
  bool flush = false;
  g_windows.with_schedule([&](WindowSchedule& schedule) {
    const NumericsConfig& config = *g_config.load(std::memory_order_relaxed);
    const auto now = WindowSchedule::Clock::now();
    if (schedule.open()) {
      // The skipped step ran inside this window: what it saw goes out now.
      if (schedule.capture_window_open() && !capturing_a_cuda_graph()) flush = apply_locked(schedule.close(now));
    } else if (config.skip_capture_steps > 0 &&
               (!g_captured_once || (config.schedule.every_steps > 0 &&
                                     g_iteration - g_last_capture_iteration >= config.schedule.every_steps))) {
      g_captured_once = true;
      g_last_capture_iteration = g_iteration;
      apply_locked(schedule.open_capture(g_iteration, config.skip_capture_steps, now));
    }
  });
  if (flush) flush_sites();
}

void numerics_after_fork_in_child() {
  g_windows.forget_in_child();
  g_open.store(false, std::memory_order_relaxed);
}

uint64_t numerics_sites_dropped() { return g_sites_dropped.load(std::memory_order_relaxed); }

void numerics_cuda_graph_capture(bool begin) {
  if (begin) {
    g_cuda_captures.fetch_add(1);
  } else if (g_cuda_captures.fetch_sub(1) <= 0) {
    g_cuda_captures.fetch_add(1);  // an end without a begin (attached mid-capture): stay at 0
  }
}

}  // namespace castscope
