// The agent's lifecycle (agent.h): configuration, policy loading and
// checking, kernel registration, and the exporter thread that drains rings
// into the dump and the spool.
#include "agent/src/runtime/agent.h"

#include <c10/util/Exception.h>
#include <c10/util/hash.h>
#include <torch/version.h>
#include <pthread.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <mutex>
#include <set>
#include <nlohmann/json.hpp>
#include <thread>

#include "agent/src/config/agent_config.h"
#include "agent/src/context/jit_cast_lines.h"
#include "agent/src/context/jit_context.h"
#include "agent/src/context/recording_state.h"
#include "agent/src/dispatch/callable_overlay_casts.h"
#include "agent/src/dispatch/compile_record_replay.h"
#include "agent/src/dispatch/compiled_graph_json.h"
#include "agent/src/dispatch/compiled_graph_runs.h"
#include "agent/src/dispatch/dispatch.h"
#include "agent/src/dispatch/policy_check.h"
#include "agent/src/encode/batch_encoder.h"
#include "agent/src/encode/jsonl_writer.h"
#include "agent/src/numerics/numerics_windows.h"
#include "agent/src/observers/op_probe.h"
#include "agent/src/observers/trace_observer.h"
#include "agent/src/policy/callables_json.h"
#include "agent/src/runtime/copy_out.h"
#include "agent/src/policy/policy.h"
#include "agent/src/record/event_log.h"
#include "agent/src/record/module_scopes.h"
#include "agent/src/record/location_table.h"
#include "agent/src/record/user_code.h"
#include "agent/src/encode/source_lines.h"
#include "agent/src/runtime/forwarder_launcher.h"
#include "agent/src/runtime/own_arena_thread.h"
#include "agent/src/runtime/cublaslt_logger_control.h"
#include "agent/src/runtime/gpu_timing_control.h"
#include "agent/src/runtime/spool_losses.h"
#include "common/log/log.h"
#include "common/version/castscope_version.h"
#include "common/spool/accounting_file.h"
#include "common/spool/spool_backlog.h"
#include "common/spool/spool_writer.h"

namespace castscope {
namespace {

using json = nlohmann::json;

constexpr auto kRingCheckInterval = std::chrono::milliseconds(5);
// A forwarder that keeps dying is not restarted forever: its spool stays for
// `castscope load`, and castscope run says so.
constexpr int kMaxForwarderRestarts = 10;

// Ops a policy casts to lower precision, by base name ("aten::mm" for
// "aten::mm" and "aten::mm.overload"): the op probe looks for their
// in-place and out= variants.
std::set<std::pair<DeviceKind, std::string>> lower_precision_ops(const PolicySet& policies) {
  std::set<std::pair<DeviceKind, std::string>> ops;
  for (const auto& [device, policy] : policies.devices)
    for (const auto& [op, entry] : policy.ops)
      if (entry.policy == CastPolicy::kLowerPrecisionFp) ops.emplace(device_from_name(device), op.substr(0, op.find('.')));
  return ops;
}

// "sha1:<hex>" of the effective policy, so reports say which one ran.
std::string policy_hash(const PolicySet& policies) {
  return "sha1:" + c10::sha1(canonical_policy_text(policies)).str();
}

// Ids become folder names: keep them to a safe alphabet.
std::string safe_id(std::string text) {
  for (char& c : text)
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '_' && c != '.') c = '_';
  return text.empty() || text[0] == '.' ? "_" + text : text;
}

std::string host_name() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "localhost";
  return name;
}

uint64_t unix_ms() {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
}

// The shared default spool folder must be this user's own, not a planted link.
std::string default_spool_dir(std::string& error) {
  const char* tmp = std::getenv("TMPDIR");
  const std::string dir = std::string(tmp != nullptr && *tmp != '\0' ? tmp : "/tmp") + "/castscope-spool-" +
                          std::to_string(getuid());
  ::mkdir(dir.c_str(), 0700);
  struct stat info {};
  if (::lstat(dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode) || info.st_uid != getuid()) {
    error = "castscope: spool folder " + dir + " is not a directory owned by this user; set spool_dir";
    return "";
  }
  return dir;
}

int32_t env_int(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') return -1;
  char* end = nullptr;
  const long parsed = std::strtol(value, &end, 10);
  return (*end == '\0' && parsed >= 0 && parsed < (1L << 30)) ? static_cast<int32_t>(parsed) : -1;
}

ProcessIdentity current_identity() {
  return ProcessIdentity{static_cast<uint32_t>(getpid()), env_int("RANK"), env_int("LOCAL_RANK"), env_int("WORLD_SIZE")};
}


// Swallows the dispatcher's "overriding a previously registered kernel"
// warning while castscope registers (overriding is the point); forwards the rest.
class OverrideWarningFilter : public c10::WarningHandler {
 public:
  explicit OverrideWarningFilter(c10::WarningHandler* next) : next_(next) {}
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("Overriding a previously registered kernel") != std::string::npos) return;
    next_->process(warning);
  }

 private:
  c10::WarningHandler* next_;
};

}  // namespace

json findings_json(const std::vector<PolicyFinding>& findings) {
  json out = json::array();
  for (const auto& f : findings)
    out.push_back({{"severity", f.severity == PolicyFinding::Severity::kError ? "error" : "warning"},
                   {"kind", f.kind},
                   {"device", f.device},
                   {"op", f.op},
                   {"message", f.message}});
  return out;
}

Agent& Agent::instance() {
  static Agent* agent = new Agent();  // leaked: exporter may outlive statics
  return *agent;
}

int Agent::start(const char* config_text, std::string& error) {
  std::lock_guard<std::mutex> lock(lifecycle_mutex_);
  if (registry_ != nullptr) {
    error = "castscope: the agent is already started";
    return 1;
  }
  AgentConfig config;
  error = parse_agent_config(config_text, config);
  if (!error.empty()) return 1;
  if (config.torch_version.empty()) config.torch_version = TORCH_VERSION;
  PolicySet policies = load_policy_files(config.policy_files);
  if (!policies.ok()) {
    error = "castscope: policy refused, castscope does not take over autocast (native autocast keeps working):";
    for (const auto& e : policies.errors) error += "\n  " + e.str();
    return kPolicyRefused;
  }
  config.policy_hash = policy_hash(policies);
  callables_ = callables_json(policies);
  config.probe.lower_precision_ops = lower_precision_ops(policies);
  std::vector<PolicyFinding> findings = check_policy_against_dispatcher(policies);
  for (const auto& f : findings) {
    if (f.severity == PolicyFinding::Severity::kError) {
      error += (error.empty() ? "castscope: policy refused, castscope does not take over autocast (native autocast keeps working):" : "");
      error += "\n  " + f.message;
    } else {
      log::info("policy check: " + f.message);
    }
  }
  if (!error.empty()) return kPolicyRefused;

  if (const auto pid_at = config.events_path.find("{pid}"); pid_at != std::string::npos)
    config.events_path.replace(pid_at, 5, std::to_string(getpid()));
  {
    std::lock_guard<std::mutex> io(io_mutex_);
    if (!config.events_path.empty()) {
      error = writer_.open(config.events_path);
      if (!error.empty()) {
        error = "castscope: " + error;
        return 1;
      }
    }
  }
  error = open_transport(config);
  if (!error.empty()) {
    std::lock_guard<std::mutex> io(io_mutex_);
    writer_.close();
    return 1;
  }
  // Aggregate mode: rings carry a step's counters, samples and GPU records,
  // no per-event records, so they are smaller and counter tables fit
  // beside them in the same budget (docs/aggregate.md, "Memory").
  const size_t ring_records =
      config.aggregate ? std::min(config.ring_records, std::max<size_t>(4 * config.aggregate_max_keys, 1024))
                       : config.ring_records;
  process_recording_state().events.configure(ring_records, config.max_threads);
  process_recording_state().events.configure_aggregate(config.aggregate, config.aggregate_max_keys);
  process_recording_state().events.begin_session();  // an agent's counts are its own, not the process's
  gpu_timing_ = start_gpu_timing(config, process_recording_state().events);
  gpu_yields_ = 0;
  start_cublaslt_logger(config);
  set_torch_dir(config.internal_path_prefix);
  forget_resolved_jit_sites();
  g_record_events.store(config.record_events, std::memory_order_relaxed);
  module_scopes().set_enabled(config.module_scopes);

  auto registry = std::make_unique<DispatchRegistry>(process_recording_state());
  std::vector<std::string> registration_errors;
  {
    OverrideWarningFilter filter(c10::WarningUtils::get_warning_handler());
    c10::WarningUtils::WarningHandlerGuard guard(&filter);
    registration_errors = registry->register_policies(policies, config.explicit_casts);
  }
  if (!registration_errors.empty()) {
    registry.reset();  // unregisters what did register: all or nothing
    stop_gpu_timing();
    stop_cublaslt_logger();
    std::lock_guard<std::mutex> io(io_mutex_);
    writer_.close();
    close_transport();
    error = "castscope: could not register every policy entry, native autocast stays in place:";
    for (const auto& e : registration_errors) error += "\n  " + e;
    return 1;
  }
  registry_ = std::move(registry);
  register_jit_cast_lines();  // graphs optimized from now on name the line of each JIT-inserted cast
  attached_.store(true, std::memory_order_release);
  iteration_.store(0);
  process_recording_state().steps.store(0);
  process_recording_state().cast_cache.set_sample_every_misses(config.record_events ? config.cache_sample_every_misses : 0);
  config_ = config;
  findings_ = std::move(findings);
  stop_exporter_ = false;
  exporter_ = std::thread([this] { export_loop(); });
  if (config_.record_events) {
    probe_start(config_.probe);
    numerics_start(config_.numerics);
  }
  static std::once_flag fork_handler;
  std::call_once(fork_handler, [] {
    pthread_atfork([] { Agent::instance().before_fork(); }, [] { Agent::instance().after_fork_in_parent(); },
                   [] { Agent::instance().after_fork_in_child(); });
  });
  log::info("attached: " + std::to_string(registry_->registered_ops()) + " op kernels registered");
  const NativeCastOrder& cast_order = registry_->cast_order();  // as read before registering, not again
  if (cast_order.read) {
    log::info(std::string("an op's casts are made ") +
              (cast_order.right_to_left() ? "right to left" : "left to right") +
              ", as native autocast makes them");
  } else {
    log::warn("could not read the order in which native autocast casts an op's arguments (" +
              cast_order.unread_because + "): castscope casts them left to right");
  }
  return 0;
}

int Agent::stop() {
  module_scopes().set_enabled(false);
  if (forked_child_) return 1;
  std::lock_guard<std::mutex> lock(lifecycle_mutex_);
  if (registry_ == nullptr) return 1;
  attached_.store(false, std::memory_order_release);
  probe_stop();
  numerics_stop();
  unregister_jit_cast_lines();
  registry_.reset();  // native kernels are back from here on
  if (!finished_) write_out_and_close();
  finished_ = false;
  process_recording_state().cast_cache.clear();
  return 0;
}

void Agent::before_fork() {
  probe_before_fork();
  io_mutex_.lock();
  writer_.flush();
  EventLog::before_fork();  // a child's exiting threads give their rings back under it
}

void Agent::after_fork_in_parent() {
  EventLog::after_fork();
  io_mutex_.unlock();
  probe_after_fork_in_parent();
}

void Agent::after_fork_in_child() {
  EventLog::after_fork();
  io_mutex_.unlock();
  probe_after_fork_in_child();
  numerics_after_fork_in_child();
  g_record_events.store(false, std::memory_order_relaxed);
  attached_.store(false, std::memory_order_relaxed);  // no samples either: their locks may be held
  forget_gpu_timing_in_child();
  forked_child_ = true;
  if (exporter_.joinable()) exporter_.detach();  // the thread does not exist here
}

void Agent::finish() {
  if (forked_child_) return;
  std::lock_guard<std::mutex> lock(lifecycle_mutex_);
  if (registry_ == nullptr || finished_) return;
  finished_ = true;
  // The last window's counts go out before the final drain.
  numerics_stop();
  g_record_events.store(false, std::memory_order_relaxed);
  probe_stop();
  write_out_and_close();
}

void Agent::mark_iteration() {
  if (!attached() || !g_record_events.load(std::memory_order_relaxed)) return;
  const uint64_t iteration = iteration_.fetch_add(1, std::memory_order_relaxed) + 1;
  process_recording_state().steps.store(iteration, std::memory_order_relaxed);
  // Aggregate mode: this thread's counters of the step go out before its
  // sample, and later ones remember the new step count.
  if (process_recording_state().events.aggregating()) {
    process_recording_state().events.flush_thread_counters();
    process_recording_state().events.set_iteration(iteration);
  }
  // Through the thread's ring, so the sample stays in order with its casts.
  process_recording_state().events.record(cache_sample_record(process_recording_state(), SampleTrigger::kIteration));
  probe_on_iteration(iteration);
  numerics_on_iteration(iteration);
  gpu_timing_on_step(iteration);
}

void Agent::gpu_profiler(bool begin) {
  if (forked_child_) return;  // the parent's locks and CUPTI are not the child's to use
  std::lock_guard<std::mutex> lock(lifecycle_mutex_);
  if (registry_ == nullptr) return;
  if (!begin) {
    resume_gpu_timing();
  } else if (yield_gpu_timing()) {
    ++gpu_yields_;
    log::info("GPU timing steps aside while torch.profiler collects GPU activity");
  }
}

std::string Agent::gpu_timing_summary() const {
  // Paused now, or turned off after a good start (CUPTI refused to be taken back): say so.
  const std::string live = live_gpu_timing_state();
  if (live.rfind("paused", 0) == 0) return live;
  if (gpu_timing_ == "on" && live.rfind("off:", 0) == 0 && live != "off: stopped") return live;
  if (gpu_yields_ == 0) return gpu_timing_;
  return gpu_timing_ + "; stepped aside for torch.profiler " + std::to_string(gpu_yields_) +
         (gpu_yields_ == 1 ? " time" : " times") + " (its GPU activity is in the profiler's trace)";
}

long Agent::flush() {
  if (forked_child_) return 0;
  const long n = static_cast<long>(drain_to_writer(/*counters=*/true));
  write_stats();
  return n;
}

std::string Agent::status() {
  std::lock_guard<std::mutex> lock(lifecycle_mutex_);
  const EventLogStats stats = process_recording_state().events.stats();
  json out = {{"attached", registry_ != nullptr},
              {"ops_registered", registry_ != nullptr ? registry_->registered_ops() : 0},
              {"events_recorded", stats.recorded},
              {"events_dropped", stats.dropped},
              {"internal_errors", stats.internal_errors},
              {"direct_casts", process_recording_state().events.direct_casts()},
              {"events_path", config_.events_path},
              {"run_id", identity_run_id_},
              {"spool_dir", spool_.directory()},
              {"collector", config_.collector},
              {"forwarder_pid", forwarder_pid_.load()},
              {"forwarder_restarts", forwarder_restarts_.load()},
              {"gpu_timing", gpu_timing_summary()},
              {"gpu_records_dropped", stats.gpu_records_dropped},
              {"gpu_own_kernels", gpu_own_kernels()},
              {"numerics_window_open", numerics_window_open()},
              {"numerics_sites_dropped", numerics_sites_dropped()},
              {"cublaslt_logger", cublaslt_logger_status()},
              {"policy_files", config_.policy_files},
              {"policy_hash", config_.policy_hash},
              {"policy_findings", findings_json(findings_)},
              {"callable_overlays", registry_ != nullptr ? callables_ : json::array()},
              {"overlay_errors", stats.overlay_errors}};
  out.update(transport_status());  // under the io lock: the exporter changes them
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

void Agent::export_loop() noexcept {
  try {
    export_until_stopped();
  } catch (...) {
    // Out of memory or a broken file: stop exporting, never kill the job.
    process_recording_state().events.count_internal_error();
    log::error("the exporter stopped after an internal error; events stay in memory until the rings fill");
  }
}

void Agent::export_until_stopped() {
  std::unique_lock<std::mutex> lock(exporter_mutex_);
  auto next_sample = std::chrono::steady_clock::now() + std::chrono::milliseconds(config_.cache_sample_interval_ms);
  const auto interval = std::chrono::milliseconds(config_.flush_interval_ms);
  auto last_drain = std::chrono::steady_clock::now();
  auto next_gpu_flush = last_drain + std::chrono::seconds(1);
  auto next_counters_flush = last_drain + std::chrono::seconds(1);
  while (!stop_exporter_) {
    // Drain at the interval, or as soon as a ring is filling up (a burst of
    // small ops). The hot path never signals, so it never pays for a wakeup.
    while (!stop_exporter_ && std::chrono::steady_clock::now() - last_drain < interval &&
           !process_recording_state().events.needs_drain())
      exporter_cv_.wait_for(lock, kRingCheckInterval);
    last_drain = std::chrono::steady_clock::now();
    lock.unlock();
    if (std::chrono::steady_clock::now() >= next_sample) {
      process_recording_state().events.record(cache_sample_record(process_recording_state(), SampleTrigger::kInterval));
      next_sample += std::chrono::milliseconds(config_.cache_sample_interval_ms);
    }
    // GPU activity: after each step, and at least every second.
    if (const uint64_t step = iteration_.load(); step != gpu_flushed_step_ ||
                                                std::chrono::steady_clock::now() >= next_gpu_flush) {
      gpu_flushed_step_ = step;
      next_gpu_flush = std::chrono::steady_clock::now() + std::chrono::seconds(1);
      flush_gpu_timing();
    }
    gpu_timing_on_tick();
    // Aggregate mode: every thread's counters at least every second (the
    // training thread's also go out at each step, mark_iteration).
    const bool counters = std::chrono::steady_clock::now() >= next_counters_flush;
    if (counters) next_counters_flush = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    drain_to_writer(counters);
    supervise_forwarder();
    probe_on_tick();
    numerics_on_tick();
    lock.lock();
  }
}

void Agent::write_out_and_close() {
  // Before the exporter stops, so it drains the GPU records the final
  // flush puts into this thread's ring while they arrive.
  stop_gpu_timing();
  stop_cublaslt_logger();
  {
    std::lock_guard<std::mutex> wake(exporter_mutex_);
    stop_exporter_ = true;
  }
  exporter_cv_.notify_all();
  if (exporter_.joinable()) exporter_.join();
  process_recording_state().events.record(cache_sample_record(process_recording_state(), SampleTrigger::kStop));
  drain_to_writer(/*counters=*/true);
  drain_backlog_before_final();
  write_stats(/*final=*/true);
  {
    std::lock_guard<std::mutex> io(io_mutex_);
    writer_.close();
    losses_.finish();
    close_transport();
  }
  // A forwarder killed just now would leave the spool undelivered: start
  // another, which drains it once this process is gone.
  supervise_forwarder();
}

std::string Agent::open_transport(AgentConfig& config) {
  if (config.collector.empty() && config.spool_dir.empty()) return "";
  std::string error;
  if (config.spool_dir.empty()) config.spool_dir = default_spool_dir(error);
  if (!error.empty()) return error;
  AgentIdentity identity;
  const ProcessIdentity process = current_identity();
  const char* run_env = std::getenv("CASTSCOPE_RUN_ID");
  identity.hostname = host_name();
  // host-pid-start: this process; also the run id of a process on its own.
  identity.agent_id = safe_id(identity.hostname + "-" + std::to_string(process.pid) + "-" + std::to_string(unix_ms()));
  identity.run_id = !config.run_id.empty()                          ? config.run_id
                    : (run_env != nullptr && *run_env != '\0') ? std::string(run_env)
                                                                  : identity.agent_id;
  identity.pid = process.pid;
  identity.rank = process.rank;
  identity.local_rank = process.local_rank;
  identity.world_size = process.world_size;
  identity.torch_version = config.torch_version;
  identity.castscope_version = kCastscopeVersion;
  identity.aggregate = config.aggregate;
  identity.command = config.command;
  identity.policy_hash = config.policy_hash;
  identity.policy_files = config.policy_files;
  const std::string agent_dir = config.spool_dir + "/" + identity.agent_id;
  std::lock_guard<std::mutex> io(io_mutex_);
  error = spool_.open(agent_dir, config.spool_segment_bytes, config.spool_max_bytes);
  if (!error.empty()) return "castscope: " + error;
  if (const std::string problem = accounting_.open(agent_dir); !problem.empty())
    log::warn(problem + "; if the disk fills up, the run's drop count may not reach the collector");
  losses_ = SpoolLosses();
  backlog_ = SpoolBacklog(config.spool_backlog_bytes);
  identity_run_id_ = identity.run_id;
  encoder_ = std::make_unique<BatchEncoder>(std::move(identity));
  sequence_ = 0;
  batches_written_ = 0;
  spool_error_.clear();
  forwarder_restarts_ = 0;
  if (!config.collector.empty()) {
    forwarder_options_ = ForwarderOptions{config.forwarder_path, agent_dir, config.collector, config.token_env,
                                          config.tls_ca,
                                          config.spool_dir + "/" + encoder_->identity().agent_id + ".forwarder.log",
                                          config.give_up_after_s};
    const int pid = launch_forwarder(forwarder_options_, error);
    if (pid < 0) {
      spool_.close();
      accounting_.close();
      encoder_.reset();
      return "castscope: " + error;
    }
    forwarder_pid_ = pid;
  }
  return "";
}

void Agent::close_transport() {
  spool_.close();
  accounting_.close();
  encoder_.reset();
}

void Agent::supervise_forwarder() {
  std::lock_guard<std::mutex> lock(supervise_mutex_);
  const int pid = forwarder_pid_.load();
  if (pid <= 0) return;
  int status = 0;
  if (::waitpid(pid, &status, WNOHANG) != pid) return;
  forwarder_pid_ = 0;
  if (WIFEXITED(status) && WEXITSTATUS(status) == 0) return;
  const std::string how = WIFSIGNALED(status) ? "was killed by signal " + std::to_string(WTERMSIG(status))
                                              : "exited with code " + std::to_string(WEXITSTATUS(status));
  if (WIFEXITED(status) && WEXITSTATUS(status) == 3) {
    log::error("castscope-forwarder (pid " + std::to_string(pid) + ") " + how +
               ": the collector refused this agent; batches stay in " + forwarder_options_.agent_spool_dir +
               " (see " + forwarder_options_.log_path + ")");
    return;
  }
  if (forwarder_restarts_ >= kMaxForwarderRestarts) {
    log::error("castscope-forwarder (pid " + std::to_string(pid) + ") " + how + " after " +
               std::to_string(forwarder_restarts_.load()) + " restarts; not restarted again. Batches stay in " +
               forwarder_options_.agent_spool_dir + "; load them with: castscope load --db DB " +
               forwarder_options_.agent_spool_dir);
    return;
  }
  ++forwarder_restarts_;
  std::string error;
  const int restarted = launch_forwarder(forwarder_options_, error);
  if (restarted < 0) {
    log::error("castscope-forwarder (pid " + std::to_string(pid) + ") " + how + " and cannot be restarted: " + error);
    return;
  }
  forwarder_pid_ = restarted;
  log::warn("castscope-forwarder (pid " + std::to_string(pid) + ") " + how + "; restarted as pid " +
            std::to_string(restarted) + " on the same spool");
}

void Agent::ship_batch(bool final) {
  if (!encoder_ || (encoder_->events() == 0 && !final)) return;
  // The final batch closes the stream: nothing may wait behind it, and it
  // waits for nothing (no exporter tick comes after it).
  if (final) drop_waiting_batches();
  const size_t events = encoder_->record_events();
  const EventLogStats stats = process_recording_state().events.stats();
  std::string payload = encoder_->finish(++sequence_, stats.recorded, stats.dropped, final);
  if (backlog_.append(spool_, {std::move(payload), events}, batches_written_, /*may_wait=*/!final) !=
      SpoolBacklog::Outcome::kRefused)
    return;
  --sequence_;  // nothing went out under this number
  count_lost(events, final);
}

void Agent::count_lost(uint64_t events, bool final) {
  process_recording_state().events.count_lost(events);
  losses_.count(spool_.failure(), spool_.error(), events, std::chrono::steady_clock::now());
  spool_error_ = spool_.error();
  // The next batch that gets through carries the new counts; until then,
  // and for good if none does, the accounting file does (an empty batch
  // under the number the lost one would have had).
  const EventLogStats after = process_recording_state().events.stats();
  accounting_.write(encoder_->finish(sequence_ + 1, after.recorded, after.dropped, final));
}

void Agent::drop_waiting_batches() {
  batches_written_ += backlog_.flush(spool_);
  const auto waiting = backlog_.take_all();
  sequence_ -= waiting.size();  // they were the newest numbers: no gap
  for (const auto& batch : waiting) count_lost(batch.events, /*final=*/false);
}

void Agent::drain_backlog_before_final() {
  std::unique_lock<std::mutex> io(io_mutex_);
  auto last_progress = std::chrono::steady_clock::now();
  while (!backlog_.empty() && forwarder_pid_.load() > 0) {
    if (const uint64_t written = backlog_.flush(spool_); written > 0) {
      batches_written_ += written;
      last_progress = std::chrono::steady_clock::now();
      continue;
    }
    if (std::chrono::steady_clock::now() - last_progress >= std::chrono::seconds(1)) break;
    io.unlock();
    supervise_forwarder();  // one that died now is restarted on the same spool
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    io.lock();
  }
  // What still waits is dropped and counted by the final batch (ship_batch).
}

json Agent::transport_status() {
  std::lock_guard<std::mutex> io(io_mutex_);
  return {{"batches_written", batches_written_},
          {"batches_lost", losses_.batches()},
          {"batches_waiting", backlog_.batches()},
          {"backlog_peak_bytes", backlog_.peak_bytes()},
          {"spool_error", spool_error_}};
}

size_t Agent::drain_to_writer(bool counters) {
  std::lock_guard<std::mutex> io(io_mutex_);
  static const OpMeta no_op;
  const auto sink = [this](const Record& record) {
    try {
      const bool sample = record.kind == RecordKind::kCacheSample;
      const bool counts = record.kind == RecordKind::kCastCounts || record.kind == RecordKind::kOpCounts;
      // Only casts, ops, their counters and numerics have a location; the other kinds' union holds something else there.
      const uint32_t location = record.kind == RecordKind::kCast ? record.cast.location
                                : record.kind == RecordKind::kOp ? record.op.location
                                : counts                         ? record.counts.key.location
                                : record.kind == RecordKind::kNumerics ? record.numerics.location
                                                                 : 0;
      const OpMeta& meta = sample ? no_op : op_meta(record.op_id);
      if (writer_.is_open()) writer_.write_line(record_to_json(record, meta, location_of(location)));
      if (encoder_) {
        encoder_->add(record, meta, location, location_of(location));
        if (encoder_->events() >= config_.batch_events) ship_batch(false);
      }
    } catch (...) {
      process_recording_state().events.count_internal_error();
    }
  };
  batches_written_ += backlog_.flush(spool_);  // space the forwarder freed since the last tick
  size_t n = process_recording_state().events.drain(sink);
  if (counters) n += process_recording_state().events.drain_counters(sink);
  writer_.flush();
  ship_batch(false);
  return n;
}

void Agent::write_stats(bool final) {
  std::lock_guard<std::mutex> io(io_mutex_);
  const EventLogStats stats = process_recording_state().events.stats();
  const std::string gpu_timing = gpu_timing_summary();
  if (encoder_) {
    encoder_->add_stats(stats, now_ns(), gpu_timing);
    ship_batch(final);
  }
  if (!writer_.is_open()) return;
  writer_.write_line(stats_to_json(stats, current_identity(), config_.torch_version, now_ns(), gpu_timing));
  writer_.flush();
}

const OpMeta& Agent::op_meta(uint32_t op_id) {
  if (op_id >= op_cache_.size() || op_cache_[op_id].name.empty() || op_cache_[op_id].arg_names.empty()) {
    if (op_id >= op_cache_.size()) op_cache_.resize(op_id + 1);
    op_cache_[op_id] = process_recording_state().events.op_meta(op_id);
  }
  return op_cache_[op_id];
}

const Location& Agent::location_of(uint32_t id) {
  if (id >= location_cache_.size()) location_cache_.resize(id + 1);
  if (id != 0 && location_cache_[id].kind == LocationKind::kNone) {
    Location& location = location_cache_[id];
    location = process_recording_state().locations.get(id);
    if (location.kind == LocationKind::kPython || location.kind == LocationKind::kTorchscript)
      location.source_text = read_source_line(location.file, location.line);
  }
  return location_cache_[id];
}

}  // namespace castscope
