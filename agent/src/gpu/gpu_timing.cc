#include "agent/src/gpu/gpu_timing.h"

#include <atomic>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "agent/src/gpu/cupti_library.h"
#include "agent/src/gpu/launch_scope.h"

// Locks, in the order they may be taken: control_mutex_ (start, stop,
// yield, resume, windows) -> mutex_ (what the completion callback touches)
// and buffers_mutex_ (castscope's own buffers). mutex_ is never held across
// a CUPTI call that may call back (flush, enable, register): CUPTI's own
// locks would then be taken inside ours on one thread and the other way
// round on CUPTI's thread.
namespace castscope {
namespace {

// Launch ids remembered for kernels still to come; a CUDA graph launch maps
// one correlation id to many kernels, so entries age out instead of being
// taken by the first kernel.
constexpr size_t kMaxRememberedLaunches = size_t{1} << 20;

constexpr CUpti_ActivityKind kActivityKinds[] = {
    // Correlation first: the launches of kernels enabled next must be tagged.
    CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION,
    CUPTI_ACTIVITY_KIND_RUNTIME,  // the API records correlation needs
    CUPTI_ACTIVITY_KIND_DRIVER,   // cuLaunchKernel: Triton's launches
    CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL,
    CUPTI_ACTIVITY_KIND_MEMCPY,
    CUPTI_ACTIVITY_KIND_MEMSET,
};

const char* memcpy_name(uint8_t kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD: return "memcpy HtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH: return "memcpy DtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOD: return "memcpy DtoD";
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return "memcpy HtoH";
    case CUPTI_ACTIVITY_MEMCPY_KIND_PTOP: return "memcpy PtoP";
    default: return "memcpy";
  }
}

struct HeldKernel {
  Record record;
  bool waited = false;  // already held back once
};

class Collector {
 public:
  static Collector& instance() {
    static auto* collector = new Collector();  // leaked: CUPTI may call back during exit
    return *collector;
  }

  std::string start(const GpuTimingConfig& config, const std::vector<std::string>& candidates, EventLog& log) {
    std::lock_guard<std::mutex> control(control_mutex_);
    if (started_) return state();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (log_ != &log) names_.clear();  // name ids belong to their event log
      config_ = config;
      log_ = &log;
      stats_ = GpuTimingStats{};  // a new agent's counts
      buffers_refused_ = 0;
      foreign_buffers_ = 0;
    }
    const std::string state = open(candidates);  // without mutex_: CUPTI may call back
    set_state(state);
    if (state == "on") {
      started_ = true;
      window_open_ = true;
      yielded_ = false;
      collecting_ = true;
      gpu_detail::g_push_launch_id = [](uint64_t id) noexcept { instance().push(id); };
      gpu_detail::g_pop_launch_id = []() noexcept { instance().pop(); };
      gpu_detail::g_correlate_all_ops.store(config.correlate_all_ops, std::memory_order_relaxed);
      gpu_detail::g_correlating.store(true, std::memory_order_release);
    }
    return state;
  }

  void flush(bool forced) {
    // While yielded the buffers in CUPTI are the other client's to flush.
    if (!started_ || yielded_) return;
    // Completion callbacks run inside (on this thread) or on CUPTI's own
    // thread; either way they take mutex_, so it is not held here. Buffers
    // of a closed window still come out here.
    cupti_.activity_flush_all(forced ? CUPTI_ACTIVITY_FLAG_FLUSH_FORCED : 0);
  }

  void stop() {
    std::lock_guard<std::mutex> control(control_mutex_);
    if (!started_) return;
    if (collecting_) step_aside();
    // Castscope's buffers went out when it yielded; a forced flush now would
    // cut the other client's trace short.
    if (!yielded_) cupti_.activity_flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      release_held(true);
    }
    started_ = false;
    yielded_ = false;  // nothing to take back after a stop
    set_state("off: stopped");
  }

  bool yield() {
    std::lock_guard<std::mutex> control(control_mutex_);
    if (!started_ || yielded_) return false;
    yielded_ = true;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      ++stats_.yields;
    }
    apply();
    // Everything castscope's kinds collected, and all of its buffers (also
    // those of a closed window), come back before the other client's
    // callbacks replace castscope's.
    cupti_.activity_flush_all(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      release_held(true);
    }
    return true;
  }

  void resume() {
    std::lock_guard<std::mutex> control(control_mutex_);
    if (!yielded_) return;
    yielded_ = false;
    apply();
  }

  void window(bool open) {
    std::lock_guard<std::mutex> control(control_mutex_);
    if (!started_ || window_open_ == open) return;
    window_open_ = open;
    apply();
  }

  void push(uint64_t id) noexcept {
    cupti_.activity_push_external_correlation_id(static_cast<CUpti_ExternalCorrelationKind>(config_.correlation_kind), id);
  }
  void pop() noexcept {
    uint64_t last = 0;
    cupti_.activity_pop_external_correlation_id(static_cast<CUpti_ExternalCorrelationKind>(config_.correlation_kind), &last);
  }

  std::string state() {
    std::lock_guard<std::mutex> lock(mutex_);
    return state_;
  }
  int64_t clock_offset() const { return clock_offset_ns_.load(std::memory_order_relaxed); }
  GpuTimingStats stats() {
    std::lock_guard<std::mutex> lock(mutex_);
    GpuTimingStats out = stats_;
    out.buffers_refused = buffers_refused_.load();
    out.foreign_buffers = foreign_buffers_.load();
    return out;
  }

  // CUPTI's buffer callbacks.
  // Called from CUPTI's C code: nothing may throw through it.
  void request_buffer(uint8_t** buffer, size_t* size, size_t* max_records) noexcept {
    *max_records = 0;  // as many as fit
    *buffer = nullptr;
    *size = 0;
    const size_t bytes = (config_.buffer_bytes + 7) & ~size_t{7};  // aligned_alloc: a multiple of the alignment
    if (buffer_bytes_.fetch_add(bytes) + bytes > config_.buffer_budget_bytes) {
      // No buffer: CUPTI drops records and counts them (GetNumDroppedRecords).
      buffer_bytes_.fetch_sub(bytes);
      buffers_refused_.fetch_add(1, std::memory_order_relaxed);
      return;
    }
    auto* allocated = static_cast<uint8_t*>(std::aligned_alloc(8, bytes));  // CUPTI needs 8-byte alignment
    try {
      if (allocated != nullptr) {
        std::lock_guard<std::mutex> lock(buffers_mutex_);
        own_buffers_.insert(allocated);
      }
    } catch (...) {
      std::free(allocated);
      allocated = nullptr;
    }
    if (allocated == nullptr) {
      buffer_bytes_.fetch_sub(bytes);
      return;
    }
    *buffer = allocated;
    *size = bytes;
  }

  // Called from CUPTI's C code: nothing may throw through it. CUPTI hands a
  // buffer to whichever client's callbacks are registered now: one castscope
  // did not allocate (torch.profiler's, around a hand-over) is left alone.
  void complete_buffer(CUcontext context, uint32_t stream, uint8_t* buffer, size_t size, size_t valid) noexcept {
    {
      std::lock_guard<std::mutex> lock(buffers_mutex_);
      if (own_buffers_.erase(buffer) == 0) {
        foreign_buffers_.fetch_add(1, std::memory_order_relaxed);
        return;
      }
    }
    try {
      std::lock_guard<std::mutex> lock(mutex_);
      if (log_ != nullptr) {
        measure_clock_offset();
        read_records(buffer, valid);
        release_held(false);
        size_t dropped = 0;
        if (cupti_.activity_get_num_dropped_records(context, stream, &dropped) == CUPTI_SUCCESS && dropped > 0)
          log_->count_gpu_dropped(dropped);
      }
    } catch (...) {
      if (log_ != nullptr) log_->count_internal_error();
    }
    std::free(buffer);
    buffer_bytes_.fetch_sub(size);
  }

 private:
  // Called with control_mutex_ held: collects exactly when started, inside
  // a timing window and not yielded to another client.
  void apply() {
    const bool want = started_ && window_open_ && !yielded_;
    if (want && !collecting_) {
      // The other client may have registered its own callbacks: take them back.
      const std::string state = enable();  // without mutex_: CUPTI may call back
      if (state == "on") {
        collecting_ = true;
        gpu_detail::g_correlating.store(true, std::memory_order_release);
      } else {
        started_ = false;
      }
      set_state(state);
    } else if (!want && collecting_) {
      step_aside();  // on a yield, yield() then brings castscope's buffers back
    }
    if (started_) set_state(yielded_ ? "paused: another CUPTI client (torch.profiler) is collecting" : "on");
  }

  // Stops pushing ids and disables castscope's activity kinds; what CUPTI
  // already holds comes out at the next flush.
  void step_aside() {
    gpu_detail::g_correlating.store(false, std::memory_order_release);
    for (auto it = std::rbegin(kActivityKinds); it != std::rend(kActivityKinds); ++it) cupti_.activity_disable(*it);
    collecting_ = false;
  }

  void set_state(const std::string& state) {
    std::lock_guard<std::mutex> lock(mutex_);
    state_ = state;
  }

  // control_mutex_ held, mutex_ not. Returns "on" or "off: why".
  std::string open(const std::vector<std::string>& candidates) {
    // One CUPTI per process: loaded once, unless a different one is named.
    if (!cupti_.loaded() || (!config_.cupti_library.empty() && config_.cupti_library != cupti_.path)) {
      std::string error;
      const std::vector<std::string> paths = config_.cupti_library.empty() ? candidates
                                                                           : std::vector{config_.cupti_library};
      if (!load_cupti(paths, cupti_, error)) return "off: " + error;
    }
    if (std::string held = held_by_another_tool(); !held.empty()) return "off: " + held;
    return enable();
  }

  // Buffer callbacks and activity kinds; control_mutex_ held, mutex_ not.
  std::string enable() {
    measure_clock_offset();
    CUptiResult result = cupti_.activity_register_callbacks(
        [](uint8_t** buffer, size_t* size, size_t* max_records) { instance().request_buffer(buffer, size, max_records); },
        [](CUcontext context, uint32_t stream, uint8_t* buffer, size_t size, size_t valid) {
          instance().complete_buffer(context, stream, buffer, size, valid);
        });
    if (result != CUPTI_SUCCESS) return "off: CUPTI refused the activity buffers: " + cupti_.describe(result);
    for (size_t i = 0; i < std::size(kActivityKinds); ++i) {
      result = cupti_.activity_enable(kActivityKinds[i]);
      if (result != CUPTI_SUCCESS) {
        const int failed = static_cast<int>(kActivityKinds[i]);
        while (i-- > 0) cupti_.activity_disable(kActivityKinds[i]);
        return "off: CUPTI could not enable activity kind " + std::to_string(failed) + ": " + cupti_.describe(result);
      }
    }
    return "on";
  }

  // CUPTI takes one callback subscriber per process. castscope needs none,
  // so it never holds one (a profiler started later must get it); it only
  // asks, to learn whether a tool such as Nsight Systems holds CUPTI now.
  std::string held_by_another_tool() {
    CUpti_SubscriberHandle handle = nullptr;
    auto ignore = [](void*, CUpti_CallbackDomain, CUpti_CallbackId, const void*) {};
    char holder[256] = {};
    CUptiResult result;
    if (cupti_.subscribe_v2 != nullptr) {
      CUpti_SubscriberParams params{};
      params.structSize = CUpti_SubscriberParams_STRUCT_SIZE;
      params.subscriberName = "castscope";
      params.oldSubscriberName = holder;
      params.oldSubscriberSize = sizeof(holder);
      result = cupti_.subscribe_v2(&handle, ignore, nullptr, &params);
    } else {
      result = cupti_.subscribe(&handle, ignore, nullptr);
    }
    if (result == CUPTI_SUCCESS) {
      cupti_.unsubscribe(handle);
      return "";
    }
    // torch.profiler's Kineto subscribes without a name once it has run, and
    // stays subscribed; castscope needs no subscriber and steps aside while
    // the profiler collects (gpu_timing_yield), so an unnamed holder is no
    // reason to stay off. A tool that names itself (Nsight Systems) is.
    const std::string name = holder;
    if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED && !name.empty() && name.find("<not provided>") == std::string::npos)
      return "another tool holds CUPTI (" + name + "); castscope leaves it alone";
    if (result == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED) return "";
    return "CUPTI (" + cupti_.path + ") did not start: " + cupti_.describe(result) + " (no CUDA driver or GPU here?)";
  }

  // CUPTI's clock (CLOCK_REALTIME on Linux unless a tool registered another)
  // against the agent's: the narrowest of a few bracketed reads. castscope
  // registers no timestamp callback of its own: that would change the clock
  // of every other CUPTI client in the process.
  void measure_clock_offset() {
    int64_t best_width = INT64_MAX;
    int64_t offset = clock_offset_ns_.load(std::memory_order_relaxed);
    for (int i = 0; i < 5; ++i) {
      uint64_t cupti_now = 0;
      const uint64_t before = now_ns();
      if (cupti_.get_timestamp(&cupti_now) != CUPTI_SUCCESS) return;
      const uint64_t after = now_ns();
      const int64_t width = static_cast<int64_t>(after - before);
      if (width < best_width) {
        best_width = width;
        offset = static_cast<int64_t>(cupti_now) - static_cast<int64_t>(before + (after - before) / 2);
      }
    }
    clock_offset_ns_.store(offset, std::memory_order_relaxed);
  }

  // Called with mutex_ held.
  void read_records(uint8_t* buffer, size_t valid) {
    CUpti_Activity* activity = nullptr;
    while (cupti_.activity_get_next_record(buffer, valid, &activity) == CUPTI_SUCCESS) {
      switch (activity->kind) {
        case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
          const auto* c = reinterpret_cast<const CUpti_ActivityExternalCorrelation*>(activity);
          if (static_cast<uint32_t>(c->externalKind) == config_.correlation_kind) remember_launch(c->correlationId, c->externalId);
          break;
        }
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
          const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(activity);
          hold(GpuActivity::kKernel, k->name != nullptr ? k->name : "(unnamed kernel)", k->start, k->end, k->deviceId,
               k->streamId, k->correlationId, 0);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemcpy6*>(activity);
          hold(GpuActivity::kMemcpy, memcpy_name(m->copyKind), m->start, m->end, m->deviceId, m->streamId,
               m->correlationId, m->bytes);
          break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
          const auto* m = reinterpret_cast<const CUpti_ActivityMemset4*>(activity);
          hold(GpuActivity::kMemset, "memset", m->start, m->end, m->deviceId, m->streamId, m->correlationId, m->bytes);
          break;
        }
        default:
          break;  // API records: only there to make correlation records
      }
    }
  }

  void remember_launch(uint32_t correlation, uint64_t launch) {
    if (launches_.insert_or_assign(correlation, launch).second) launch_order_.push_back(correlation);
    while (launch_order_.size() > kMaxRememberedLaunches) {
      launches_.erase(launch_order_.front());
      launch_order_.pop_front();
    }
  }

  void hold(GpuActivity activity, const char* name, uint64_t start, uint64_t end, uint32_t device, uint32_t stream,
            uint32_t correlation, uint64_t bytes) {
    // CUPTI leaves 0 (or end < start) when it could not time an activity, as
    // in a forced flush of one still running: no time to report, counted.
    if (start == 0 || end < start) {
      log_->count_gpu_dropped(1);
      return;
    }
    Record r{};
    r.kind = RecordKind::kKernel;
    r.device = DeviceKind::kCuda;
    r.op_id = name_id(name);
    const int64_t offset = clock_offset_ns_.load(std::memory_order_relaxed);
    r.ts_ns = static_cast<uint64_t>(static_cast<int64_t>(start) - offset);
    r.kernel.duration_ns = end - start;
    r.kernel.activity = activity;
    r.kernel.device = device;
    r.kernel.stream = stream;
    r.kernel.correlation_id = correlation;
    r.kernel.bytes = bytes;
    held_.push_back({r, false});
  }

  uint32_t name_id(const char* name) {
    auto found = names_.find(name);
    if (found != names_.end()) return found->second;
    const uint32_t id = log_->intern_op(name);
    names_.emplace(name, id);
    return id;
  }

  // Sends the held kernels whose launch is known; the others wait for one
  // more buffer, unless `all`.
  void release_held(bool all) {
    std::vector<HeldKernel> still;
    for (HeldKernel& held : held_) {
      Record& r = held.record;
      auto launch = launches_.find(r.kernel.correlation_id);
      if (launch == launches_.end() && !held.waited && !all) {
        held.waited = true;
        still.push_back(held);
        continue;
      }
      if (launch != launches_.end() && launch->second == kCastscopeOwnLaunchId) {
        ++stats_.own_kernels;
        continue;
      }
      if (launch != launches_.end()) {
        const bool cast = (launch->second & kCastLaunchBit) != 0;
        r.kernel.launched_by = cast ? LaunchedBy::kCast : LaunchedBy::kOp;
        r.kernel.launch_seq = launch->second & ~kCastLaunchBit;
      } else {
        r.kernel.launched_by = LaunchedBy::kNone;
      }
      const uint64_t ts = r.ts_ns;
      Record out = log_->new_record(RecordKind::kKernel);
      out.ts_ns = ts;
      out.op_id = r.op_id;
      out.device = r.device;
      out.kernel = r.kernel;
      log_->record(out);
      ++stats_.activities;
    }
    held_ = std::move(still);
  }

  std::mutex control_mutex_;  // start, stop, yield, resume, windows: one at a time
  std::atomic<bool> started_{false};
  bool window_open_ = true;
  std::atomic<bool> yielded_{false};  // atomic: flush() reads it without control_mutex_
  bool collecting_ = false;
  std::mutex mutex_;  // what CUPTI's callbacks touch
  std::mutex buffers_mutex_;
  std::unordered_set<uint8_t*> own_buffers_;  // allocated by request_buffer, not yet completed
  std::atomic<uint64_t> buffers_refused_{0}, foreign_buffers_{0};
  std::string state_;
  GpuTimingConfig config_;
  EventLog* log_ = nullptr;
  CuptiLibrary cupti_;
  std::atomic<size_t> buffer_bytes_{0};
  std::atomic<int64_t> clock_offset_ns_{0};
  std::unordered_map<uint32_t, uint64_t> launches_;
  std::deque<uint32_t> launch_order_;
  std::vector<HeldKernel> held_;
  std::unordered_map<std::string, uint32_t> names_;
  GpuTimingStats stats_;
};

Collector& collector() { return Collector::instance(); }

}  // namespace

std::string gpu_timing_start(const GpuTimingConfig& config, const std::vector<std::string>& candidates, EventLog& log) {
  return collector().start(config, candidates, log);
}
void gpu_timing_flush(bool forced) { collector().flush(forced); }
void gpu_timing_stop() { collector().stop(); }
bool gpu_timing_yield() { return collector().yield(); }
void gpu_timing_window(bool open) { collector().window(open); }
void gpu_timing_resume() { collector().resume(); }
std::string gpu_timing_state() { return collector().state(); }
int64_t gpu_clock_offset_ns() { return collector().clock_offset(); }
GpuTimingStats gpu_timing_stats() { return collector().stats(); }

}  // namespace castscope
