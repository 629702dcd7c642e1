// The agent of one process: configuration, policy loading and checking,
// kernel registration, the exporter thread that drains the rings into the
// dump and the spool, and the forwarder it supervises. One per process
// (instance()); the C API (c_api.cc) drives it.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>
#include <vector>

#include "agent/src/config/agent_config.h"
#include "agent/src/dispatch/dispatch.h"
#include "agent/src/dispatch/policy_check.h"
#include "agent/src/encode/batch_encoder.h"
#include "agent/src/encode/jsonl_writer.h"
#include "agent/src/record/event_log.h"
#include "agent/src/record/location_table.h"
#include "agent/src/runtime/forwarder_launcher.h"
#include "agent/src/runtime/spool_losses.h"
#include "common/spool/accounting_file.h"
#include "common/spool/spool_backlog.h"
#include "common/spool/spool_writer.h"

namespace castscope {

using json = nlohmann::json;

// Policy findings as castscope_policy_check and the status report them.
json findings_json(const std::vector<PolicyFinding>& findings);

class Agent {
 public:
  static Agent& instance();

  // castscope_agent_start's status for a policy that cannot run here (agent.h).
  static constexpr int kPolicyRefused = 2;

  int start(const char* config_text, std::string& error);

  int stop();

  // Around fork: the events file is flushed and no write is half done, so
  // the child's copy of the stdio buffer is empty and cannot be written twice.
  void before_fork();
  void after_fork_in_parent();

  // A forked child (a DataLoader worker) inherits the kernels but not the
  // exporter thread, and shares the parent's events file. It keeps casting
  // exactly as native and records nothing; the parent's buffered events are
  // the parent's to write. Processes started with exec get their own agent.
  void after_fork_in_child();

  void finish();

  void mark_iteration();

  bool attached() const { return attached_.load(std::memory_order_acquire); }

  void gpu_profiler(bool begin);

  // The run's GPU timing state for stats events and the status.
  std::string gpu_timing_summary() const;

  long flush();

  std::string status();

 private:
  void export_loop() noexcept;

  void export_until_stopped();

  // Stops the exporter, writes what is still buffered, the stop sample and
  // the final stats, and closes the dump. Shared by stop and finish.
  void write_out_and_close();

  // Opens the spool folder and starts the forwarder, when configured.
  std::string open_transport(AgentConfig& config);

  void close_transport();

  // The forwarder is our child. It exits 0 once the final batch is stored
  // and 3 when the collector refuses this agent for good; any other end
  // (killed, crashed) is restarted on the same spool, which it reads from
  // its start (the collector drops what it already has). Exporter thread,
  // and once more at stop.
  void supervise_forwarder();

  // Encodes the pending events as one batch and appends it to the spool.
  // Called with io_mutex_ held.
  void ship_batch(bool final);

  // A batch of `events` events will never be written: counted, and the
  // accounting file says so in case no later batch does.
  void count_lost(uint64_t events, bool final);

  // Whatever still waits for space: written if the spool takes it now,
  // else dropped and counted, the sequence rewound over it. Under io_mutex_.
  void drop_waiting_batches();
  // At the end, the batches still waiting for space go out before the final
  // one while a forwarder keeps freeing space, for as long as it frees some
  // within a second; the final batch then drops and counts the rest.
  void drain_backlog_before_final();
  // The spool's counters for status(), read under the io lock.
  json transport_status();

  // `counters`: aggregate mode's counters too (EventLog::drain_counters).
  size_t drain_to_writer(bool counters = false);

  // The stats event; the final one closes the agent's batch stream.
  void write_stats(bool final = false);

  // Metadata lookups are cached per drain caller: op ids are stable.
  const OpMeta& op_meta(uint32_t op_id);

  // Locations never change once interned: cache them on the exporter side.
  const Location& location_of(uint32_t id);

  std::atomic<bool> attached_{false};
  bool forked_child_ = false;
  bool finished_ = false;  // castscope_agent_finish ran: everything written
  std::atomic<uint64_t> iteration_{0};
  std::vector<Location> location_cache_;
  std::mutex lifecycle_mutex_;
  std::unique_ptr<DispatchRegistry> registry_;
  AgentConfig config_;
  std::vector<PolicyFinding> findings_;
  json callables_ = json::array();  // module and function overlays of the attached policies

  std::mutex io_mutex_;  // writer_, op_cache_ and the transport below
  JsonlWriter writer_;
  std::unique_ptr<BatchEncoder> encoder_;
  SpoolWriter spool_;
  SpoolBacklog backlog_;  // batches waiting for space on a full spool disk
  uint64_t sequence_ = 0;
  uint64_t batches_written_ = 0;
  std::string spool_error_;
  std::string gpu_timing_;  // "on" / "off: why" (gpu_timing_control.h)
  uint64_t gpu_flushed_step_ = 0;
  std::atomic<uint64_t> gpu_yields_{0};  // times GPU timing stepped aside for torch.profiler
  std::string identity_run_id_;
  spool::AccountingFile accounting_;
  SpoolLosses losses_;

  std::mutex supervise_mutex_;  // the forwarder's process, below
  std::atomic<int> forwarder_pid_{0};
  ForwarderOptions forwarder_options_;
  std::atomic<int> forwarder_restarts_{0};
  std::vector<OpMeta> op_cache_;

  std::mutex exporter_mutex_;
  std::condition_variable exporter_cv_;
  bool stop_exporter_ = false;
  std::thread exporter_;
};

}  // namespace castscope
