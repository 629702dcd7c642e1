#include "server/src/export/run_events.h"

#include <algorithm>
#include <cstring>

#include "server/src/store/event_columns.h"
#include "server/src/store/store_schema.h"

namespace castscope::collector {
namespace {

// Column lists of the reader's statements (store_schema.h).
constexpr auto kRunRow = schema::columns(schema::kRuns, {"id"});
constexpr auto kAgentRow =
    schema::columns(schema::kAgents, {"id", "agent_id", "pid", "rank", "local_rank", "world_size", "hostname",
                                      "command", "casts", "ops", "cache_samples", "kernels"});
constexpr auto kCastRow = schema::columns(
    schema::kCasts, {"id", "ts_ns", "op", "arg_name", "slot", "codes", "shape", "bytes", "op_seq", "location"});
constexpr auto kOpRow =
    schema::columns(schema::kOps, {"id", "ts_ns", "thread", "op", "codes", "cpu_duration_ns", "location"});
constexpr auto kSampleRow =
    schema::columns(schema::kCacheSamples, {"id", "ts_ns", "trigger", "iteration", "live_casts", "live_bytes"});
constexpr auto kKernelRow =
    schema::columns(schema::kKernels, {"id", "ts_ns", "duration_ns", "name", "codes", "device", "stream",
                                       "launch_seq", "bytes", "correlation_id"});
constexpr auto kLaunchRow = schema::columns(schema::kKernels, {"id", "launch_seq", "codes"});
constexpr auto kStringText = schema::columns(schema::kStrings, {"text"});
constexpr auto kLocationRow = schema::columns(schema::kLocations, {"file", "line", "function"});

constexpr size_t kMaxCachedStrings = 1 << 16;
constexpr size_t kMaxCachedLocations = 1 << 16;

}  // namespace

// One statement over one agent's range of a table, a row ahead.
struct RunEventReader::Cursor {
  Statement statement;
  bool has_row = false;

  Status open(Database& db, const std::string& sql, int64_t lo, int64_t hi) {
    if (Status s = Statement::prepare(db.handle(), sql, statement); !s.ok()) return db.error(s.message());
    statement.bind(1, lo);
    statement.bind(2, hi);
    return advance(db);
  }
  Status advance(Database& db) {
    Status error;
    has_row = statement.step(error);
    return error.ok() ? Status() : db.error(error.message());
  }
  // Seq of the row (its id's low bits); the largest when there is none.
  uint64_t seq() const { return has_row ? seq_of_row(statement.column_int(0)) : UINT64_MAX; }
};

RunEventReader::~RunEventReader() { (void)end_agent(); }

Status RunEventReader::open(const std::string& db_path, const std::string& run_id,
                            std::unique_ptr<RunEventReader>& out) {
  auto reader = std::unique_ptr<RunEventReader>(new RunEventReader());
  if (Status s = reader->db_.open(db_path, Database::Mode::kReadOnly); !s.ok()) return s;
  if (Status s = reader->load_agents(run_id); !s.ok()) return s;
  if (Status s = Statement::prepare(reader->db_.handle(), kStringText.select_sql() + " WHERE id = ?",
                                    reader->string_lookup_);
      !s.ok())
    return reader->db_.error(s.message());
  if (Status s = Statement::prepare(reader->db_.handle(), kLocationRow.select_sql() + " WHERE id = ?",
                                    reader->location_lookup_);
      !s.ok())
    return reader->db_.error(s.message());
  out = std::move(reader);
  return {};
}

Status RunEventReader::load_agents(const std::string& run_id) {
  run_id_ = run_id;
  Statement run;
  if (Status s = Statement::prepare(db_.handle(), kRunRow.select_sql() + " WHERE run_id = ?", run); !s.ok())
    return db_.error(s.message());
  run.bind_text(1, run_id);
  Status error;
  if (!run.step(error))
    return error.ok() ? Status::not_found("no run \"" + run_id + "\" in " + db_.path() +
                                          " (castscope query --db " + db_.path() + " runs lists them)")
                      : db_.error(error.message());
  const int64_t run_row = run.column_int(kRunRow["id"]);
  run.reset();
  Statement agents;
  if (Status s = Statement::prepare(db_.handle(), kAgentRow.select_sql() + " WHERE run = ? ORDER BY id", agents);
      !s.ok())
    return db_.error(s.message());
  agents.bind(1, run_row);
  while (agents.step(error)) {
    const Statement& a = agents;
    ExportAgent& agent = agents_.emplace_back();
    agent.row = a.column_int(kAgentRow["id"]);
    agent.agent_id = a.column_text(kAgentRow["agent_id"]);
    agent.pid = static_cast<uint32_t>(a.column_int(kAgentRow["pid"]));
    agent.rank = static_cast<int32_t>(a.column_int(kAgentRow["rank"]));
    agent.local_rank = static_cast<int32_t>(a.column_int(kAgentRow["local_rank"]));
    agent.world_size = static_cast<int32_t>(a.column_int(kAgentRow["world_size"]));
    agent.hostname = a.column_text(kAgentRow["hostname"]);
    agent.command = a.column_text(kAgentRow["command"]);
    agent.casts = static_cast<uint64_t>(a.column_int(kAgentRow["casts"]));
    agent.ops = static_cast<uint64_t>(a.column_int(kAgentRow["ops"]));
    agent.cache_samples = static_cast<uint64_t>(a.column_int(kAgentRow["cache_samples"]));
    agent.kernels = static_cast<uint64_t>(a.column_int(kAgentRow["kernels"]));
  }
  return error.ok() ? Status() : db_.error(error.message());
}

Status RunEventReader::end_agent() {
  for (auto* cursor : {&casts_, &ops_, &samples_, &kernels_, &launches_}) cursor->reset();
  main_ready_ = kernel_ready_ = false;
  awaited_kernels_.clear();
  if (!in_transaction_) return {};
  in_transaction_ = false;
  return db_.exec("COMMIT");
}

Status RunEventReader::start_agent(size_t index) {
  if (Status s = end_agent(); !s.ok()) return s;
  if (index >= agents_.size()) return Status::invalid_argument("no agent " + std::to_string(index));
  // Views handed out for the last agent are dead now: the caches may go.
  if (strings_.size() > kMaxCachedStrings) strings_.clear();
  if (locations_.size() > kMaxCachedLocations) locations_.clear();
  if (Status s = db_.exec("BEGIN"); !s.ok()) return s;
  in_transaction_ = true;
  const int64_t lo = event_row_id(agents_[index].row, 0), hi = event_row_id(agents_[index].row + 1, 0);
  const std::string range = " WHERE id >= ? AND id < ?";
  struct Open {
    std::unique_ptr<Cursor>& cursor;
    std::string sql;
  };
  for (const Open& o : {Open{casts_, kCastRow.select_sql() + range + " ORDER BY id"},
                        Open{ops_, kOpRow.select_sql() + range + " ORDER BY id"},
                        Open{samples_, kSampleRow.select_sql() + range + " ORDER BY id"},
                        Open{kernels_, kKernelRow.select_sql() + range + " ORDER BY ts_ns, id"},
                        Open{launches_, kLaunchRow.select_sql() + range + " AND launch_seq > 0 ORDER BY launch_seq, id"}}) {
    o.cursor = std::make_unique<Cursor>();
    if (Status s = o.cursor->open(db_, o.sql, lo, hi); !s.ok()) return s;
  }
  return {};
}

Status RunEventReader::text(int64_t id, std::string_view& out) {
  out = {};
  if (id == 0) return {};
  auto it = strings_.find(id);
  if (it == strings_.end()) {
    string_lookup_.reset();
    string_lookup_.bind(1, id);
    Status error;
    std::string value;
    if (string_lookup_.step(error)) value = string_lookup_.column_text(kStringText["text"]);
    string_lookup_.reset();
    if (!error.ok()) return db_.error(error.message());
    it = strings_.emplace(id, std::move(value)).first;
  }
  out = it->second;
  return {};
}

Status RunEventReader::location(int64_t id, const ExportLocation*& out) {
  out = nullptr;
  if (id == 0) return {};
  auto it = locations_.find(id);
  if (it == locations_.end()) {
    location_lookup_.reset();
    location_lookup_.bind(1, id);
    Status error;
    ExportLocation value;
    if (location_lookup_.step(error)) {
      value.file = location_lookup_.column_text(kLocationRow["file"]);
      value.line = static_cast<uint32_t>(location_lookup_.column_int(kLocationRow["line"]));
      value.function = location_lookup_.column_text(kLocationRow["function"]);
    }
    location_lookup_.reset();
    if (!error.ok()) return db_.error(error.message());
    it = locations_.emplace(id, std::move(value)).first;
  }
  out = &it->second;
  return {};
}

// The kernels launched by the cast or op `seq` (kernels.launch_seq is a seq
// of the same agent). The launch cursor is ordered by launch_seq, so it only
// moves forward as the agent's seqs do; launches of seqs that are not in the
// store are passed over.
Status RunEventReader::collect_launched(uint64_t seq, v1::LaunchedBy by) {
  launched_.clear();
  Cursor& c = *launches_;
  while (c.has_row && static_cast<uint64_t>(c.statement.column_int(kLaunchRow["launch_seq"])) <= seq) {
    const bool mine = static_cast<uint64_t>(c.statement.column_int(kLaunchRow["launch_seq"])) == seq;
    v1::KernelEvent k;
    unpack_kernel_codes(c.statement.column_int(kLaunchRow["codes"]), k);
    if (mine && k.launched_by() == by && launched_.size() < kMaxLaunchedKernels)
      launched_.push_back(seq_of_row(c.statement.column_int(kLaunchRow["id"])));
    if (Status s = c.advance(db_); !s.ok()) return s;
  }
  return {};
}

bool RunEventReader::fill_main(Status& error) {
  main_ready_ = false;
  Cursor* next = nullptr;
  for (Cursor* c : {casts_.get(), ops_.get(), samples_.get()})
    if (c->has_row && (next == nullptr || c->seq() < next->seq())) next = c;
  if (next == nullptr) return false;
  const Statement& r = next->statement;
  ExportEvent& e = main_;
  e = ExportEvent();
  e.seq = next->seq();
  if (next == ops_.get()) {
    e.kind = ExportEvent::Kind::kOp;
    e.ts_ns = static_cast<uint64_t>(r.column_int(kOpRow["ts_ns"]));
    e.thread = static_cast<uint32_t>(r.column_int(kOpRow["thread"]));
    v1::OpEvent op;
    unpack_op_codes(r.column_int(kOpRow["codes"]), op);
    e.policy = op.policy();
    e.device_type = op.device_type();
    e.output_dtype = op.output_dtype();
    e.op_outcome = op.outcome();
    e.mode = op.mode();
    e.phase = op.phase();
    e.probe_reason = op.probe_reason();
    e.duration_ns = static_cast<uint64_t>(r.column_int(kOpRow["cpu_duration_ns"]));
    if (error = text(r.column_int(kOpRow["op"]), e.name); !error.ok()) return false;
    if (error = location(r.column_int(kOpRow["location"]), e.location); !error.ok()) return false;
    if (error = collect_launched(e.seq, v1::LAUNCHED_BY_OP); !error.ok()) return false;
    e.launched = launched_;
  } else if (next == casts_.get()) {
    e.kind = ExportEvent::Kind::kCast;
    e.ts_ns = static_cast<uint64_t>(r.column_int(kCastRow["ts_ns"]));
    v1::CastEvent cast;
    unpack_cast_slot(r.column_int(kCastRow["slot"]), cast);
    unpack_cast_codes(r.column_int(kCastRow["codes"]), cast);
    e.thread = cast.thread();
    e.list_index = cast.list_index();
    e.policy = cast.policy();
    e.src_dtype = cast.src_dtype();
    e.dst_dtype = cast.dst_dtype();
    e.outcome = cast.outcome();
    e.device_type = cast.device_type();
    e.role = cast.role();
    e.cache = cast.cache();
    e.mode = cast.mode();
    e.phase = cast.phase();
    e.shape_truncated = cast.shape_truncated();
    e.bytes = static_cast<uint64_t>(r.column_int(kCastRow["bytes"]));
    e.op_seq = static_cast<uint64_t>(r.column_int(kCastRow["op_seq"]));
    main_shape_.clear();
    const auto* shape = static_cast<const char*>(sqlite3_column_blob(r.get(), kCastRow["shape"]));
    const int shape_bytes = sqlite3_column_bytes(r.get(), kCastRow["shape"]);
    for (int i = 0; shape != nullptr && i + 8 <= shape_bytes; i += 8) {
      int64_t dim = 0;
      std::memcpy(&dim, shape + i, 8);
      main_shape_.push_back(dim);
    }
    e.shape = main_shape_;
    if (error = text(r.column_int(kCastRow["op"]), e.name); !error.ok()) return false;
    if (error = text(r.column_int(kCastRow["arg_name"]), e.arg_name); !error.ok()) return false;
    if (error = location(r.column_int(kCastRow["location"]), e.location); !error.ok()) return false;
    if (error = collect_launched(e.seq, v1::LAUNCHED_BY_CAST); !error.ok()) return false;
    e.launched = launched_;
  } else {
    e.kind = ExportEvent::Kind::kCacheSample;
    e.ts_ns = static_cast<uint64_t>(r.column_int(kSampleRow["ts_ns"]));
    e.trigger = static_cast<v1::CacheSample::Trigger>(r.column_int(kSampleRow["trigger"]));
    e.iteration = static_cast<uint64_t>(r.column_int(kSampleRow["iteration"]));
    e.live_casts = static_cast<uint64_t>(r.column_int(kSampleRow["live_casts"]));
    e.live_bytes = static_cast<uint64_t>(r.column_int(kSampleRow["live_bytes"]));
  }
  if (error = next->advance(db_); !error.ok()) return false;
  main_ready_ = true;
  return true;
}

bool RunEventReader::fill_kernel(Status& error) {
  kernel_ready_ = false;
  Cursor& c = *kernels_;
  if (!c.has_row) return false;
  const Statement& r = c.statement;
  ExportEvent& e = kernel_;
  e = ExportEvent();
  e.kind = ExportEvent::Kind::kKernel;
  e.seq = c.seq();
  e.ts_ns = static_cast<uint64_t>(r.column_int(kKernelRow["ts_ns"]));
  e.duration_ns = static_cast<uint64_t>(r.column_int(kKernelRow["duration_ns"]));
  v1::KernelEvent k;
  unpack_kernel_codes(r.column_int(kKernelRow["codes"]), k);
  e.activity = k.activity();
  e.launched_by = k.launched_by();
  e.gpu_device = static_cast<uint32_t>(r.column_int(kKernelRow["device"]));
  e.stream = static_cast<uint32_t>(r.column_int(kKernelRow["stream"]));
  e.launch_seq = static_cast<uint64_t>(r.column_int(kKernelRow["launch_seq"]));
  e.bytes = static_cast<uint64_t>(r.column_int(kKernelRow["bytes"]));
  e.correlation_id = static_cast<uint32_t>(r.column_int(kKernelRow["correlation_id"]));
  if (error = text(r.column_int(kKernelRow["name"]), e.name); !error.ok()) return false;
  if (error = c.advance(db_); !error.ok()) return false;
  kernel_ready_ = true;
  return true;
}

bool RunEventReader::next(ExportEvent& event, Status& error) {
  error = Status();
  if (casts_ == nullptr) {
    error = Status::failed_precondition("RunEventReader::next before start_agent");
    return false;
  }
  if (!main_ready_ && !fill_main(error) && !error.ok()) return false;
  if (!kernel_ready_ && !fill_kernel(error) && !error.ok()) return false;
  if (!main_ready_ && !kernel_ready_) return false;
  // Kernels go in by start time, before the first op, cast or sample that
  // started after them, but never before the cast or op that launched them:
  // a cast is recorded after its copy kernel was launched, and that kernel
  // may start first.
  const bool launcher_ahead =
      main_ready_ && kernel_ready_ && main_.seq <= kernel_.launch_seq &&
      (kernel_.launched_by == v1::LAUNCHED_BY_CAST || kernel_.launched_by == v1::LAUNCHED_BY_OP);
  const bool kernel_first = kernel_ready_ && (!main_ready_ || (kernel_.ts_ns < main_.ts_ns && !launcher_ahead));
  if (kernel_first) {
    kernel_.launch_joined = awaited_kernels_.erase(kernel_.seq) > 0;
    event = kernel_;
    kernel_ready_ = false;
  } else {
    awaited_kernels_.insert(launched_.begin(), launched_.end());
    event = main_;
    main_ready_ = false;
  }
  return true;
}

}  // namespace castscope::collector
