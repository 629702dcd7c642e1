#include "server/src/store/row_codec.h"

#include <nlohmann/json.hpp>

#include <functional>

namespace castscope::collector {

namespace v1 = castscope::v1;

namespace {

constexpr auto kRunRow = schema::columns(schema::kRuns, {"id", "run_id", "first_seen_unix_ns", "last_seen_unix_ns"});
// Every agents column but `aggregate` (schema version 13; a version-12
// store, read as it is, has none): read apart when the column is there.
constexpr auto kAgentRow = schema::columns(
    schema::kAgents, {"id", "agent_id", "pid", "rank", "local_rank", "world_size", "hostname", "torch_version",
                      "command", "policy_hash", "policy_files", "batches", "casts", "ops", "cache_samples",
                      "first_sequence", "last_sequence", "events_recorded_total", "events_dropped_total", "finished",
                      "kernels", "gpu_timing", "gpu_records_dropped", "overlay_errors", "castscope_version"});
// Columns later schema versions added to agents (read_added_agent_column).
constexpr auto kAgentAggregate = schema::columns(schema::kAgents, {"aggregate"});  // version 13
constexpr auto kAgentNumerics = schema::columns(schema::kAgents, {"numerics"});    // version 15
constexpr auto kStringText = schema::columns(schema::kStrings, {"text"});
constexpr auto kLocationRow = schema::columns(
    schema::kLocations, {"kind", "file", "line", "function", "stack", "flags", "source", "also_consumed_at"});
constexpr int64_t kLocationInsideDisabledAutocast = 1;  // locations.flags bit 0

// A JSON array of strings as stored (stacks, consumer lines, file lists); '' is none.
std::vector<std::string> strings_of(const std::string& text) {
  std::vector<std::string> out;
  if (text.empty()) return out;
  const auto array = nlohmann::json::parse(text, nullptr, false);
  if (array.is_array())
    for (const auto& item : array)
      if (item.is_string()) out.push_back(item.get<std::string>());
  return out;
}

// A lookup by id: prepared once, reset after each use (no snapshot kept).
Status lookup(sqlite3* db, Statement& statement, const std::string& select_sql, int64_t id, bool& found,
              const std::function<void(const Statement&)>& read) {
  if (statement.get() == nullptr)
    if (Status s = Statement::prepare(db, select_sql + " WHERE id = ?", statement); !s.ok()) return s;
  statement.reset();
  statement.bind(1, id);
  Status error;
  found = statement.step(error);
  if (found) read(statement);
  statement.reset();
  return error;
}

// What every event row has: its seq (the key's low bits) and start.
template <typename Row, typename Event>
void set_seq_and_ts(const Row& row, Event& out) {
  out.set_seq(row.seq());
  out.set_ts_ns(static_cast<uint64_t>(row.ts_ns));
}

// The op name and, when there is one, the location of a cast or op.
template <typename Event>
Status resolve_op_site(StoreResolver& resolver, int64_t op, int64_t location, Event& out) {
  if (Status s = resolver.text(op, *out.mutable_op()); !s.ok()) return s;
  if (location != 0) return resolver.location(location, *out.mutable_location());
  return {};
}

}  // namespace

void StoredLocation::to_proto(v1::SourceLocation& out) const {
  out.set_kind(kind);
  out.set_file(file);
  out.set_line(line);
  out.set_function(function);
  out.set_inside_disabled_autocast(inside_disabled_autocast);
  out.set_source_text(source_text);
  for (const std::string& frame : stack) out.add_stack(frame);
  for (const std::string& line_text : also_consumed_at) out.add_also_consumed_at(line_text);
}

Status StoreResolver::text(int64_t id, std::string_view& out) {
  out = {};
  if (id == 0) return {};
  auto it = strings_.find(id);
  if (it == strings_.end()) {
    std::string value;
    bool found = false;
    if (Status s = lookup(db_, string_lookup_, kStringText.select_sql(), id, found,
                          [&](const Statement& r) { value = r.column_text(kStringText["text"]); });
        !s.ok())
      return s;
    it = strings_.emplace(id, std::move(value)).first;
  }
  out = it->second;
  return {};
}

Status StoreResolver::text(int64_t id, std::string& out) {
  if (id == 0) return {};
  std::string_view view;
  if (Status s = text(id, view); !s.ok()) return s;
  out.assign(view);
  return {};
}

Status StoreResolver::location(int64_t id, const StoredLocation*& out) {
  out = nullptr;
  if (id == 0) return {};
  auto it = locations_.find(id);
  if (it == locations_.end()) {
    StoredLocation value;
    bool found = false;
    if (Status s = lookup(db_, location_lookup_, kLocationRow.select_sql(), id, found,
                          [&](const Statement& r) {
                            value.kind = static_cast<v1::SourceLocation::Kind>(r.column_int(kLocationRow["kind"]));
                            value.file = r.column_text(kLocationRow["file"]);
                            value.line = static_cast<uint32_t>(r.column_int(kLocationRow["line"]));
                            value.function = r.column_text(kLocationRow["function"]);
                            value.inside_disabled_autocast =
                                (r.column_int(kLocationRow["flags"]) & kLocationInsideDisabledAutocast) != 0;
                            value.source_text = r.column_text(kLocationRow["source"]);
                            value.stack = strings_of(r.column_text(kLocationRow["stack"]));
                            value.also_consumed_at = strings_of(r.column_text(kLocationRow["also_consumed_at"]));
                          });
        !s.ok())
      return s;
    it = locations_.emplace(id, std::move(value)).first;
  }
  out = &it->second;
  return {};
}

Status StoreResolver::location(int64_t id, v1::SourceLocation& out) {
  if (id == 0) return {};
  const StoredLocation* location = nullptr;
  if (Status s = this->location(id, location); !s.ok()) return s;
  location->to_proto(out);
  return {};
}

Status to_event(const StoredCast& row, StoreResolver& resolver, v1::CastEvent& out) {
  set_seq_and_ts(row, out);
  unpack_cast_slot(row.slot, out);
  unpack_cast_codes(row.codes, out);
  for_each_dim(row.shape, [&](int64_t dim) { out.add_shape(dim); });
  out.set_bytes(static_cast<uint64_t>(row.bytes));
  out.set_op_seq(static_cast<uint64_t>(row.op_seq));
  out.set_source_version(row.source_version);
  out.set_cached_version(row.cached_version);
  unpack_float8(row.float8, row.float8_zero_amax, out);
  if (Status s = resolver.text(row.arg_name, *out.mutable_arg_name()); !s.ok()) return s;
  if (Status s = resolver.text(row.module, *out.mutable_module()); !s.ok()) return s;
  if (Status s = resolver.text(row.parameter, *out.mutable_parameter()); !s.ok()) return s;
  return resolve_op_site(resolver, row.op, row.location, out);
}

Status to_event(const StoredOp& row, StoreResolver& resolver, v1::OpEvent& out) {
  set_seq_and_ts(row, out);
  out.set_thread(static_cast<uint32_t>(row.thread));
  unpack_op_codes(row.codes, out);
  unpack_input_dtypes(row.input_dtypes, out);
  out.set_cpu_duration_ns(static_cast<uint64_t>(row.cpu_duration_ns));
  unpack_device_mask(row.autocast_enabled, out);
  out.set_autocast_nesting(static_cast<uint32_t>(row.autocast_nesting));
  unpack_gemm(row.gemm, out);
  return resolve_op_site(resolver, row.op, row.location, out);
}

Status to_event(const StoredKernel& row, StoreResolver& resolver, v1::KernelEvent& out) {
  set_seq_and_ts(row, out);
  out.set_duration_ns(static_cast<uint64_t>(row.duration_ns));
  unpack_kernel_codes(row.codes, out);
  out.set_device(static_cast<uint32_t>(row.device));
  out.set_stream(static_cast<uint32_t>(row.stream));
  out.set_launch_seq(static_cast<uint64_t>(row.launch_seq));
  out.set_correlation_id(static_cast<uint32_t>(row.correlation_id));
  out.set_bytes(static_cast<uint64_t>(row.bytes));
  return resolver.text(row.name, *out.mutable_name());
}

void to_event(const StoredCacheSample& row, v1::CacheSample& out) {
  set_seq_and_ts(row, out);
  out.set_trigger(row.trigger());
  out.set_iteration(static_cast<uint64_t>(row.iteration));
  out.set_live_casts(static_cast<uint64_t>(row.live_casts));
  out.set_live_bytes(static_cast<uint64_t>(row.live_bytes));
  out.set_orphaned_casts(static_cast<uint64_t>(row.orphaned_casts));
  out.set_orphaned_bytes(static_cast<uint64_t>(row.orphaned_bytes));
  out.set_cache_hits(static_cast<uint64_t>(row.cache_hits));
  out.set_released_casts(static_cast<uint64_t>(row.released_casts));
}

namespace {

void read_run(const Statement& r, StoredRun& run) {
  run.row = r.column_int(kRunRow["id"]);
  run.run_id = r.column_text(kRunRow["run_id"]);
  run.first_seen_unix_ns = static_cast<uint64_t>(r.column_int(kRunRow["first_seen_unix_ns"]));
  run.last_seen_unix_ns = static_cast<uint64_t>(r.column_int(kRunRow["last_seen_unix_ns"]));
}

}  // namespace

Status find_run(sqlite3* db, std::string_view run_id, StoredRun& out, bool& found) {
  Statement statement;
  if (Status s = Statement::prepare(db, kRunRow.select_sql() + " WHERE run_id = ?", statement); !s.ok()) return s;
  statement.bind_text(1, run_id);
  Status error;
  found = statement.step(error);
  if (found) read_run(statement, out);
  return error;
}

Status list_runs(sqlite3* db, std::vector<StoredRun>& out) {
  Statement statement;
  if (Status s = Statement::prepare(db, kRunRow.select_sql() + " ORDER BY id", statement); !s.ok()) return s;
  Status error;
  while (statement.step(error)) read_run(statement, out.emplace_back());
  return error;
}

namespace {
// The agents of run row `run` (only `agent_id` when given), `columns` selected, first seen first.
template <size_t N>
Status select_agents(sqlite3* db, const schema::Columns<N>& columns, int64_t run, std::string_view agent_id,
                     Statement& out) {
  const std::string where = agent_id.empty() ? " WHERE run = ? ORDER BY id" : " WHERE run = ? AND agent_id = ? ORDER BY id";
  if (Status s = Statement::prepare(db, columns.select_sql() + where, out); !s.ok()) return s;
  out.bind(1, run);
  if (!agent_id.empty()) out.bind_text(2, agent_id);
  return {};
}
}  // namespace

Status read_agent_keys(sqlite3* db, int64_t run, std::string_view agent_id, std::vector<StoredAgent>& out) {
  static constexpr auto kKeys = schema::columns(schema::kAgents, {"id", "agent_id"});
  Statement agents;
  if (Status s = select_agents(db, kKeys, run, agent_id, agents); !s.ok()) return s;
  Status error;
  while (agents.step(error)) {
    StoredAgent& agent = out.emplace_back();
    agent.row = agents.column_int(kKeys["id"]);
    agent.agent_id = agents.column_text(kKeys["agent_id"]);
  }
  return error;
}

Status columns_in_store(sqlite3* db, const schema::Table& table, const std::string& columns, std::string& out) {
  out = columns;
  for (const schema::LaterColumn& later : schema::kLaterColumns) {
    if (later.table != table.name) continue;
    Statement has_column;
    const std::string sql = "SELECT COUNT(*) FROM pragma_table_info('" + std::string(table.name) + "') WHERE name = ?";
    if (Status s = Statement::prepare(db, sql, has_column); !s.ok()) return s;
    const std::string name(later.column);  // bound, not copied: lives past the step
    has_column.bind_text(1, name);
    Status error;
    const bool present = has_column.step(error) && has_column.column_int(0) > 0;
    if (!error.ok()) return error;
    if (present) continue;
    // "e.float8" among ", "-separated names: the whole name, not a prefix of another.
    std::string rebuilt;
    size_t start = 0;
    while (start <= out.size()) {
      size_t comma = out.find(", ", start);
      if (comma == std::string::npos) comma = out.size();
      std::string item = out.substr(start, comma - start);
      const size_t dot = item.rfind('.');
      if ((dot == std::string::npos ? item : item.substr(dot + 1)) == later.column) item = std::string(later.default_sql);
      rebuilt += (rebuilt.empty() ? "" : ", ") + item;
      start = comma + 2;
    }
    out = std::move(rebuilt);
  }
  return {};
}

namespace {
// Integer column `column` of agents, which a later schema version added: read
// into out[first...] by `take`, or nothing where the store has no such column.
template <typename Take>
Status read_added_agent_column(sqlite3* db, const schema::Columns<1>& column, std::vector<StoredAgent>& out,
                               size_t first, Take take) {
  Statement has_column;
  if (Status s = Statement::prepare(db, "SELECT COUNT(*) FROM pragma_table_info('agents') WHERE name = ?", has_column);
      !s.ok())
    return s;
  const std::string name = column.list_sql();  // bound, not copied: lives past the step
  has_column.bind_text(1, name);
  Status error;
  const bool present = has_column.step(error) && has_column.column_int(0) > 0;
  if (!error.ok() || !present) return error;
  Statement values;
  if (Status s = Statement::prepare(db, column.select_sql() + " WHERE id = ?", values); !s.ok()) return s;
  for (size_t i = first; i < out.size(); ++i) {
    values.reset();
    values.bind(1, out[i].row);
    if (values.step(error)) take(out[i], values.column_int(0));
    if (!error.ok()) return error;
  }
  return {};
}
}  // namespace

Status read_agents(sqlite3* db, int64_t run, std::string_view agent_id, std::vector<StoredAgent>& out) {
  Statement agents;
  if (Status s = select_agents(db, kAgentRow, run, agent_id, agents); !s.ok()) return s;
  const size_t first = out.size();
  Status error;
  while (agents.step(error)) {
    const Statement& a = agents;
    StoredAgent& agent = out.emplace_back();
    agent.row = a.column_int(kAgentRow["id"]);
    agent.agent_id = a.column_text(kAgentRow["agent_id"]);
    agent.pid = static_cast<uint32_t>(a.column_int(kAgentRow["pid"]));
    agent.rank = static_cast<int32_t>(a.column_int(kAgentRow["rank"]));
    agent.local_rank = static_cast<int32_t>(a.column_int(kAgentRow["local_rank"]));
    agent.world_size = static_cast<int32_t>(a.column_int(kAgentRow["world_size"]));
    agent.hostname = a.column_text(kAgentRow["hostname"]);
    agent.torch_version = a.column_text(kAgentRow["torch_version"]);
    agent.command = a.column_text(kAgentRow["command"]);
    agent.policy_hash = a.column_text(kAgentRow["policy_hash"]);
    agent.policy_files = strings_of(a.column_text(kAgentRow["policy_files"]));
    agent.castscope_version = a.column_text(kAgentRow["castscope_version"]);
    agent.finished = a.column_int(kAgentRow["finished"]) != 0;
    agent.batches = static_cast<uint64_t>(a.column_int(kAgentRow["batches"]));
    agent.first_sequence = static_cast<uint64_t>(a.column_int(kAgentRow["first_sequence"]));
    agent.last_sequence = static_cast<uint64_t>(a.column_int(kAgentRow["last_sequence"]));
    agent.events_recorded = static_cast<uint64_t>(a.column_int(kAgentRow["events_recorded_total"]));
    agent.events_dropped = static_cast<uint64_t>(a.column_int(kAgentRow["events_dropped_total"]));
    agent.casts = static_cast<uint64_t>(a.column_int(kAgentRow["casts"]));
    agent.ops = static_cast<uint64_t>(a.column_int(kAgentRow["ops"]));
    agent.cache_samples = static_cast<uint64_t>(a.column_int(kAgentRow["cache_samples"]));
    agent.kernels = static_cast<uint64_t>(a.column_int(kAgentRow["kernels"]));
    agent.gpu_timing = a.column_text(kAgentRow["gpu_timing"]);
    agent.gpu_records_dropped = static_cast<uint64_t>(a.column_int(kAgentRow["gpu_records_dropped"]));
    agent.overlay_errors = strings_of(a.column_text(kAgentRow["overlay_errors"]));
  }
  if (!error.ok() || out.size() == first) return error;

  // agents.aggregate: schema version 13; agents.numerics: 15. A store of
  // 12 to 14 read as it is lacks one or both.
  if (Status s = read_added_agent_column(db, kAgentAggregate, out, first,
                                         [](StoredAgent& agent, int64_t value) { agent.aggregate = value != 0; });
      !s.ok())
    return s;
  return read_added_agent_column(db, kAgentNumerics, out, first, [](StoredAgent& agent, int64_t value) {
    agent.numerics = static_cast<uint64_t>(value);
  });
}

}  // namespace castscope::collector
