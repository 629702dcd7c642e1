#include "server/src/export/run_events.h"

#include <algorithm>

#include "server/src/store/event_columns.h"
#include "server/src/store/numerics_problems.h"
#include "server/src/store/store_queries.h"
#include "server/src/store/store_schema.h"

namespace castscope::collector {
namespace {

// Column lists of the reader's scans (row_codec.h): what the writers show.
constexpr auto kCastRow = schema::columns(
    schema::kCasts,
    {"id", "ts_ns", "op", "arg_name", "slot", "codes", "shape", "bytes", "op_seq", "location", "module", "parameter"});
constexpr auto kOpRow =
    schema::columns(schema::kOps, {"id", "ts_ns", "thread", "op", "codes", "cpu_duration_ns", "location"});
constexpr auto kSampleRow =
    schema::columns(schema::kCacheSamples, {"id", "ts_ns", "trigger", "iteration", "live_casts", "live_bytes"});
constexpr auto kKernelRow =
    schema::columns(schema::kKernels, {"id", "ts_ns", "duration_ns", "name", "codes", "device", "stream",
                                       "launch_seq", "bytes", "correlation_id"});
constexpr auto kLaunchRow = schema::columns(schema::kKernels, {"id", "launch_seq", "codes"});

// What the export shows of the numerics table: GradScaler's updates, and the
// windows that found a problem, as the viewer marks them (/api/numerics).
bool exported(const StoredNumerics& n) {
  return n.kind() == v1::NumericsSummary::KIND_SCALER_UPDATE || is_numerics_problem(numerics_counts(n));
}

constexpr size_t kMaxCachedNames = 1 << 17;  // strings and locations kept between agents

}  // namespace

// One scan over one agent's range of a table, a row ahead.
template <typename Row, const auto& kColumns>
struct RunEventCursor::Cursor {
  RowScan<Row, kColumns> scan;
  Row row;
  bool has_row = false;

  Status open(Database& db, int64_t first, int64_t end, std::string_view rest) {
    if (Status s = scan.open(db.handle(), first, end, rest); !s.ok()) return db.error(s.message());
    return advance(db);
  }
  Status advance(Database& db) {
    Status error;
    has_row = scan.next(row, error);
    return error.ok() ? Status() : db.error(error.message());
  }
  // Seq of the row; the largest when there is none.
  uint64_t seq() const { return has_row ? row.seq() : UINT64_MAX; }
  // Steps past the rows `keep` refuses.
  template <typename Keep>
  Status skip_unless(Database& db, Keep&& keep) {
    while (has_row && !keep(row))
      if (Status s = advance(db); !s.ok()) return s;
    return {};
  }
};

struct RunEventCursor::Cursors {
  Cursor<StoredCast, kCastRow> casts;
  Cursor<StoredOp, kOpRow> ops;
  Cursor<StoredCacheSample, kSampleRow> samples;
  Cursor<StoredKernel, kKernelRow> kernels;      // by start
  Cursor<StoredKernel, kLaunchRow> launches;     // by launching seq
  Cursor<StoredNumerics, kAllColumns<StoredNumerics>> numerics;  // those exported(), when the store has the table
};

RunEventCursor::RunEventCursor() = default;
RunEventCursor::~RunEventCursor() { (void)end_agent(); }

Status RunEventCursor::open(const std::string& db_path, const std::string& run_id,
                            std::unique_ptr<RunEventCursor>& out) {
  auto reader = std::unique_ptr<RunEventCursor>(new RunEventCursor());
  if (Status s = reader->db_.open(db_path, Database::Mode::kReadOnly); !s.ok()) return s;
  reader->resolver_.attach(reader->db_.handle());
  if (Status s = reader->load_agents(run_id); !s.ok()) return s;
  // A store of schema 14 or older, read as it is, has no numerics.
  if (Status s = table_exists(reader->db_.handle(), schema::kNumerics, reader->has_numerics_); !s.ok())
    return reader->db_.error(s.message());
  out = std::move(reader);
  return {};
}

Status RunEventCursor::load_agents(const std::string& run_id) {
  run_id_ = run_id;
  StoredRun run;
  bool found = false;
  if (Status s = find_run(db_.handle(), run_id, run, found); !s.ok()) return db_.error(s.message());
  if (!found)
    return Status::not_found("no run \"" + run_id + "\" in " + db_.path() + " (castscope query --db " + db_.path() +
                             " runs lists them)");
  if (Status s = read_agents(db_.handle(), run.row, "", agents_); !s.ok()) return db_.error(s.message());
  return {};
}

Status RunEventCursor::end_agent() {
  cursors_.reset();
  main_ready_ = kernel_ready_ = false;
  awaited_kernels_.clear();
  if (!in_transaction_) return {};
  in_transaction_ = false;
  return db_.exec("COMMIT");
}

Status RunEventCursor::start_agent(size_t index) {
  if (Status s = end_agent(); !s.ok()) return s;
  if (index >= agents_.size()) return Status::invalid_argument("no agent " + std::to_string(index));
  // Views handed out for the last agent are dead now: the cache may go.
  if (resolver_.cached() > kMaxCachedNames) resolver_.clear();
  if (Status s = db_.exec("BEGIN"); !s.ok()) return s;
  in_transaction_ = true;
  const int64_t first = first_row_of(agents_[index].row), end = end_row_of(agents_[index].row);
  auto cursors = std::make_unique<Cursors>();
  if (Status s = cursors->casts.open(db_, first, end, " ORDER BY id"); !s.ok()) return s;
  if (Status s = cursors->ops.open(db_, first, end, " ORDER BY id"); !s.ok()) return s;
  if (Status s = cursors->samples.open(db_, first, end, " ORDER BY id"); !s.ok()) return s;
  if (Status s = cursors->kernels.open(db_, first, end, " ORDER BY ts_ns, id"); !s.ok()) return s;
  if (Status s = cursors->launches.open(db_, first, end, " AND launch_seq > 0 ORDER BY launch_seq, id"); !s.ok())
    return s;
  if (has_numerics_) {
    if (Status s = cursors->numerics.open(db_, first, end, " ORDER BY id"); !s.ok()) return s;
    if (Status s = cursors->numerics.skip_unless(db_, exported); !s.ok()) return s;
  }
  cursors_ = std::move(cursors);
  return {};
}

// The kernels launched by the cast or op `seq` (kernels.launch_seq is a seq
// of the same agent). The launch cursor is ordered by launch_seq, so it only
// moves forward as the agent's seqs do; launches of seqs that are not in the
// store are passed over.
Status RunEventCursor::collect_launched(uint64_t seq, v1::LaunchedBy by) {
  launched_.clear();
  auto& c = cursors_->launches;
  while (c.has_row && static_cast<uint64_t>(c.row.launch_seq) <= seq) {
    const bool mine = static_cast<uint64_t>(c.row.launch_seq) == seq;
    if (mine && KernelCodes{c.row.codes}.launched_by() == by && launched_.size() < kMaxLaunchedKernels)
      launched_.push_back(c.row.seq());
    if (Status s = c.advance(db_); !s.ok()) return s;
  }
  return {};
}

// What casts and ops share: codes, the op, the location, the kernels launched.
template <typename Event>
Status RunEventCursor::read_op_site(const Event& event, int64_t op, int64_t location, v1::LaunchedBy by,
                                    ExportEvent& e) {
  e.policy = event.policy();
  e.device_type = event.device_type();
  e.mode = event.mode();
  e.phase = event.phase();
  if (Status s = resolver_.text(op, e.name); !s.ok()) return s;
  if (Status s = resolver_.location(location, e.location); !s.ok()) return s;
  if (Status s = collect_launched(e.seq, by); !s.ok()) return s;
  e.launched = launched_;
  return {};
}

Status RunEventCursor::read_cast(const StoredCast& r, ExportEvent& e) {
  e.kind = ExportEvent::Kind::kCast;
  e.ts_ns = static_cast<uint64_t>(r.ts_ns);
  v1::CastEvent cast;
  unpack_cast_slot(r.slot, cast);
  unpack_cast_codes(r.codes, cast);
  e.thread = cast.thread();
  e.list_index = cast.list_index();
  e.src_dtype = cast.src_dtype();
  e.dst_dtype = cast.dst_dtype();
  e.outcome = cast.outcome();
  e.role = cast.role();
  e.maker = cast.maker();
  e.cache = cast.cache();
  e.shape_truncated = cast.shape_truncated();
  e.bytes = static_cast<uint64_t>(r.bytes);
  e.op_seq = static_cast<uint64_t>(r.op_seq);
  main_shape_.clear();
  for_each_dim(r.shape, [&](int64_t dim) { main_shape_.push_back(dim); });
  e.shape = main_shape_;
  if (Status s = resolver_.text(r.arg_name, e.arg_name); !s.ok()) return s;
  if (Status s = resolver_.text(r.module, e.module); !s.ok()) return s;
  if (Status s = resolver_.text(r.parameter, e.parameter); !s.ok()) return s;
  return read_op_site(cast, r.op, r.location, v1::LAUNCHED_BY_CAST, e);
}

Status RunEventCursor::read_op(const StoredOp& r, ExportEvent& e) {
  e.kind = ExportEvent::Kind::kOp;
  e.ts_ns = static_cast<uint64_t>(r.ts_ns);
  e.thread = static_cast<uint32_t>(r.thread);
  v1::OpEvent op;
  unpack_op_codes(r.codes, op);
  e.output_dtype = op.output_dtype();
  e.op_outcome = op.outcome();
  e.probe_reason = op.probe_reason();
  e.duration_ns = static_cast<uint64_t>(r.cpu_duration_ns);
  return read_op_site(op, r.op, r.location, v1::LAUNCHED_BY_OP, e);
}

void RunEventCursor::read_sample(const StoredCacheSample& r, ExportEvent& e) {
  e.kind = ExportEvent::Kind::kCacheSample;
  e.ts_ns = static_cast<uint64_t>(r.ts_ns);
  e.trigger = r.trigger();
  e.iteration = static_cast<uint64_t>(r.iteration);
  e.live_casts = static_cast<uint64_t>(r.live_casts);
  e.live_bytes = static_cast<uint64_t>(r.live_bytes);
}

Status RunEventCursor::read_numerics(const StoredNumerics& r, ExportEvent& e) {
  e.kind = ExportEvent::Kind::kNumerics;
  e.ts_ns = static_cast<uint64_t>(r.first_ts_ns);
  e.last_ts_ns = static_cast<uint64_t>(r.last_ts_ns);
  e.thread = static_cast<uint32_t>(r.thread);
  e.numerics_kind = r.kind();
  e.device_type = r.device_type();
  e.src_dtype = r.src_dtype();
  e.dst_dtype = r.dst_dtype();
  e.mode = r.mode();
  e.phase = r.phase();
  e.iteration = static_cast<uint64_t>(r.iteration);
  e.tensors = static_cast<uint64_t>(r.tensors);
  e.values = static_cast<uint64_t>(r.value_count);
  e.overflowed = static_cast<uint64_t>(r.overflowed);
  e.underflowed = static_cast<uint64_t>(r.underflowed);
  e.nonfinite = static_cast<uint64_t>(r.nonfinite);
  e.nan = static_cast<uint64_t>(r.nan);
  e.max_abs_log2 = static_cast<int32_t>(r.max_abs_log2);
  e.first_nonfinite_seq = static_cast<uint64_t>(r.first_nonfinite_seq);
  e.scale = r.scale();
  e.found_inf = r.found_inf != 0;
  if (Status s = resolver_.text(r.op, e.name); !s.ok()) return s;
  if (Status s = resolver_.text(r.arg_name, e.arg_name); !s.ok()) return s;
  return resolver_.location(r.location, e.location);
}

bool RunEventCursor::fill_main(Status& error) {
  main_ready_ = false;
  Cursors& c = *cursors_;
  const uint64_t next = std::min({c.casts.seq(), c.ops.seq(), c.samples.seq(), c.numerics.seq()});
  if (next == UINT64_MAX) return false;
  ExportEvent& e = main_;
  e = ExportEvent();
  e.seq = next;
  // Ties go casts, ops, samples, numerics (as the cursors were listed).
  if (c.casts.seq() == next) {
    error = read_cast(c.casts.row, e);
    if (error.ok()) error = c.casts.advance(db_);
  } else if (c.ops.seq() == next) {
    error = read_op(c.ops.row, e);
    if (error.ok()) error = c.ops.advance(db_);
  } else if (c.samples.seq() == next) {
    read_sample(c.samples.row, e);
    error = c.samples.advance(db_);
  } else {
    error = read_numerics(c.numerics.row, e);
    if (error.ok()) error = c.numerics.advance(db_);
    if (error.ok()) error = c.numerics.skip_unless(db_, exported);
  }
  if (!error.ok()) return false;
  main_ready_ = true;
  return true;
}

bool RunEventCursor::fill_kernel(Status& error) {
  kernel_ready_ = false;
  auto& c = cursors_->kernels;
  if (!c.has_row) return false;
  const StoredKernel& r = c.row;
  ExportEvent& e = kernel_;
  e = ExportEvent();
  e.kind = ExportEvent::Kind::kKernel;
  e.seq = r.seq();
  e.ts_ns = static_cast<uint64_t>(r.ts_ns);
  e.duration_ns = static_cast<uint64_t>(r.duration_ns);
  e.activity = KernelCodes{r.codes}.activity();
  e.launched_by = KernelCodes{r.codes}.launched_by();
  e.gpu_device = static_cast<uint32_t>(r.device);
  e.stream = static_cast<uint32_t>(r.stream);
  e.launch_seq = static_cast<uint64_t>(r.launch_seq);
  e.bytes = static_cast<uint64_t>(r.bytes);
  e.correlation_id = static_cast<uint32_t>(r.correlation_id);
  if (error = resolver_.text(r.name, e.name); !error.ok()) return false;
  if (error = c.advance(db_); !error.ok()) return false;
  kernel_ready_ = true;
  return true;
}

bool RunEventCursor::next(ExportEvent& event, Status& error) {
  error = Status();
  if (cursors_ == nullptr) {
    error = Status::failed_precondition("RunEventCursor::next before start_agent");
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
