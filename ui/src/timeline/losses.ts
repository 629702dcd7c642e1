// Where a process lost events (/api/tracks' `losses`): a red hatched band
// across its header row over each span, at least LOSS_MIN_W px wide however
// short the span, and a faint red tint over its lanes there; the tooltip's
// words for what was lost. A process's losses come in time order (at most
// 1 000), so a frame finds the first in view by bisection and stops at the
// first past it: its cost is the marks in view, not the run's losses.

import type { Loss, Process } from "../api";
import { fmtCount, fmtDuration } from "../format";
import { HEADER_H, type Layout } from "./layout";

/** A loss mark is at least this wide (CSS px), however short its span. */
export const LOSS_MIN_W = 2;
export const LOSS_COLOR = "#b91c1c";
const LOSS_BACK = "#fecaca";
/** Over the process's lanes, behind everything drawn there. */
export const LOSS_TINT = "rgba(220, 38, 38, 0.10)";

export interface DrawnLoss {
  loss: Loss;
  process: Process;
  /** The mark on the header row, CSS px. */
  x0: number;
  x1: number;
  y0: number;
  y1: number;
  /** The process's lanes under it (the faint tint). */
  lanesY0: number;
  lanesY1: number;
}

/** The first index whose span ends at or after `t` (losses in time order). */
function firstEndingAfter(losses: readonly Loss[], t: number): number {
  let lo = 0;
  let hi = losses.length;
  while (lo < hi) {
    const mid = (lo + hi) >> 1;
    if (Number(losses[mid].t1) < t) lo = mid + 1;
    else hi = mid;
  }
  return lo;
}

/** The loss marks in view: per process header, its spans between t0 and t1 (`xOf` maps time to CSS px). */
export function lossMarks(layout: Layout, t0: number, t1: number, xOf: (t: number) => number, xmin: number, xmax: number): DrawnLoss[] {
  const out: DrawnLoss[] = [];
  layout.headers.forEach((hd, i) => {
    const losses = hd.process.losses ?? [];
    if (!losses.length) return;
    const next = layout.headers[i + 1];
    const lanesY0 = hd.y + HEADER_H;
    const lanesY1 = next ? next.y : layout.height;
    // A span shorter than a pixel just outside the view still shows as its LOSS_MIN_W mark.
    const slack = ((t1 - t0) / Math.max(1, xmax - xmin)) * LOSS_MIN_W;
    for (let k = firstEndingAfter(losses, t0 - slack); k < losses.length; k++) {
      const loss = losses[k];
      const a = Number(loss.t0);
      const b = Number(loss.t1);
      if (a > t1 + slack) break;
      let x0 = xOf(a);
      let x1 = xOf(b);
      if (x1 - x0 < LOSS_MIN_W) {
        const mid = (x0 + x1) / 2;
        x0 = mid - LOSS_MIN_W / 2;
        x1 = mid + LOSS_MIN_W / 2;
      }
      if (x1 < xmin || x0 > xmax) continue;
      out.push({ loss, process: hd.process, x0: Math.max(x0, xmin), x1: Math.min(x1, xmax), y0: hd.y, y1: hd.y + HEADER_H, lanesY0, lanesY1 });
    }
  });
  return out;
}

const patterns = new WeakMap<CanvasRenderingContext2D, CanvasPattern | string>();

/** Red diagonal hatching (made once per canvas). */
function hatch(ctx: CanvasRenderingContext2D): CanvasPattern | string {
  let p = patterns.get(ctx);
  if (p) return p;
  const tile = document.createElement("canvas");
  tile.width = 6;
  tile.height = 6;
  const t = tile.getContext("2d");
  if (t) {
    t.fillStyle = LOSS_BACK;
    t.fillRect(0, 0, 6, 6);
    t.strokeStyle = LOSS_COLOR;
    t.lineWidth = 2;
    t.beginPath();
    for (const o of [-6, 0, 6]) {
      t.moveTo(o, 6);
      t.lineTo(o + 6, 0);
    }
    t.stroke();
  }
  p = ctx.createPattern(tile, "repeat") ?? LOSS_COLOR;
  patterns.set(ctx, p);
  return p;
}

/** The faint tint over the lanes: behind the lanes' content. */
export function drawLossTint(ctx: CanvasRenderingContext2D, marks: readonly DrawnLoss[]): void {
  if (!marks.length) return;
  const p = new Path2D();
  for (const m of marks) p.rect(m.x0, m.lanesY0, m.x1 - m.x0, m.lanesY1 - m.lanesY0);
  ctx.fillStyle = LOSS_TINT;
  ctx.fill(p);
}

/** The hatched bands on the header rows, each edged in solid red so that a 2 px one reads as a line. */
export function drawLossBands(ctx: CanvasRenderingContext2D, marks: readonly DrawnLoss[]): void {
  if (!marks.length) return;
  const bands = new Path2D();
  const edges = new Path2D();
  for (const m of marks) {
    bands.rect(m.x0, m.y0, m.x1 - m.x0, m.y1 - m.y0);
    edges.rect(m.x0, m.y0, Math.min(1, m.x1 - m.x0), m.y1 - m.y0);
    edges.rect(Math.max(m.x0, m.x1 - 1), m.y0, Math.min(1, m.x1 - m.x0), m.y1 - m.y0);
  }
  ctx.fillStyle = hatch(ctx);
  ctx.fill(bands);
  ctx.fillStyle = LOSS_COLOR;
  ctx.fill(edges);
}

/** The marks under (x, y) (within a pixel of x), on a process's header row or over its lanes (y0 is the row's top, lanesY1 the lanes' bottom). */
export function lossesAt(marks: readonly DrawnLoss[], x: number, y: number): DrawnLoss[] {
  return marks.filter((m) => x >= m.x0 - 1 && x <= m.x1 + 1 && y >= m.y0 && y < m.lanesY1);
}

/** The tooltip's lines for the marks under the pointer (their counts added up). */
export function lossLines(marks: readonly DrawnLoss[]): string[] {
  let dropped = 0;
  let missing = 0;
  let t0 = Infinity;
  let t1 = -Infinity;
  for (const m of marks) {
    dropped += Number(m.loss.events_dropped);
    missing += Number(m.loss.batches_missing);
    t0 = Math.min(t0, Number(m.loss.t0));
    t1 = Math.max(t1, Number(m.loss.t1));
  }
  const lines = ["events lost here"];
  if (dropped > 0) lines.push(`${fmtCount(dropped)} event${dropped === 1 ? "" : "s"} dropped here (the agent's ring was full, or a thread had no ring)`);
  if (missing > 0) lines.push(`${fmtCount(missing)} batch${missing === 1 ? "" : "es"} lost in transport (never reached the store)`);
  lines.push(t1 > t0 ? `between ${fmtDuration(t0)} and ${fmtDuration(t1)}` : `at ${fmtDuration(t0)}`);
  if (marks.length > 1) lines.push(`${fmtCount(marks.length)} spans under the pointer`);
  lines.push(marks[0].process.label);
  return lines;
}
