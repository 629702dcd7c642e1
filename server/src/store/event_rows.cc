#include "server/src/store/event_rows.h"

#include <sqlite3.h>

#include "server/src/store/event_columns.h"
#include "server/src/store/row_codec.h"
#include "server/src/store/store_schema.h"

namespace castscope::collector {
namespace {

namespace v1 = castscope::v1;


}  // namespace

void bind_cast_row(Statement& s, int p, const PendingRow& pending) {
  const v1::CastEvent& c = pending.event->cast();
  s.bind(p + kCastRow["id"], pending.id);
  s.bind(p + kCastRow["ts_ns"], static_cast<int64_t>(c.ts_ns()));
  s.bind(p + kCastRow["op"], pending.op);
  s.bind(p + kCastRow["arg_name"], pending.arg_name);
  s.bind(p + kCastRow["slot"], pack_cast_slot(c));
  s.bind(p + kCastRow["codes"], pack_cast_codes(c));
  if (c.shape_size() == 0)
    sqlite3_bind_null(s.get(), p + kCastRow["shape"]);
  else
    sqlite3_bind_blob(s.get(), p + kCastRow["shape"], c.shape().data(), c.shape_size() * 8, SQLITE_STATIC);
  s.bind(p + kCastRow["bytes"], static_cast<int64_t>(c.bytes()));
  s.bind(p + kCastRow["op_seq"], static_cast<int64_t>(c.op_seq()));
  s.bind(p + kCastRow["source_version"], c.source_version());
  s.bind(p + kCastRow["cached_version"], c.cached_version());
  s.bind(p + kCastRow["location"], pending.location);
}

void bind_op_row(Statement& s, int p, const PendingRow& pending) {
  const v1::OpEvent& o = pending.event->op();
  s.bind(p + kOpRow["id"], pending.id);
  s.bind(p + kOpRow["ts_ns"], static_cast<int64_t>(o.ts_ns()));
  s.bind(p + kOpRow["thread"], o.thread());
  s.bind(p + kOpRow["op"], pending.op);
  s.bind(p + kOpRow["codes"], pack_op_codes(o));
  s.bind(p + kOpRow["input_dtypes"], pack_input_dtypes(o));
  s.bind(p + kOpRow["cpu_duration_ns"], static_cast<int64_t>(o.cpu_duration_ns()));
  s.bind(p + kOpRow["location"], pending.location);
  s.bind(p + kOpRow["autocast_enabled"], pack_device_mask(o));
  s.bind(p + kOpRow["autocast_nesting"], o.autocast_nesting());
  s.bind(p + kOpRow["gemm"], pack_gemm(o));
}

void bind_cache_sample_row(Statement& s, int p, const PendingRow& pending) {
  const v1::CacheSample& sample = pending.event->cache_sample();
  s.bind(p + kSampleRow["id"], pending.id);
  s.bind(p + kSampleRow["ts_ns"], static_cast<int64_t>(sample.ts_ns()));
  s.bind(p + kSampleRow["trigger"], sample.trigger());
  s.bind(p + kSampleRow["iteration"], static_cast<int64_t>(sample.iteration()));
  s.bind(p + kSampleRow["live_casts"], static_cast<int64_t>(sample.live_casts()));
  s.bind(p + kSampleRow["live_bytes"], static_cast<int64_t>(sample.live_bytes()));
  s.bind(p + kSampleRow["orphaned_casts"], static_cast<int64_t>(sample.orphaned_casts()));
  s.bind(p + kSampleRow["orphaned_bytes"], static_cast<int64_t>(sample.orphaned_bytes()));
  s.bind(p + kSampleRow["cache_hits"], static_cast<int64_t>(sample.cache_hits()));
  s.bind(p + kSampleRow["released_casts"], static_cast<int64_t>(sample.released_casts()));
}

void bind_kernel_row(Statement& s, int p, const PendingRow& pending) {
  const v1::KernelEvent& k = pending.event->kernel();
  s.bind(p + kKernelRow["id"], pending.id);
  s.bind(p + kKernelRow["ts_ns"], static_cast<int64_t>(k.ts_ns()));
  s.bind(p + kKernelRow["duration_ns"], static_cast<int64_t>(k.duration_ns()));
  s.bind(p + kKernelRow["name"], pending.op);
  s.bind(p + kKernelRow["codes"], pack_kernel_codes(k));
  s.bind(p + kKernelRow["device"], k.device());
  s.bind(p + kKernelRow["stream"], k.stream());
  s.bind(p + kKernelRow["launch_seq"], static_cast<int64_t>(k.launch_seq()));
  s.bind(p + kKernelRow["bytes"], static_cast<int64_t>(k.bytes()));
  s.bind(p + kKernelRow["correlation_id"], k.correlation_id());
}

void bind_cast_counts_row(Statement& s, int p, const PendingRow& pending) {
  const v1::CastCounts& c = pending.event->cast_counts();
  s.bind(p + kCastCountsRow["id"], pending.id);
  s.bind(p + kCastCountsRow["first_ts_ns"], static_cast<int64_t>(c.first_ts_ns()));
  s.bind(p + kCastCountsRow["last_ts_ns"], static_cast<int64_t>(c.last_ts_ns()));
  s.bind(p + kCastCountsRow["thread"], c.thread());
  s.bind(p + kCastCountsRow["op"], pending.op);
  s.bind(p + kCastCountsRow["arg_name"], pending.arg_name);
  s.bind(p + kCastCountsRow["location"], pending.location);
  s.bind(p + kCastCountsRow["codes"], pack_cast_counts_codes(c));
  s.bind(p + kCastCountsRow["count"], static_cast<int64_t>(c.count()));
  s.bind(p + kCastCountsRow["bytes"], static_cast<int64_t>(c.bytes()));
  s.bind(p + kCastCountsRow["iteration"], static_cast<int64_t>(c.iteration()));
  s.bind(p + kCastCountsRow["max_version_gap"], c.max_version_gap());
  s.bind(p + kCastCountsRow["round_trips"], static_cast<int64_t>(c.round_trips()));
}

void bind_op_counts_row(Statement& s, int p, const PendingRow& pending) {
  const v1::OpCounts& o = pending.event->op_counts();
  s.bind(p + kOpCountsRow["id"], pending.id);
  s.bind(p + kOpCountsRow["first_ts_ns"], static_cast<int64_t>(o.first_ts_ns()));
  s.bind(p + kOpCountsRow["last_ts_ns"], static_cast<int64_t>(o.last_ts_ns()));
  s.bind(p + kOpCountsRow["thread"], o.thread());
  s.bind(p + kOpCountsRow["op"], pending.op);
  s.bind(p + kOpCountsRow["location"], pending.location);
  s.bind(p + kOpCountsRow["codes"], pack_op_counts_codes(o));
  s.bind(p + kOpCountsRow["autocast_enabled"], pack_device_mask(o));
  s.bind(p + kOpCountsRow["calls"], static_cast<int64_t>(o.calls()));
  s.bind(p + kOpCountsRow["errors"], static_cast<int64_t>(o.errors()));
  s.bind(p + kOpCountsRow["cpu_duration_ns"], static_cast<int64_t>(o.cpu_duration_ns()));
  s.bind(p + kOpCountsRow["iteration"], static_cast<int64_t>(o.iteration()));
}

void bind_numerics_row(Statement& s, int p, const PendingRow& pending) {
  const v1::NumericsSummary& n = pending.event->numerics();
  s.bind(p + kNumericsRow["id"], pending.id);
  s.bind(p + kNumericsRow["first_ts_ns"], static_cast<int64_t>(n.first_ts_ns()));
  s.bind(p + kNumericsRow["last_ts_ns"], static_cast<int64_t>(n.last_ts_ns()));
  s.bind(p + kNumericsRow["thread"], n.thread());
  s.bind(p + kNumericsRow["op"], pending.op);
  s.bind(p + kNumericsRow["arg_name"], pending.arg_name);
  s.bind(p + kNumericsRow["location"], pending.location);
  s.bind(p + kNumericsRow["kind"], n.kind());
  s.bind(p + kNumericsRow["device_type"], n.device_type());
  s.bind(p + kNumericsRow["src_dtype"], n.src_dtype());
  s.bind(p + kNumericsRow["dst_dtype"], n.dst_dtype());
  s.bind(p + kNumericsRow["mode"], n.mode());
  s.bind(p + kNumericsRow["phase"], n.phase());
  s.bind(p + kNumericsRow["arg_index"], n.arg_index());
  s.bind(p + kNumericsRow["iteration"], static_cast<int64_t>(n.iteration()));
  s.bind(p + kNumericsRow["tensors"], static_cast<int64_t>(n.tensors()));
  s.bind(p + kNumericsRow["value_count"], static_cast<int64_t>(n.values()));
  s.bind(p + kNumericsRow["overflowed"], static_cast<int64_t>(n.overflowed()));
  s.bind(p + kNumericsRow["underflowed"], static_cast<int64_t>(n.underflowed()));
  s.bind(p + kNumericsRow["nonfinite"], static_cast<int64_t>(n.nonfinite()));
  s.bind(p + kNumericsRow["nan"], static_cast<int64_t>(n.nan()));
  s.bind(p + kNumericsRow["max_abs_log2"], n.max_abs_log2());
  s.bind(p + kNumericsRow["first_nonfinite_seq"], static_cast<int64_t>(n.first_nonfinite_seq()));
  s.bind(p + kNumericsRow["scale_bits"], scale_bits_of(n.scale()));
  s.bind(p + kNumericsRow["found_inf"], n.found_inf() ? 1 : 0);
}

}  // namespace castscope::collector
