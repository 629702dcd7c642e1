// Painting the lanes. Every shape of one style goes into one Path2D and is
// filled or stroked once per frame, so a frame costs a few dozen canvas
// calls however many events it shows. Rectangles are snapped to whole device
// pixels: chromium's software rasterizer fills a path of thousands of
// fractional rectangles 4-5x slower than the same path on the pixel grid
// (docs/performance.md, "The viewer: a page following a live run").

import type { AgentId, Bucket, Cast, Kernel, LaneAnswer, NumericsMark, Op, ScalerPoint, ScalerSeries } from "../api";
import {
  addMark,
  BACKWARD_SHADE,
  DTYPE_COLOR,
  HIGHLIGHT_COLOR,
  kernelColor,
  MODE_BADGE,
  OP_BACKWARD,
  OP_FORWARD,
  pairColor,
  STALE_COLOR,
} from "../colors";
import { fmtDuration, fmtTick, niceStep } from "../format";
import { GUTTER, HEADER_H, type Layout, laneBody, laneForCast, laneLabel, type Lane, MARK_R, opRows, type ScalerRow, STACK_STEP } from "./layout";
import { type DrawnLoss, drawLossBands, drawLossTint, lossMarks } from "./losses";
import { fmtScale, markColor } from "./numerics";

export interface Viewport {
  t0: number;
  t1: number;
  width: number; // CSS px of the whole canvas, gutter included
}

export function xOf(vp: Viewport, t: number): number {
  return GUTTER + ((t - vp.t0) / (vp.t1 - vp.t0)) * (vp.width - GUTTER);
}

export function tOf(vp: Viewport, x: number): number {
  return vp.t0 + ((x - GUTTER) / (vp.width - GUTTER)) * (vp.t1 - vp.t0);
}

export interface DrawnCast {
  cast: Cast;
  lane: Lane;
  x: number;
  y: number;
  live: boolean;
  highlighted: boolean;
  /** A filter is set and this cast does not match it. */
  dimmed: boolean;
}
export interface DrawnSpan<T> {
  item: T;
  x0: number;
  x1: number;
  y0: number;
  y1: number;
}
export interface DrawnBucket {
  bucket: Bucket;
  bucketNs: number;
  lane: Lane;
  x0: number;
  x1: number;
}

/** A skipped step on a GradScaler row: `before` is the series' point before it. */
export interface DrawnSkip {
  row: ScalerRow;
  point: ScalerPoint;
  before: ScalerPoint | undefined;
  x: number;
  y: number;
}

export interface Frame {
  casts: DrawnCast[];
  ops: DrawnSpan<Op>[];
  kernels: DrawnSpan<Kernel>[];
  buckets: DrawnBucket[];
  numerics: DrawnSpan<NumericsMark>[];
  skips: DrawnSkip[];
  /** Where processes lost events (losses.ts). */
  losses: DrawnLoss[];
}

export function emptyFrame(): Frame {
  return { casts: [], ops: [], kernels: [], buckets: [], numerics: [], skips: [], losses: [] };
}

export interface LaneContent {
  lane: Lane;
  data: LaneAnswer | null;
  live: Cast[];
}

/** Batches shapes by style: fill colour, stroke colour and width. */
class Batches {
  private fills = new Map<string, Path2D>();
  private strokes = new Map<string, Path2D>();
  /** `px`: one device pixel in CSS px (1 / devicePixelRatio). */
  constructor(private readonly px: number) {}
  /** A filled rectangle, its edges on the nearest device pixels (at least one pixel each way). */
  rect(color: string, x: number, y: number, w: number, h: number): void {
    const px = this.px;
    const x0 = Math.round(x / px) * px;
    const y0 = Math.round(y / px) * px;
    const x1 = Math.max(Math.round((x + w) / px) * px, x0 + px);
    const y1 = Math.max(Math.round((y + h) / px) * px, y0 + px);
    this.fill(color).rect(x0, y0, x1 - x0, y1 - y0);
  }
  fill(color: string): Path2D {
    let p = this.fills.get(color);
    if (!p) this.fills.set(color, (p = new Path2D()));
    return p;
  }
  stroke(color: string, width: number): Path2D {
    const k = `${color}|${width}`;
    let p = this.strokes.get(k);
    if (!p) this.strokes.set(k, (p = new Path2D()));
    return p;
  }
  flush(ctx: CanvasRenderingContext2D): void {
    for (const [color, p] of this.fills) {
      ctx.fillStyle = color;
      ctx.fill(p);
    }
    for (const [k, p] of this.strokes) {
      const [color, w] = k.split("|");
      ctx.strokeStyle = color;
      ctx.lineWidth = Number(w);
      ctx.stroke(p);
    }
    this.fills.clear();
    this.strokes.clear();
  }
}

const SKIP_R = 5;
const SCALE_COLOR = "#0f766e";
const SKIP_COLOR = "#dc2626";
/** Numerics marks: a bar this tall in their thread lane's top strip (layout's NUMERICS_STRIP_H, its triangle included). */
export const NUMERICS_BAR_H = 5;
/** A density bucket's stale hits: a strip this far below its lane's top, under the numerics bar, in the same top strip. */
const STALE_STRIP_Y = NUMERICS_BAR_H + 2;
/** Pixels between a lane body's edges and its marks. */
const MARKS_PAD = 4;

/**
 * The casts of one op share its start time, so they would lie on one another:
 * each gets a vertical offset in its lane, in the order they were made (their
 * seqs; native autocast's order, docs/architecture.md), centred on the
 * lane body's middle (as far apart as two marks; closer only when more must
 * fit than the lane has rows, layout's MAX_ROWS).
 */
function stackOffsets(casts: Cast[], bodyHeight: number): Map<Cast, number> {
  const byOp = new Map<string, Cast[]>();
  for (const c of casts) {
    if (!c.op_seq) continue;
    const key = `${c.agent_id}/${c.op_seq}`;
    const group = byOp.get(key);
    if (group) group.push(c);
    else byOp.set(key, [c]);
  }
  const offsets = new Map<Cast, number>();
  for (const group of byOp.values()) {
    if (group.length < 2) continue;
    group.sort((a, b) => a.seq - b.seq);
    const step = Math.min(STACK_STEP, (bodyHeight - 2 * MARK_R - 2 * MARKS_PAD) / (group.length - 1));
    group.forEach((c, k) => offsets.set(c, (k - (group.length - 1) / 2) * step));
  }
  return offsets;
}

export function drawLanes(
  ctx: CanvasRenderingContext2D,
  vp: Viewport,
  layout: Layout,
  contents: LaneContent[],
  highlight: (c: Cast) => boolean,
  selected: { agent: AgentId; seq: number } | null,
  numerics: NumericsMark[] = [],
  match: ((c: Cast) => boolean) | null = null,
): Frame {
  const frame = emptyFrame();
  const W = vp.width;
  const px = 1 / (ctx.getTransform().a || 1); // the caller's transform scales CSS px to device pixels
  // The caller has painted the (opaque) canvas white; nothing is cleared.
  ctx.font = "11px system-ui, sans-serif";
  ctx.textBaseline = "middle";

  // lane backgrounds, alternating
  const bg = new Batches(px);
  layout.lanes.forEach((lane, i) => {
    bg.rect(i % 2 ? "#f8fafc" : "#ffffff", GUTTER, lane.y, W - GUTTER, lane.h);
  });
  for (const hd of layout.headers) bg.rect("#eef2f7", 0, hd.y, W, HEADER_H);
  for (const row of layout.scalers) bg.rect("#f0fdfa", GUTTER, row.y, W - GUTTER, row.h);
  bg.flush(ctx);

  ctx.save();
  ctx.beginPath();
  ctx.rect(GUTTER, 0, W - GUTTER, layout.height);
  ctx.clip();

  // Lost events: a faint tint over the process's lanes under everything, a hatched band on its header row.
  frame.losses = lossMarks(layout, vp.t0, vp.t1, (t) => xOf(vp, t), GUTTER, W);
  drawLossTint(ctx, frame.losses);
  drawLossBands(ctx, frame.losses);

  const shade = new Batches(px); // backward shading, behind everything
  const body = new Batches(px); // op spans, kernels, bars
  const halos = new Batches(px); // highlighted sites, under the marks
  const marks = new Batches(px); // cast marks on top
  const faint = new Batches(px); // marks a filter leaves out, drawn pale
  const texts: { x: number; y: number; text: string; color: string }[] = [];
  const xmin = GUTTER - 20;
  const xmax = W + 20;
  // A span's box in its lane, `inset` px in from the lane's top and bottom; null when off screen.
  const spanBox = (lane: Lane, ts: number, dur: number, inset: number) => {
    const x0 = xOf(vp, ts);
    const x1 = Math.max(xOf(vp, ts + dur), x0 + 1);
    return x1 < xmin || x0 > xmax ? null : { x0, x1, y0: lane.y + inset, y1: lane.y + lane.h - inset };
  };

  const plotW = W - GUTTER;
  for (const { lane, data, live } of contents) {
    // A thread lane's ops and marks lie in its body, under the numerics strip.
    const { y0: bodyY0, y1: bodyY1 } = lane.track.kind === "gpu" ? { y0: lane.y, y1: lane.y + lane.h } : laneBody(lane);
    const yMid = (bodyY0 + bodyY1) / 2;
    const seen = new Set<number>();
    // More casts in view than marks side by side: no dark outlines, which ran together into a black smear.
    const dense = data?.kind === "events" && data.casts.length / 3 > plotW / (2 * MARK_R);
    if (data && data.kind === "events") {
      const { rows, depth } = opRows(data.ops);
      const rowH = (bodyY1 - bodyY0 - 2) / depth;
      data.ops.forEach((op, i) => {
        const x0 = xOf(vp, op.ts);
        const x1 = Math.max(xOf(vp, op.ts + op.dur), x0 + 1);
        if (x1 < xmin || x0 > xmax) return;
        const y0 = bodyY0 + 1 + (rows ? rows[i] : 0) * rowH;
        const y1 = y0 + rowH - (depth > 1 ? 1 : 0);
        const back = op.phase === "backward";
        if (back) shade.rect(BACKWARD_SHADE, x0, lane.y, x1 - x0, lane.h);
        body.rect(back ? OP_BACKWARD : OP_FORWARD, x0, y0, x1 - x0, y1 - y0);
        const badge = MODE_BADGE[op.mode];
        if (badge) {
          body.rect(badge.color, x0, y0, Math.max(x1 - x0, 3), 3);
          if (x1 - x0 >= 18 && rowH >= 14) texts.push({ x: x0 + 2, y: y0 + 9, text: badge.text, color: badge.color });
        }
        frame.ops.push({ item: op, x0, x1, y0, y1 });
      });
      for (const k of data.kernels) {
        const box = spanBox(lane, k.ts, k.dur, 3);
        if (!box) continue;
        body.rect(kernelColor(k.activity, k.launched_by), box.x0, box.y0, box.x1 - box.x0, box.y1 - box.y0);
        frame.kernels.push({ item: k, ...box });
      }
      for (const c of data.casts) seen.add(c.seq);
    } else if (data && data.kind === "buckets") {
      drawBuckets(data.bucket_ns, data.buckets, lane);
    }
    const fresh = live.filter((c) => !seen.has(c.seq));
    const stacked = stackOffsets(data && data.kind === "events" ? [...data.casts, ...fresh] : fresh, bodyY1 - bodyY0);
    if (data && data.kind === "events") for (const c of data.casts) addCast(c, false);
    for (const c of fresh) addCast(c, true);

    function addCast(c: Cast, isLive: boolean): void {
      const x = xOf(vp, c.ts);
      if (x < xmin || x > xmax) return;
      const y = yMid + (stacked.get(c) ?? 0);
      const color = pairColor(c.src, c.dst, c.outcome);
      const hl = highlight(c);
      const dimmed = match !== null && !match(c);
      if (dimmed) {
        // Left out by the filter: a pale mark, no halo or ring to draw the eye.
        addMark(faint.fill(c.cache === "hit" || c.cache === "stale_hit" ? "#ffffff" : color), c.role, x, y, MARK_R);
        addMark(faint.stroke(color, 1), c.role, x, y, MARK_R);
        frame.casts.push({ cast: c, lane, x, y, live: isLive, highlighted: hl, dimmed });
        return;
      }
      if (hl) {
        // A circle of its own: without the moveTo, arc() joins the previous halo's end to this one's start
        // and the shared path fills the wedge between them, across other ops' marks.
        const halo = halos.fill(HIGHLIGHT_COLOR);
        halo.moveTo(x + MARK_R + 5, y);
        halo.arc(x, y, MARK_R + 5, 0, Math.PI * 2);
      }
      if (c.cache === "hit") {
        addMark(marks.stroke(color, 1.5), c.role, x, y, MARK_R);
        addMark(marks.fill("#ffffff"), c.role, x, y, MARK_R);
      } else if (c.cache === "stale_hit") {
        addMark(marks.fill("#ffffff"), c.role, x, y, MARK_R);
        addMark(marks.stroke(STALE_COLOR, 2.5), c.role, x, y, MARK_R);
      } else {
        addMark(marks.fill(color), c.role, x, y, MARK_R);
        if (c.cache === "miss" && !dense) addMark(marks.stroke("#111827", 1), c.role, x, y, MARK_R);
      }
      if (selected && selected.agent === c.agent_id && selected.seq === c.seq) {
        addMark(marks.stroke("#111827", 2), c.role, x, y, MARK_R + 3);
      }
      frame.casts.push({ cast: c, lane, x, y, live: isLive, highlighted: hl, dimmed });
    }
  }

  function drawBuckets(bucketNs: number, buckets: Bucket[], lane: Lane): void {
    const gpu = lane.track.kind === "gpu";
    let peak = 1;
    for (const b of buckets) peak = Math.max(peak, gpu ? b.kernel_ns : b.decisions || b.ops);
    // Bars rise from the lane's bottom into its body, never into the top strip.
    const inner = lane.y + lane.h - 3 - (gpu ? lane.y + 3 : laneBody(lane).y0 + 1);
    for (const b of buckets) {
      const x0 = xOf(vp, b.t);
      const x1 = Math.max(xOf(vp, b.t + bucketNs), x0 + 1);
      if (x1 < xmin || x0 > xmax) continue;
      frame.buckets.push({ bucket: b, bucketNs, lane, x0, x1 });
      if (gpu) {
        const occ = Math.min(1, b.kernel_ns / Math.max(1, bucketNs));
        const hgt = Math.max(1, Math.sqrt(b.kernel_ns / peak) * inner);
        body.rect(occ > 0.5 ? "#334155" : "#64748b", x0, lane.y + lane.h - 3 - hgt, x1 - x0, hgt);
        continue;
      }
      if (b.backward > 0) shade.rect(BACKWARD_SHADE, x0, lane.y, x1 - x0, lane.h);
      const n = b.decisions || b.ops;
      if (n <= 0) continue;
      const hgt = Math.max(2, Math.sqrt(n / peak) * inner);
      body.rect(dominantColor(b), x0, lane.y + lane.h - 3 - hgt, x1 - x0, hgt);
      // Under the numerics bar's place, so that both show where a bucket has both.
      if (b.stale_hit > 0) body.rect(STALE_COLOR, x0, lane.y + STALE_STRIP_Y, x1 - x0, 3);
      const nonEager = (b.modes ?? []).find((m) => MODE_BADGE[m]);
      if (nonEager) body.rect(MODE_BADGE[nonEager].color, x0, lane.y + lane.h - 2, x1 - x0, 2);
    }
  }

  // Numerics problems: a bar over each window at the top of its thread's
  // lane (the agent's first lane when the thread has none), a small
  // triangle at its start so that a short window shows at any zoom.
  const problems = new Batches(px);
  for (const m of numerics) {
    const lane = laneForCast(layout, m.agent_id, m.thread);
    if (!lane) continue;
    const box = spanBox(lane, m.t0, m.t1 - m.t0, 0);
    if (!box) continue;
    const x1 = Math.max(box.x1, box.x0 + 3);
    const y0 = lane.y + 1;
    const color = markColor(m);
    problems.rect(color, box.x0, y0, x1 - box.x0, NUMERICS_BAR_H);
    const tri = problems.fill(color);
    tri.moveTo(box.x0 - 4, y0);
    tri.lineTo(box.x0 + 4, y0);
    tri.lineTo(box.x0, y0 + NUMERICS_BAR_H + 4);
    tri.closePath();
    frame.numerics.push({ item: m, x0: box.x0 - 4, x1, y0, y1: y0 + NUMERICS_BAR_H + 4 });
  }

  shade.flush(ctx);
  body.flush(ctx);
  ctx.globalAlpha = 0.25;
  faint.flush(ctx);
  ctx.globalAlpha = 1;
  halos.flush(ctx);
  marks.flush(ctx);
  problems.flush(ctx);
  for (const t of texts) {
    ctx.fillStyle = t.color;
    ctx.font = "bold 9px system-ui, sans-serif";
    ctx.fillText(t.text, t.x, t.y);
  }
  for (const row of layout.scalers) drawScaler(ctx, vp, row, frame);
  ctx.restore();

  // gutter labels
  ctx.fillStyle = "#f1f5f9";
  ctx.fillRect(0, 0, GUTTER, layout.height);
  ctx.strokeStyle = "#cbd5e1";
  ctx.lineWidth = 1;
  ctx.beginPath();
  ctx.moveTo(GUTTER + 0.5, 0);
  ctx.lineTo(GUTTER + 0.5, layout.height);
  ctx.stroke();
  for (const hd of layout.headers) {
    ctx.fillStyle = "#e2e8f0";
    ctx.fillRect(0, hd.y, GUTTER, HEADER_H);
    ctx.fillStyle = "#0f172a";
    ctx.font = "bold 11px system-ui, sans-serif";
    ctx.fillText(ellipsize(ctx, hd.process.label, GUTTER - 10), 6, hd.y + HEADER_H / 2);
  }
  for (const row of layout.scalers) {
    const { lo, hi } = log2Range(row.series);
    ctx.fillStyle = SCALE_COLOR;
    ctx.font = "11px system-ui, sans-serif";
    ctx.fillText("GradScaler scale", 14, row.y + row.h / 2 - 6);
    ctx.fillStyle = "#64748b";
    ctx.font = "10px system-ui, sans-serif";
    ctx.fillText(`log2: 2^${lo} – 2^${hi}`, 14, row.y + row.h / 2 + 7);
  }
  ctx.font = "11px system-ui, sans-serif";
  for (const lane of layout.lanes) {
    ctx.fillStyle = lane.track.kind === "gpu" ? "#7c2d12" : "#334155";
    ctx.fillText(ellipsize(ctx, laneLabel(lane.track), GUTTER - 18), 14, lane.y + lane.h / 2);
  }
  return frame;
}

/** The series' scales as whole powers of two: its row's vertical range. */
function log2Range(s: ScalerSeries): { lo: number; hi: number } {
  let lo = Infinity;
  let hi = -Infinity;
  for (const p of s.points) {
    if (!(p.scale > 0)) continue;
    lo = Math.min(lo, Math.floor(Math.log2(p.scale)));
    hi = Math.max(hi, Math.ceil(Math.log2(p.scale)));
  }
  if (!Number.isFinite(lo)) return { lo: 0, hi: 1 };
  return { lo, hi: hi > lo ? hi : lo + 1 };
}

/**
 * A GradScaler's scale as a step line on a log2 axis (the scale holds
 * between points), each skipped step a red triangle pointing down at the
 * scale it backed off to, with its value beside it when there is room.
 */
function drawScaler(ctx: CanvasRenderingContext2D, vp: Viewport, row: ScalerRow, frame: Frame): void {
  const { lo, hi } = log2Range(row.series);
  const top = row.y + 6;
  const bottom = row.y + row.h - 6;
  const yOf = (scale: number) => bottom - ((Math.log2(Math.max(scale, 2 ** lo)) - lo) / (hi - lo)) * (bottom - top);
  const pts = row.series.points;
  const line = new Path2D();
  const skips = new Path2D();
  const labels: { x: number; y: number; text: string }[] = [];
  const xmin = GUTTER - 20;
  const xmax = vp.width + 20;
  for (let i = 0; i < pts.length; i++) {
    const p = pts[i];
    const x = xOf(vp, p.t);
    const y = yOf(p.scale);
    const next = i + 1 < pts.length ? xOf(vp, pts[i + 1].t) : x;
    if (i === 0) line.moveTo(x, y);
    else line.lineTo(x, y);
    line.lineTo(next, y);
    if (x < xmin || x > xmax) continue;
    const changed = i === 0 || pts[i - 1].scale !== p.scale;
    if (changed && next - x >= 34) labels.push({ x: x + 3, y: y - 5, text: fmtScale(p.scale) });
    if (!p.found_inf) continue;
    skips.moveTo(x - SKIP_R, y - SKIP_R);
    skips.lineTo(x + SKIP_R, y - SKIP_R);
    skips.lineTo(x, y + SKIP_R);
    skips.closePath();
    frame.skips.push({ row, point: p, before: i > 0 ? pts[i - 1] : undefined, x, y });
  }
  ctx.strokeStyle = SCALE_COLOR;
  ctx.lineWidth = 1.5;
  ctx.stroke(line);
  ctx.fillStyle = SKIP_COLOR;
  ctx.fill(skips);
  ctx.strokeStyle = "#7f1d1d";
  ctx.lineWidth = 1;
  ctx.stroke(skips);
  ctx.fillStyle = "#134e4a";
  ctx.font = "10px system-ui, sans-serif";
  for (const l of labels) ctx.fillText(l.text, l.x, Math.max(row.y + 5, l.y));
}

function dominantColor(b: Bucket): string {
  const bf = b.to_bfloat16 ?? 0;
  const f16 = b.to_float16 ?? 0;
  const f32 = b.to_float32 ?? 0;
  const m = Math.max(bf, f16, f32);
  if (m <= 0) return "#94a3b8";
  if (m === bf) return DTYPE_COLOR.bfloat16;
  if (m === f16) return DTYPE_COLOR.float16;
  return DTYPE_COLOR.float32;
}

function ellipsize(ctx: CanvasRenderingContext2D, s: string, w: number): string {
  if (ctx.measureText(s).width <= w) return s;
  let lo = 0;
  let hi = s.length;
  while (lo < hi) {
    const mid = (lo + hi + 1) >> 1;
    if (ctx.measureText(s.slice(0, mid) + "…").width <= w) lo = mid;
    else hi = mid - 1;
  }
  return s.slice(0, lo) + "…";
}

/** The time axis: ticks with units chosen from the tick step. */
export function drawAxis(ctx: CanvasRenderingContext2D, vp: Viewport, height: number, tMax: number | null): void {
  const W = vp.width;
  ctx.fillStyle = "#f8fafc";
  ctx.fillRect(0, 0, W, height);
  ctx.fillStyle = "#f1f5f9";
  ctx.fillRect(0, 0, GUTTER, height);
  const span = vp.t1 - vp.t0;
  const step = niceStep(span, Math.max(2, Math.floor((W - GUTTER) / 110)));
  const first = Math.ceil(vp.t0 / step) * step;
  ctx.font = "11px system-ui, sans-serif";
  ctx.textBaseline = "middle";
  const ticks = new Path2D();
  ctx.fillStyle = "#334155";
  for (let t = first; t <= vp.t1; t += step) {
    const x = Math.round(xOf(vp, t)) + 0.5;
    ticks.moveTo(x, height - 7);
    ticks.lineTo(x, height);
    const label = fmtTick(t, step, Math.max(Math.abs(vp.t0), Math.abs(vp.t1)));
    // A label cut at the right edge read as another number ("3.6" of 3.68 s): the tick alone there.
    if (x + 3 + ctx.measureText(label).width <= W) ctx.fillText(label, x + 3, height / 2 - 2);
  }
  ctx.strokeStyle = "#94a3b8";
  ctx.lineWidth = 1;
  ctx.stroke(ticks);
  if (tMax !== null && tMax >= vp.t0 && tMax <= vp.t1) {
    const x = Math.round(xOf(vp, tMax)) + 0.5;
    ctx.strokeStyle = "#16a34a";
    ctx.beginPath();
    ctx.moveTo(x, 0);
    ctx.lineTo(x, height);
    ctx.stroke();
  }
  ctx.fillStyle = "#475569";
  ctx.fillText(`span ${fmtDuration(span)}`, 6, height / 2);
  ctx.strokeStyle = "#cbd5e1";
  ctx.beginPath();
  ctx.moveTo(0, height - 0.5);
  ctx.lineTo(W, height - 0.5);
  ctx.stroke();
}
