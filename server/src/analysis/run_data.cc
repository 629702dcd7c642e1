#include "server/src/analysis/run_data.h"

#include <algorithm>
#include <unordered_map>

#include "common/numerics/no_magnitude.h"
#include "server/src/analysis/conversion_makers.h"
#include "server/src/analysis/kernel_precision.h"
#include "server/src/store/event_columns.h"
#include "server/src/store/row_codec.h"
#include "server/src/store/store_queries.h"
#include "server/src/store/store_schema.h"

namespace castscope::collector {
namespace {

// A location's stack (a JSON array of "file:line function", innermost first)
// whose second frame is the traced Python line that called into TorchScript
// (agent: op_context.cc with_calling_line). Only TorchScript locations made
// while a trace recorded have a stack; any other shape leaves `site` as is.
void called_from(const std::vector<std::string>& frames, SiteRef& site) {
  if (frames.size() != 2) return;
  const std::string& frame = frames[1];
  const size_t space = frame.rfind(' ');
  const size_t colon = space == std::string::npos ? std::string::npos : frame.rfind(':', space);
  if (colon == std::string::npos || colon + 1 >= space) return;
  const std::string line = frame.substr(colon + 1, space - colon - 1);
  if (line.find_first_not_of("0123456789") != std::string::npos || line.size() > 9) return;
  site.called_from_file = frame.substr(0, colon);
  site.called_from_line = static_cast<uint32_t>(std::stoul(line));
  site.called_from_function = frame.substr(space + 1);
}

// Text order with runs of digits compared as numbers: "layers.2" before "layers.10".
bool natural_less(std::string_view a, std::string_view b) {
  size_t i = 0, j = 0;
  while (i < a.size() && j < b.size()) {
    const bool da = a[i] >= '0' && a[i] <= '9', db = b[j] >= '0' && b[j] <= '9';
    if (da && db) {
      size_t ie = i, je = j;
      while (ie < a.size() && a[ie] >= '0' && a[ie] <= '9') ++ie;
      while (je < b.size() && b[je] >= '0' && b[je] <= '9') ++je;
      std::string_view na = a.substr(i, ie - i), nb = b.substr(j, je - j);
      while (na.size() > 1 && na.front() == '0') na.remove_prefix(1);
      while (nb.size() > 1 && nb.front() == '0') nb.remove_prefix(1);
      if (na.size() != nb.size()) return na.size() < nb.size();
      if (na != nb) return na < nb;
      i = ie, j = je;
      continue;
    }
    if (a[i] != b[j]) return a[i] < b[j];
    ++i, ++j;
  }
  return a.size() - i < b.size() - j;
}

// Column lists of the loader's scans (row_codec.h): what the folds read.
constexpr auto kCastRow = schema::columns(
    schema::kCasts,
    {"id", "codes", "op", "arg_name", "location", "bytes", "source_version", "cached_version", "float8", "float8_zero_amax",
     "module", "parameter"});
constexpr auto kOpRow = schema::columns(
    schema::kOps, {"id", "codes", "op", "location", "cpu_duration_ns", "autocast_enabled", "input_dtypes", "gemm"});
constexpr auto kCastCountsRow = kAllColumns<StoredCastCounts>;
constexpr auto kOpCountsRow = kAllColumns<StoredOpCounts>;
constexpr auto kSampleRow =
    schema::columns(schema::kCacheSamples, {"id", "trigger", "iteration", "live_casts", "live_bytes", "orphaned_casts",
                                            "orphaned_bytes", "cache_hits", "released_casts"});

// What tells two site rows apart: everything but the cache outcome and phase
// (and for compile-time decisions, the phase too: compile-mismatch reads it).
int64_t site_codes(int64_t codes) {
  const int64_t cache_and_after = ~((int64_t{1} << (kCastCache * kCodeBits)) - 1);
  const int64_t mode_bits = int64_t{kCodeLimit - 1} << (kCastMode * kCodeBits);
  const int64_t phase_bits = int64_t{kCodeLimit - 1} << (kCastPhase * kCodeBits);
  const auto maker_bits = static_cast<int64_t>(kCastMakerField.mask() << kCastMakerField.shift);
  const bool compiling = CastCodes{codes}.mode() == v1::EXECUTION_MODE_COMPILING;
  return codes & (~cache_and_after | mode_bits | maker_bits | (compiling ? phase_bits : 0));
}

// Whether autocast was on for an op: for its device, or for any device when
// the op names none (a compiled graph's run).
bool autocast_on(int64_t enabled_devices, int device) {
  return device == v1::DEVICE_TYPE_UNSPECIFIED ? enabled_devices != 0 : ((enabled_devices >> device) & 1) != 0;
}

class RunDataLoader {
 public:
  RunDataLoader(Database& db, RunData& out, const std::function<void()>& between_reads, std::optional<int32_t> rank,
         const ReadProgress& progress)
      : db_(db), out_(out), between_reads_(between_reads), rank_filter_(rank), progress_(progress) {}

  Status run(const std::string& run_id) {
    StoredRun run;
    bool found = false;
    if (Status s = find_run(db_.handle(), run_id, run, found); !s.ok()) return s;
    if (!found) return Status::not_found("no run \"" + run_id + "\" in " + db_.path());
    out_.run_id = run_id;
    out_.first_seen_unix_ns = run.first_seen_unix_ns;
    out_.last_seen_unix_ns = run.last_seen_unix_ns;

    // A store of schema version 12 (read-only, not upgraded) has no counter
    // tables and no agents.aggregate: no agent of it ran in aggregate mode.
    if (Status s = table_exists(db_.handle(), schema::kCastCounts, has_counters_); !s.ok()) return s;
    if (Status s = table_exists(db_.handle(), schema::kNumerics, has_numerics_); !s.ok()) return s;
    std::vector<StoredAgent> agents;
    if (Status s = read_agents(db_.handle(), run.row, "", agents); !s.ok()) return s;
    std::set<int32_t> other_ranks;  // with a rank filter: the ranks left out, for the error
    for (StoredAgent& agent : agents) {
      if (rank_filter_ && agent.rank != *rank_filter_) {
        if (agent.rank >= 0) other_ranks.insert(agent.rank);
        continue;
      }
      rows_total_ += agent.casts + agent.ops;
      out_.aggregate = out_.aggregate || agent.aggregate;
      out_.agents.push_back(std::move(agent));
    }
    if (rank_filter_ && out_.agents.empty()) {
      std::string ranks;
      for (int32_t r : other_ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      return Status::not_found("run \"" + run_id + "\" has no process of rank " + std::to_string(*rank_filter_) +
                               (ranks.empty() ? " (its processes set no RANK)" : " (its ranks: " + ranks + ")"));
    }
    for (size_t i = 0; i < out_.agents.size(); ++i) {
      agent_index_ = i;
      agent_rank_ = out_.agents[i].rank;
      const int64_t first = first_row_of(out_.agents[i].row), end = end_row_of(out_.agents[i].row);
      if (Status s = in_chunks(schema::kCasts, first, end, &RunDataLoader::read_casts); !s.ok()) return s;
      if (Status s = in_chunks(schema::kOps, first, end, &RunDataLoader::read_ops); !s.ok()) return s;
      if (has_counters_) {
        if (Status s = in_chunks(schema::kCastCounts, first, end, &RunDataLoader::read_cast_counts); !s.ok()) return s;
        if (Status s = in_chunks(schema::kOpCounts, first, end, &RunDataLoader::read_op_counts); !s.ok()) return s;
      }
      if (Status s = read_samples(first, end, out_.agents[i].agent_id); !s.ok()) return s;
      if (has_numerics_)
        if (Status s = read_numerics(first, end, out_.agents[i]); !s.ok()) return s;
      if (out_.agents[i].kernels > 0)
        if (Status s = read_gpu_time(first, end); !s.ok()) return s;
    }
    for (auto& [key, row] : gpu_sites_) out_.gpu_sites.push_back(std::move(row));
    for (auto& [key, row] : gemm_exact_) out_.gemm_exact.push_back(std::move(row));
    for (auto& [key, row] : gemm_kernels_) (key.launched ? out_.gemm_kernels : out_.gemm_unattributed).push_back(row.row);
    for (auto& [key, row] : sites_) {
      auto& rows = row.mode == v1::EXECUTION_MODE_COMPILING ? out_.compile_decisions
                   : autocast_decision(row.maker, row.policy) ? out_.sites
                                                              : out_.conversions;
      rows.push_back(std::move(row));
    }
    // By module name ("<Root>.layers.2" before "<Root>.layers.10"), the module's own row before its parameters'.
    for (auto& [key, row] : precision_) out_.precision_map.push_back(std::move(row));
    std::sort(out_.precision_map.begin(), out_.precision_map.end(), [](const PrecisionRow& a, const PrecisionRow& b) {
      if (a.module != b.module) return natural_less(a.module, b.module);
      return a.parameter < b.parameter;
    });
    for (const CacheSampleRow& sample : out_.cache_samples)
      out_.optimizer_steps = std::max(out_.optimizer_steps, sample.iteration);
    for (auto& [key, row] : ops_) out_.ops.push_back(std::move(row));
    for (auto& [key, row] : backward_) out_.backward_ops.push_back(std::move(row));
    for (auto& [key, row] : probes_) out_.probe_ops.push_back(std::move(row));
    for (auto& [key, row] : site_dtypes_) out_.site_dtypes.push_back(std::move(row));
    for (auto& [key, row] : numerics_) out_.numerics_sites.push_back(std::move(row));
    return Status();
  }

 private:
  // The rank of the agent being read, once per row and agent: rows are read
  // agent after agent, so one comparison per event keeps this cheap.
  template <typename Row>
  void note_rank(Row& row) {
    if (row.last_agent == agent_index_) return;
    row.last_agent = agent_index_;
    row.ranks.insert(agent_rank_);
  }

  // Ids per read. Each read is its own SQLite read transaction: the live
  // analyzer re-reading a big run beside a busy collector never pins the WAL
  // long enough to hold up its checkpoints (and with them, ingest).
  static constexpr int64_t kChunkIds = int64_t{1} << 17;
  bool has_counters_ = false;  // the store has the counter tables (schema version 13)
  bool has_numerics_ = false;  // the store has the numerics table (schema version 15)
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t>, NumericsSiteRow> numerics_;

  Status in_chunks(const schema::Table& table, int64_t first, int64_t end,
                   Status (RunDataLoader::*read)(int64_t, int64_t)) {
    std::optional<int64_t> last;
    if (Status s = last_row_in(db_.handle(), table, first, end, last); !s.ok()) return s;
    if (!last) return Status();  // nothing in range
    const int64_t stop = *last + 1;
    for (int64_t from = first; from < stop; from += kChunkIds) {
      if (between_reads_) between_reads_();
      if (Status s = (this->*read)(from, std::min(stop, from + kChunkIds)); !s.ok()) return s;
      if (progress_) progress_(rows_read_, rows_total_);
    }
    return Status();
  }

  // GPU time of one agent's kernels (ids first..end), by what launched them
  // (store_queries.h).
  Status read_gpu_time(int64_t first, int64_t end) {
    for (const v1::LaunchedBy by : {v1::LAUNCHED_BY_CAST, v1::LAUNCHED_BY_OP}) {
      std::vector<LaunchedKernelTime> times;
      if (Status s = kernel_time_by_launcher(db_.handle(), first, end, by, times, out_.gpu_unjoined_ns); !s.ok())
        return s;
      for (const LaunchedKernelTime& time : times) {
        const auto key = std::make_tuple(time.location, time.op);
        auto [it, inserted] = gpu_sites_.try_emplace(key);
        GpuSiteRow& row = it->second;
        if (inserted)
          if (Status s = site_ref(time.location, time.op, 0, row.site); !s.ok()) return s;
        if (by == v1::LAUNCHED_BY_CAST) {
          row.cast_ns += time.ns;
          row.cast_kernels += time.kernels;
          out_.gpu_cast_ns += time.ns;
        } else {
          row.compute_ns += time.ns;
          row.compute_kernels += time.kernels;
          out_.gpu_compute_ns += time.ns;
          if (time.activity == v1::GPU_ACTIVITY_KERNEL)
            if (Status s = add_gemm_kernels(&row.site, key, time.name, time.ns, time.kernels); !s.ok()) return s;
        }
      }
    }
    // GEMM kernels launched outside autocast ops, by name.
    std::vector<LaunchedKernelTime> unlaunched;
    if (Status s = unlaunched_kernel_time_by_name(db_.handle(), first, end, unlaunched); !s.ok()) return s;
    for (const LaunchedKernelTime& time : unlaunched)
      if (Status s = add_gemm_kernels(nullptr, {0, 0}, time.name, time.ns, time.kernels); !s.ok()) return s;
    if (Status s = unattributed_kernel_ns(db_.handle(), first, end, out_.gpu_unattributed_ns); !s.ok()) return s;
    return Status();
  }

  // Kernels of one name, launched by the op at `site` (nullptr: outside
  // autocast ops), into the GEMM rows when the name reads as a GEMM.
  Status add_gemm_kernels(const SiteRef* site, std::tuple<int64_t, int64_t> site_key, int64_t name_id, uint64_t ns,
                          uint64_t kernels) {
    auto [reading, unread] = kernel_readings_.try_emplace(name_id);
    if (unread) {
      std::string name;
      if (Status s = text(name_id, name); !s.ok()) return s;
      reading->second.precision = gpu::classify_kernel(name);
      reading->second.name = std::move(name);
    }
    const gpu::GemmPrecision& precision = reading->second.precision;
    if (!precision.is_gemm) return Status();
    const GemmKey key{site != nullptr, std::get<0>(site_key), std::get<1>(site_key), precision.inputs,
                      precision.accumulate, precision.tensor_cores, precision.confidence};
    auto [it, inserted] = gemm_kernels_.try_emplace(key);
    GemmKernelRows& rows = it->second;
    GemmKernelRow& row = rows.row;
    if (inserted) {
      if (site != nullptr) row.site = *site;
      row.inputs = precision.inputs;
      row.accumulate = precision.accumulate;
      row.confidence = precision.confidence;
      row.tensor_cores = precision.tensor_cores;
    }
    row.kernels += kernels;
    row.gpu_ns += ns;
    if (uint64_t& of_name = rows.ns_by_name[name_id]; (of_name += ns) > rows.example_ns || row.example.empty()) {
      rows.example_ns = of_name;
      row.example = reading->second.name;
      row.why = precision.why;
    }
    return Status();
  }

  // Calls fold(row) for each row of Row's table (kColumns decoded) whose id
  // is in [first, end); stops at the first error.
  template <typename Row, const auto& kColumns, typename Fold>
  Status fold_rows(int64_t first, int64_t end, Fold&& fold) {
    RowScan<Row, kColumns> rows;
    // In id order: a site's first_seq is the first row read of it.
    if (Status s = rows.open(db_.handle(), first, end, " ORDER BY id"); !s.ok()) return s;
    Row row;
    Status error;
    while (rows.next(row, error)) {
      ++rows_read_;
      if (Status s = fold(row); !s.ok()) return s;
    }
    return error;
  }

  Status read_casts(int64_t first, int64_t end) {
    return fold_rows<StoredCast, kCastRow>(first, end, [&](const StoredCast& cast) {
      const auto bytes = static_cast<uint64_t>(cast.bytes);
      const bool round_trip = CastCodes{cast.codes}.round_trip();
      if (cast.module != 0 || cast.parameter != 0)
        if (Status s = fold_precision(cast.module, cast.parameter, cast.codes, cast.location, bytes); !s.ok()) return s;
      return fold_cast({cast.location, cast.op, cast.arg_name, cast.codes, cast.id, cast.float8, cast.float8_zero_amax},
                       1, bytes, cast.source_version - cast.cached_version, round_trip ? 1 : 0,
                       round_trip ? bytes : 0);
    });
  }

  // Aggregate mode: each row is `count` decisions of one key (CastCounts).
  Status read_cast_counts(int64_t first, int64_t end) {
    return fold_rows<StoredCastCounts, kCastCountsRow>(first, end, [&](const StoredCastCounts& counts) {
      const auto count = static_cast<uint64_t>(counts.count);
      const auto bytes = static_cast<uint64_t>(counts.bytes);
      const auto round_trips = static_cast<uint64_t>(counts.round_trips);
      // Round trips' bytes are not counted apart: an even share of the counter's.
      const uint64_t round_trip_bytes = count == 0 ? 0 : bytes / count * round_trips;
      return fold_cast({counts.location, counts.op, counts.arg_name, counts.codes, counts.id}, count, bytes,
                       counts.max_version_gap, round_trips, round_trip_bytes);
    });
  }

  // One cast into its module's (or parameter's) precision row.
  Status fold_precision(int64_t module, int64_t parameter, int64_t codes, int64_t location, uint64_t bytes) {
    // torch.compile's trace-time decisions (fake tensors) converted nothing.
    if (CastCodes{codes}.mode() == v1::EXECUTION_MODE_COMPILING) return Status();
    auto [it, inserted] = precision_.try_emplace(std::make_pair(module, parameter));
    PrecisionRow& row = it->second;
    if (inserted) {
      if (Status s = text(module, row.module); !s.ok()) return s;
      if (Status s = text(parameter, row.parameter); !s.ok()) return s;
    }
    const CastCodes cast{codes};
    const v1::CastMaker maker = cast.maker();
    const bool decision = autocast_decision(maker, cast.policy());
    if (decision) {
      switch (cast.outcome()) {  // the op computed in dst (not: float64, not floating, another device, dtype kept)
        case v1::CAST_OUTCOME_CAST:
        case v1::CAST_OUTCOME_ALREADY_TARGET:
        case v1::CAST_OUTCOME_RELABELLED:
        case v1::CAST_OUTCOME_DTYPE_ARG_SET: row.computed.insert(cast.dst_dtype()); break;
        default: break;
      }
    }
    const v1::CacheOutcome cache = cast.cache();
    const bool converted = cast.outcome() == v1::CAST_OUTCOME_CAST && cache != v1::CACHE_OUTCOME_HIT &&
                           cache != v1::CACHE_OUTCOME_STALE_HIT;
    if (!row.parameter.empty() && (decision || converted)) row.stored.insert(cast.src_dtype());
    if (!converted) return Status();
    row.cast_to.insert(cast.dst_dtype());
    if (maker == v1::CAST_MAKER_FSDP) row.communicated.insert(cast.dst_dtype());
    // Named as the report's conversions_by_maker names it: an explicit cast by its line's library.
    const StoredLocation* site = nullptr;
    if (maker == v1::CAST_MAKER_EXPLICIT)
      if (Status s = resolver_.location(location, site); !s.ok()) return s;
    row.bytes_by_maker[maker_label(maker, site != nullptr ? std::string_view(site->file) : std::string_view())] += bytes;
    ++row.conversions;
    return Status();
  }

  struct CastKey {
    int64_t location, op, arg_name, codes, row_id;
    int64_t float8 = 0, float8_zero_amax = 0;  // casts.float8 (events mode only)
  };

  static void fold_float8(int64_t packed, int64_t zero_amax, Float8Span& span) {
    if (packed == 0 && zero_amax == 0) return;
    ++span.scaled;
    if (zero_amax > 0) ++span.zero_amax_casts;
    const auto extreme = [](int32_t value, int32_t& low, int32_t& high) {
      if (value == kNoMagnitude) return;
      low = std::min(low, value);
      high = std::max(high, value);
    };
    extreme(float8_field(packed, kFloat8ScaleMin), span.scale_log2_min, span.scale_log2_max);
    extreme(float8_field(packed, kFloat8ScaleMax), span.scale_log2_min, span.scale_log2_max);
    extreme(float8_field(packed, kFloat8AmaxMin), span.amax_log2_min, span.amax_log2_max);
    extreme(float8_field(packed, kFloat8AmaxMax), span.amax_log2_min, span.amax_log2_max);
  }

  // `count` decisions of one key with their source bytes summed; `version_gap`
  // the largest on stale hits.
  Status fold_cast(const CastKey& cast, uint64_t count, uint64_t bytes, int64_t version_gap, uint64_t round_trips,
                   uint64_t round_trip_bytes) {
    const int64_t codes = cast.codes;
    {
      const auto key = std::make_tuple(cast.location, cast.op, cast.arg_name, site_codes(codes));
      auto [it, inserted] = sites_.try_emplace(key);
      SiteRow& row = it->second;
      if (inserted) {
        if (Status s = site_ref(std::get<0>(key), std::get<1>(key), std::get<2>(key), row.site); !s.ok()) return s;
        row.policy = CastCodes{codes}.policy();
        row.src = CastCodes{codes}.src_dtype();
        row.dst = CastCodes{codes}.dst_dtype();
        row.outcome = CastCodes{codes}.outcome();
        row.device = CastCodes{codes}.device_type();
        row.role = CastCodes{codes}.role();
        row.mode = CastCodes{codes}.mode();
        row.maker = CastCodes{codes}.maker();
        row.first_seq = seq_of_row(cast.row_id);
      }
      row.count += count;
      note_rank(row);
      if (row.outcome == v1::CAST_OUTCOME_CAST) row.bytes += bytes;
      const v1::CacheOutcome cache = CastCodes{codes}.cache();
      if (row.outcome == v1::CAST_OUTCOME_CAST &&
          (cache == v1::CACHE_OUTCOME_HIT || cache == v1::CACHE_OUTCOME_STALE_HIT))
        row.served_bytes += bytes;
      switch (cache) {
        case v1::CACHE_OUTCOME_HIT: row.hits += count; break;
        case v1::CACHE_OUTCOME_MISS: row.misses += count; break;
        case v1::CACHE_OUTCOME_STALE_HIT:
          row.stale_hits += count;
          row.max_version_gap = std::max(row.max_version_gap, version_gap);
          break;
        default: break;
      }
      if (CastCodes{codes}.phase() == v1::PHASE_BACKWARD) row.backward += count;
      row.round_trips += round_trips;
      row.round_trip_bytes += round_trip_bytes;
      fold_float8(cast.float8, cast.float8_zero_amax, row.float8);
    }
    return Status();
  }

  Status read_ops(int64_t first, int64_t end) {
    return fold_rows<StoredOp, kOpRow>(first, end, [&](const StoredOp& op) {
      const bool failed = OpCodes{op.codes}.outcome() == v1::OP_OUTCOME_ERROR;
      return fold_op({op.codes, op.op, op.location, op.id, op.autocast_enabled, op.input_dtypes, op.gemm}, 1,
                     failed ? 1 : 0, static_cast<uint64_t>(op.cpu_duration_ns));
    });
  }

  // Aggregate mode: each row is `calls` calls of one op at one site (OpCounts).
  Status read_op_counts(int64_t first, int64_t end) {
    return fold_rows<StoredOpCounts, kOpCountsRow>(first, end, [&](const StoredOpCounts& counts) {
      return fold_op({counts.codes, counts.op, counts.location, counts.id, counts.autocast_enabled, 0, 0},
                     static_cast<uint64_t>(counts.calls), static_cast<uint64_t>(counts.errors),
                     static_cast<uint64_t>(counts.cpu_duration_ns));
    });
  }

  struct OpKey {
    int64_t codes, op, location, row_id, autocast_enabled, input_dtypes, gemm;
  };

  // `calls` calls of one op with one key, `errors` of them raised.
  Status fold_op(const OpKey& o, uint64_t calls, uint64_t errors, uint64_t cpu_ns) {
    const int64_t codes = o.codes;
    const int64_t op = o.op, location = o.location;
    const auto policy = OpCodes{codes}.policy();
    if (const int64_t gemm = o.gemm; gemm != 0) {
      // Probe ops too: an out= matmul under autocast ran its own GEMMs.
      auto [g, first] = gemm_exact_.try_emplace(std::make_tuple(location, op, gemm_kind(gemm)));
      GemmExactRow& row = g->second;
      if (first) {
        if (Status s = site_ref(location, op, 0, row.site); !s.ok()) return s;
        row.compute = static_cast<v1::GemmCompute>(gemm_field(gemm, 0));
        row.a_type = static_cast<v1::DType>(gemm_field(gemm, 1));
        row.b_type = static_cast<v1::DType>(gemm_field(gemm, 2));
        row.d_type = static_cast<v1::DType>(gemm_field(gemm, 3));
      }
      row.ops += calls;
      row.matmuls += static_cast<uint64_t>(gemm_field(gemm, 4));
      row.mixed += gemm_field(gemm, 5) != 0 ? 1 : 0;
    }
    const v1::ProbeReason reason = OpCodes{codes}.probe_reason();
    const int mode = OpCodes{codes}.mode();
    const int device = OpCodes{codes}.device_type();
    const bool autocast = autocast_on(o.autocast_enabled, device);
    if (mode == v1::EXECUTION_MODE_COMPILED) {
      // A run of a compiled graph: not an autocast op. Run in backward with
      // autocast on, it is what backward-under-autocast looks for.
      out_.compiled_graph_runs += calls;
      if (OpCodes{codes}.phase() == v1::PHASE_BACKWARD && autocast)
        if (Status s = add_backward(location, op, o.row_id, calls); !s.ok()) return s;
      return Status();
    }
    if (location != 0 && OpCodes{codes}.phase() != v1::PHASE_BACKWARD &&
        (reason == v1::PROBE_REASON_DTYPES || (reason == v1::PROBE_REASON_UNSPECIFIED && policy != v1::CAST_POLICY_UNSPECIFIED))) {
      const int autocast_dtype = OpCodes{codes}.autocast_dtype();
      auto [d, first] = site_dtypes_.try_emplace(std::make_tuple(location, op, mode, autocast, autocast_dtype));
      SiteDtypeRow& row = d->second;
      if (first) {
        if (Status s = site_ref(location, op, 0, row.site); !s.ok()) return s;
        row.mode = static_cast<v1::ExecutionMode>(mode);
        row.autocast = autocast;
        row.autocast_dtype = static_cast<v1::DType>(autocast_dtype);
        row.first_seq = seq_of_row(o.row_id);
      }
      row.probe_only &= reason == v1::PROBE_REASON_DTYPES;
      note_rank(row);
      row.output_dtypes.insert(OpCodes{codes}.output_dtype());
    }
    if (reason == v1::PROBE_REASON_DTYPES) return Status();  // the probe's, not an autocast op
    // Compile-time records (FakeTensor arguments) feed no run-time table.
    if (mode == v1::EXECUTION_MODE_COMPILING) return Status();
    if (reason != v1::PROBE_REASON_UNSPECIFIED) {
      auto [p, first] = probes_.try_emplace(std::make_tuple(location, op, reason));
      ProbeOpRow& row = p->second;
      if (first) {
        if (Status s = site_ref(location, op, 0, row.site); !s.ok()) return s;
        row.reason = static_cast<v1::ProbeReason>(reason);
        row.device = OpCodes{codes}.device_type();
        row.first_seq = seq_of_row(o.row_id);
      }
      row.calls += calls;
      note_rank(row);
      v1::OpEvent unpacked;
      unpack_input_dtypes(o.input_dtypes, unpacked);  // 0 from counters: they keep no input dtypes
      for (int dtype : unpacked.input_dtypes()) row.input_dtypes.insert(static_cast<v1::DType>(dtype));
      row.output_dtypes.insert(OpCodes{codes}.output_dtype());
      return Status();  // not an autocast op: kept out of the per-op table
    }
    if (policy == v1::CAST_POLICY_UNSPECIFIED && OpCodes{codes}.mode() == v1::EXECUTION_MODE_TRACE_RECORDING &&
        o.autocast_enabled == 0) {
      // Not an autocast op: the trace observer saw it run with autocast off.
      SiteRef site;
      if (Status s = site_ref(location, op, 0, site); !s.ok()) return s;
      out_.traced_with_autocast_off.insert({site.file, site.line, site.op});
      return Status();
    }
    auto [it, inserted] = ops_.try_emplace(std::make_pair(op, static_cast<int>(policy)));
    OpRow& row = it->second;
    if (inserted) {
      if (Status s = text(op, row.op); !s.ok()) return s;
      row.policy = policy;
    }
    row.calls += calls;
    row.errors += errors;
    row.cpu_time_ns += cpu_ns;
    row.output_dtypes[OpCodes{codes}.output_dtype()] += calls;
    if (OpCodes{codes}.phase() == v1::PHASE_BACKWARD)
      if (Status s = add_backward(location, op, o.row_id, calls); !s.ok()) return s;
    return Status();
  }

  Status add_backward(int64_t location, int64_t op, int64_t row_id, uint64_t calls) {
    auto [b, first] = backward_.try_emplace(std::make_pair(location, op));
    if (first) {
      if (Status s = site_ref(location, op, 0, b->second.site); !s.ok()) return s;
      b->second.first_seq = seq_of_row(row_id);
    }
    b->second.calls += calls;
    note_rank(b->second);
    return Status();
  }

  Status read_samples(int64_t first, int64_t end, const std::string& agent_id) {
    RowScan<StoredCacheSample, kSampleRow> samples;
    if (Status s = samples.open(db_.handle(), first, end); !s.ok()) return s;
    StoredCacheSample sample;
    Status error;
    while (samples.next(sample, error)) {
      const auto live_casts = static_cast<uint64_t>(sample.live_casts);
      const auto live_bytes = static_cast<uint64_t>(sample.live_bytes);
      out_.max_live_casts = std::max(out_.max_live_casts, live_casts);
      out_.max_live_bytes = std::max(out_.max_live_bytes, live_bytes);
      CacheSampleRow& row = out_.cache_samples.emplace_back();
      row.agent_id = agent_id;
      row.iteration = static_cast<uint64_t>(sample.iteration);
      row.live_casts = live_casts;
      row.live_bytes = live_bytes;
      row.trigger = sample.trigger();
      row.seq = sample.seq();
      row.orphaned_casts = static_cast<uint64_t>(sample.orphaned_casts);
      row.orphaned_bytes = static_cast<uint64_t>(sample.orphaned_bytes);
      row.cache_hits = static_cast<uint64_t>(sample.cache_hits);
      row.released_casts = static_cast<uint64_t>(sample.released_casts);
    }
    return error;
  }

  // Numerics summaries: sites folded across windows and threads, the
  // process's first non-finite value, its GradScaler updates in order.
  Status read_numerics(int64_t first, int64_t end, const StoredAgent& agent) {
    RowScan<StoredNumerics> rows;
    if (Status s = rows.open(db_.handle(), first, end); !s.ok()) return s;
    StoredNumerics n;
    Status error;
    FirstNonfinite earliest;
    while (rows.next(n, error)) {
      if (n.kind() == v1::NumericsSummary::KIND_SCALER_UPDATE) {
        ScalerUpdateRow& update = out_.scaler_updates.emplace_back();
        update.agent_id = agent.agent_id;
        update.rank = agent.rank;
        update.seq = n.seq();
        update.iteration = static_cast<uint64_t>(n.iteration);
        update.updates = static_cast<uint64_t>(n.tensors);
        update.scale = n.scale();
        update.found_inf = n.found_inf != 0;
        if (Status s = site_ref(n.location, 0, 0, update.site); !s.ok()) return s;
        continue;
      }
      const auto key =
          std::make_tuple(n.location, n.op, n.arg_name, n.kind(), n.src_dtype(), n.dst_dtype(), n.phase(), n.mode());
      auto [it, inserted] = numerics_.try_emplace(key);
      NumericsSiteRow& row = it->second;
      if (inserted) {
        if (Status s = site_ref(n.location, n.op, n.arg_name, row.site); !s.ok()) return s;
        row.kind = n.kind();
        row.src = n.src_dtype();
        row.dst = n.dst_dtype();
        row.mode = n.mode();
        row.phase = n.phase();
        row.device = n.device_type();
      }
      ++row.windows;
      row.tensors += static_cast<uint64_t>(n.tensors);
      row.values += static_cast<uint64_t>(n.value_count);
      row.overflowed += static_cast<uint64_t>(n.overflowed);
      row.underflowed += static_cast<uint64_t>(n.underflowed);
      row.nonfinite += static_cast<uint64_t>(n.nonfinite);
      row.nan += static_cast<uint64_t>(n.nan);
      row.saturated += static_cast<uint64_t>(n.saturated);
      row.max_abs_log2 = std::max(row.max_abs_log2, static_cast<int32_t>(n.max_abs_log2));
      note_rank(row);
      const auto seq = static_cast<uint64_t>(n.first_nonfinite_seq);
      if (seq != 0 && (earliest.seq == 0 || seq < earliest.seq)) {
        earliest.seq = seq;
        earliest.iteration = static_cast<uint64_t>(n.iteration);
        earliest.kind = row.kind;
        earliest.site = row.site;
      }
    }
    if (earliest.seq != 0) {
      earliest.agent_id = agent.agent_id;
      earliest.rank = agent.rank;
      out_.first_nonfinite.push_back(std::move(earliest));
    }
    return error;
  }

  Status text(int64_t id, std::string& out) { return resolver_.text(id, out); }

  Status site_ref(int64_t location_id, int64_t op, int64_t arg, SiteRef& out) {
    if (Status s = text(op, out.op); !s.ok()) return s;
    if (Status s = text(arg, out.arg); !s.ok()) return s;
    const StoredLocation* location = nullptr;
    if (Status s = resolver_.location(location_id, location); !s.ok() || location == nullptr) return s;
    out.file = location->file;
    out.line = location->line;
    out.function = location->function;
    out.inside_disabled_autocast = location->inside_disabled_autocast;
    if (location->kind == v1::SourceLocation::KIND_TORCHSCRIPT) called_from(location->stack, out);
    return Status();
  }

  Database& db_;
  RunData& out_;
  const std::function<void()>& between_reads_;
  const std::optional<int32_t> rank_filter_;
  size_t agent_index_ = 0;  // the agent whose events are being read
  int32_t agent_rank_ = -1;
  const ReadProgress& progress_;
  uint64_t rows_read_ = 0, rows_total_ = 0;  // casts and ops: what progress_ is told
  std::map<std::tuple<int64_t, int64_t, int64_t, int64_t>, SiteRow> sites_;  // location, op, arg, codes
  std::map<std::pair<int64_t, int>, OpRow> ops_;
  std::map<std::pair<int64_t, int64_t>, BackwardOpRow> backward_;  // location, op
  std::map<std::tuple<int64_t, int64_t, int>, ProbeOpRow> probes_;  // location, op, reason
  // location, op, mode, autocast on, autocast dtype
  std::map<std::tuple<int64_t, int64_t, int, bool, int>, SiteDtypeRow> site_dtypes_;
  std::map<std::tuple<int64_t, int64_t>, GpuSiteRow> gpu_sites_;     // location, op
  // location, op, the description's compute and types (calls and mixed are counted)
  std::map<std::tuple<int64_t, int64_t, int64_t>, GemmExactRow> gemm_exact_;
  struct KernelReading {
    std::string name;
    gpu::GemmPrecision precision;
  };
  std::unordered_map<int64_t, KernelReading> kernel_readings_;  // by name id: each name read once
  struct GemmKey {
    bool launched;  // by an autocast op at location, op; else outside them
    int64_t location, op;
    std::string inputs, accumulate;
    bool tensor_cores;
    std::string confidence;
    auto operator<=>(const GemmKey&) const = default;
  };
  struct GemmKernelRows {
    GemmKernelRow row;
    std::map<int64_t, uint64_t> ns_by_name;  // picks the example
    uint64_t example_ns = 0;
  };
  std::map<GemmKey, GemmKernelRows> gemm_kernels_;
  StoreResolver resolver_{db_.handle()};
  std::map<std::pair<int64_t, int64_t>, PrecisionRow> precision_;  // (module, parameter) string ids
};

}  // namespace

Status load_run_data(Database& db, const std::string& run_id, RunData& out,
                     const std::function<void()>& between_reads, std::optional<int32_t> rank,
                     const ReadProgress& progress) {
  out = RunData();
  return RunDataLoader(db, out, between_reads, rank, progress).run(run_id);
}

}  // namespace castscope::collector
