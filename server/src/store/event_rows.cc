#include "server/src/store/event_rows.h"

#include <sqlite3.h>

#include "server/src/store/event_columns.h"
#include "server/src/store/row_codec.h"
#include "server/src/store/store_schema.h"

namespace castscope::collector {

namespace v1 = castscope::v1;

void bind_cast_row(Statement& s, int p, const PendingRow& pending) {
  const v1::CastEvent& c = pending.event->cast();
  s.bind(p + event_rows::kCast["id"], pending.id);
  s.bind(p + event_rows::kCast["ts_ns"], static_cast<int64_t>(c.ts_ns()));
  s.bind(p + event_rows::kCast["op"], pending.op);
  s.bind(p + event_rows::kCast["arg_name"], pending.arg_name);
  s.bind(p + event_rows::kCast["slot"], pack_cast_slot(c));
  s.bind(p + event_rows::kCast["codes"], pack_cast_codes(c));
  if (c.shape_size() == 0)
    sqlite3_bind_null(s.get(), p + event_rows::kCast["shape"]);
  else
    sqlite3_bind_blob(s.get(), p + event_rows::kCast["shape"], c.shape().data(), c.shape_size() * 8, SQLITE_STATIC);
  s.bind(p + event_rows::kCast["bytes"], static_cast<int64_t>(c.bytes()));
  s.bind(p + event_rows::kCast["op_seq"], static_cast<int64_t>(c.op_seq()));
  s.bind(p + event_rows::kCast["source_version"], c.source_version());
  s.bind(p + event_rows::kCast["cached_version"], c.cached_version());
  s.bind(p + event_rows::kCast["float8"], pack_float8(c));
  s.bind(p + event_rows::kCast["float8_zero_amax"], static_cast<int64_t>(c.float8().zero_amax()));
  s.bind(p + event_rows::kCast["module"], pending.module);
  s.bind(p + event_rows::kCast["parameter"], pending.parameter);
  s.bind(p + event_rows::kCast["location"], pending.location);
}

void bind_op_row(Statement& s, int p, const PendingRow& pending) {
  const v1::OpEvent& o = pending.event->op();
  s.bind(p + event_rows::kOp["id"], pending.id);
  s.bind(p + event_rows::kOp["ts_ns"], static_cast<int64_t>(o.ts_ns()));
  s.bind(p + event_rows::kOp["thread"], o.thread());
  s.bind(p + event_rows::kOp["op"], pending.op);
  s.bind(p + event_rows::kOp["codes"], pack_op_codes(o));
  s.bind(p + event_rows::kOp["input_dtypes"], pack_input_dtypes(o));
  s.bind(p + event_rows::kOp["cpu_duration_ns"], static_cast<int64_t>(o.cpu_duration_ns()));
  s.bind(p + event_rows::kOp["location"], pending.location);
  s.bind(p + event_rows::kOp["autocast_enabled"], pack_device_mask(o));
  s.bind(p + event_rows::kOp["autocast_nesting"], o.autocast_nesting());
  s.bind(p + event_rows::kOp["gemm"], pack_gemm(o));
}

void bind_cache_sample_row(Statement& s, int p, const PendingRow& pending) {
  const v1::CacheSample& sample = pending.event->cache_sample();
  s.bind(p + event_rows::kCacheSample["id"], pending.id);
  s.bind(p + event_rows::kCacheSample["ts_ns"], static_cast<int64_t>(sample.ts_ns()));
  s.bind(p + event_rows::kCacheSample["trigger"], sample.trigger());
  s.bind(p + event_rows::kCacheSample["iteration"], static_cast<int64_t>(sample.iteration()));
  s.bind(p + event_rows::kCacheSample["live_casts"], static_cast<int64_t>(sample.live_casts()));
  s.bind(p + event_rows::kCacheSample["live_bytes"], static_cast<int64_t>(sample.live_bytes()));
  s.bind(p + event_rows::kCacheSample["orphaned_casts"], static_cast<int64_t>(sample.orphaned_casts()));
  s.bind(p + event_rows::kCacheSample["orphaned_bytes"], static_cast<int64_t>(sample.orphaned_bytes()));
  s.bind(p + event_rows::kCacheSample["cache_hits"], static_cast<int64_t>(sample.cache_hits()));
  s.bind(p + event_rows::kCacheSample["released_casts"], static_cast<int64_t>(sample.released_casts()));
}

void bind_kernel_row(Statement& s, int p, const PendingRow& pending) {
  const v1::KernelEvent& k = pending.event->kernel();
  s.bind(p + event_rows::kKernel["id"], pending.id);
  s.bind(p + event_rows::kKernel["ts_ns"], static_cast<int64_t>(k.ts_ns()));
  s.bind(p + event_rows::kKernel["duration_ns"], static_cast<int64_t>(k.duration_ns()));
  s.bind(p + event_rows::kKernel["name"], pending.op);
  s.bind(p + event_rows::kKernel["codes"], pack_kernel_codes(k));
  s.bind(p + event_rows::kKernel["device"], k.device());
  s.bind(p + event_rows::kKernel["stream"], k.stream());
  s.bind(p + event_rows::kKernel["launch_seq"], static_cast<int64_t>(k.launch_seq()));
  s.bind(p + event_rows::kKernel["bytes"], static_cast<int64_t>(k.bytes()));
  s.bind(p + event_rows::kKernel["correlation_id"], k.correlation_id());
}

void bind_cast_counts_row(Statement& s, int p, const PendingRow& pending) {
  const v1::CastCounts& c = pending.event->cast_counts();
  s.bind(p + event_rows::kCastCounts["id"], pending.id);
  s.bind(p + event_rows::kCastCounts["first_ts_ns"], static_cast<int64_t>(c.first_ts_ns()));
  s.bind(p + event_rows::kCastCounts["last_ts_ns"], static_cast<int64_t>(c.last_ts_ns()));
  s.bind(p + event_rows::kCastCounts["thread"], c.thread());
  s.bind(p + event_rows::kCastCounts["op"], pending.op);
  s.bind(p + event_rows::kCastCounts["arg_name"], pending.arg_name);
  s.bind(p + event_rows::kCastCounts["location"], pending.location);
  s.bind(p + event_rows::kCastCounts["codes"], pack_cast_counts_codes(c));
  s.bind(p + event_rows::kCastCounts["count"], static_cast<int64_t>(c.count()));
  s.bind(p + event_rows::kCastCounts["bytes"], static_cast<int64_t>(c.bytes()));
  s.bind(p + event_rows::kCastCounts["iteration"], static_cast<int64_t>(c.iteration()));
  s.bind(p + event_rows::kCastCounts["max_version_gap"], c.max_version_gap());
  s.bind(p + event_rows::kCastCounts["round_trips"], static_cast<int64_t>(c.round_trips()));
}

void bind_op_counts_row(Statement& s, int p, const PendingRow& pending) {
  const v1::OpCounts& o = pending.event->op_counts();
  s.bind(p + event_rows::kOpCounts["id"], pending.id);
  s.bind(p + event_rows::kOpCounts["first_ts_ns"], static_cast<int64_t>(o.first_ts_ns()));
  s.bind(p + event_rows::kOpCounts["last_ts_ns"], static_cast<int64_t>(o.last_ts_ns()));
  s.bind(p + event_rows::kOpCounts["thread"], o.thread());
  s.bind(p + event_rows::kOpCounts["op"], pending.op);
  s.bind(p + event_rows::kOpCounts["location"], pending.location);
  s.bind(p + event_rows::kOpCounts["codes"], pack_op_counts_codes(o));
  s.bind(p + event_rows::kOpCounts["autocast_enabled"], pack_device_mask(o));
  s.bind(p + event_rows::kOpCounts["calls"], static_cast<int64_t>(o.calls()));
  s.bind(p + event_rows::kOpCounts["errors"], static_cast<int64_t>(o.errors()));
  s.bind(p + event_rows::kOpCounts["cpu_duration_ns"], static_cast<int64_t>(o.cpu_duration_ns()));
  s.bind(p + event_rows::kOpCounts["iteration"], static_cast<int64_t>(o.iteration()));
}

void bind_numerics_row(Statement& s, int p, const PendingRow& pending) {
  const v1::NumericsSummary& n = pending.event->numerics();
  s.bind(p + event_rows::kNumerics["id"], pending.id);
  s.bind(p + event_rows::kNumerics["first_ts_ns"], static_cast<int64_t>(n.first_ts_ns()));
  s.bind(p + event_rows::kNumerics["last_ts_ns"], static_cast<int64_t>(n.last_ts_ns()));
  s.bind(p + event_rows::kNumerics["thread"], n.thread());
  s.bind(p + event_rows::kNumerics["op"], pending.op);
  s.bind(p + event_rows::kNumerics["arg_name"], pending.arg_name);
  s.bind(p + event_rows::kNumerics["location"], pending.location);
  s.bind(p + event_rows::kNumerics["kind"], n.kind());
  s.bind(p + event_rows::kNumerics["device_type"], n.device_type());
  s.bind(p + event_rows::kNumerics["src_dtype"], n.src_dtype());
  s.bind(p + event_rows::kNumerics["dst_dtype"], n.dst_dtype());
  s.bind(p + event_rows::kNumerics["mode"], n.mode());
  s.bind(p + event_rows::kNumerics["phase"], n.phase());
  s.bind(p + event_rows::kNumerics["arg_index"], n.arg_index());
  s.bind(p + event_rows::kNumerics["iteration"], static_cast<int64_t>(n.iteration()));
  s.bind(p + event_rows::kNumerics["tensors"], static_cast<int64_t>(n.tensors()));
  s.bind(p + event_rows::kNumerics["value_count"], static_cast<int64_t>(n.values()));
  s.bind(p + event_rows::kNumerics["overflowed"], static_cast<int64_t>(n.overflowed()));
  s.bind(p + event_rows::kNumerics["underflowed"], static_cast<int64_t>(n.underflowed()));
  s.bind(p + event_rows::kNumerics["nonfinite"], static_cast<int64_t>(n.nonfinite()));
  s.bind(p + event_rows::kNumerics["nan"], static_cast<int64_t>(n.nan()));
  s.bind(p + event_rows::kNumerics["max_abs_log2"], n.max_abs_log2());
  s.bind(p + event_rows::kNumerics["first_nonfinite_seq"], static_cast<int64_t>(n.first_nonfinite_seq()));
  s.bind(p + event_rows::kNumerics["scale_bits"], scale_bits_of(n.scale()));
  s.bind(p + event_rows::kNumerics["found_inf"], n.found_inf() ? 1 : 0);
  s.bind(p + event_rows::kNumerics["saturated"], static_cast<int64_t>(n.saturated()));
}

}  // namespace castscope::collector
