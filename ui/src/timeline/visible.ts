// What the browser tests read of the painted timeline
// (window.__castscope.visibleCasts(), .visibleNumerics() and
// .visibleLosses()): the single casts, numerics marks, skipped steps and
// loss marks of the last Frame that lie inside
// the lanes (right of the gutter), in page coordinates to hover or click,
// with the fields the tests check. The page only hands them to the tests
// (views/run.ts installs the hooks); it draws and picks from the Frame itself.

import type { AgentId } from "../api";
import type { Frame } from "./draw";
import { GUTTER, laneBody } from "./layout";
import { lossLines } from "./losses";
import { markLines, skipLines } from "./numerics";

/** A drawn loss mark on a process's header row, as the browser tests read them (window.__castscope.visibleLosses()). */
export interface VisibleLoss {
  agent_id: AgentId;
  t0: number;
  t1: number;
  events_dropped: number;
  batches_missing: number;
  /** Page coordinates: the mark's left and right edges, its row's top and bottom, and a point on it to hover. */
  x0: number;
  x1: number;
  top: number;
  bottom: number;
  x: number;
  y: number;
  /** What its tooltip says of it alone. */
  text: string[];
}

/** A drawn numerics mark or skipped step, as the browser tests read them (window.__castscope.visibleNumerics()). */
export interface VisibleNumerics {
  kind: "cast" | "op_output" | "skip";
  agent_id: AgentId;
  /** Page coordinates of a point on it to hover or click. */
  x: number;
  y: number;
  file: string;
  line: number;
  text: string[];
}

/** A drawn single cast, as the browser tests read it (window.__castscope.visibleCasts()). */
export interface VisibleCast {
  seq: number;
  op_seq: number;
  agent_id: AgentId;
  x: number;
  y: number;
  ts: number;
  file: string | null;
  line: number | null;
  op: string;
  role: string;
  src: string;
  dst: string;
  cache: string;
  mode: string;
  live: boolean;
  highlighted: boolean;
  /** A timeline filter is set and this cast does not match it (drawn pale). */
  dimmed: boolean;
  /** Its lane's top and bottom, and the top of the lane's body (under its numerics strip), page px. */
  laneTop: number;
  laneBottom: number;
  bodyTop: number;
}

export function visibleCasts(frame: Frame, canvas: HTMLCanvasElement, width: number): VisibleCast[] {
  const r = canvas.getBoundingClientRect();
  return frame.casts
    .filter((d) => d.x >= GUTTER && d.x <= width)
    .map((d) => ({
      seq: d.cast.seq,
      op_seq: d.cast.op_seq,
      agent_id: d.cast.agent_id,
      x: r.left + d.x,
      y: r.top + d.y,
      ts: d.cast.ts,
      file: d.cast.location?.file ?? null,
      line: d.cast.location?.line ?? null,
      op: d.cast.op,
      role: d.cast.role,
      src: d.cast.src,
      dst: d.cast.dst,
      cache: d.cast.cache,
      mode: d.cast.mode,
      live: d.live,
      highlighted: d.highlighted,
      dimmed: d.dimmed,
      laneTop: r.top + d.lane.y,
      laneBottom: r.top + d.lane.y + d.lane.h,
      bodyTop: r.top + laneBody(d.lane).y0,
    }));
}

export function visibleNumerics(frame: Frame, canvas: HTMLCanvasElement, width: number): VisibleNumerics[] {
  const r = canvas.getBoundingClientRect();
  const inView = (x: number) => x >= GUTTER && x <= width;
  const out: VisibleNumerics[] = [];
  for (const s of frame.skips) {
    if (!inView(s.x)) continue;
    out.push({ kind: "skip", agent_id: s.row.series.agent_id, x: r.left + s.x, y: r.top + s.y, file: s.row.series.location.file, line: s.row.series.location.line, text: skipLines(s.row.series, s.point, s.before) });
  }
  for (const d of frame.numerics) {
    const x = Math.min(Math.max((d.x0 + d.x1) / 2, GUTTER + 1), width - 1);
    if (d.x1 < GUTTER || d.x0 > width) continue;
    const m = d.item;
    out.push({ kind: m.kind, agent_id: m.agent_id, x: r.left + x, y: r.top + d.y0 + 2, file: m.location.file, line: m.location.line, text: markLines(m) });
  }
  return out;
}

export function visibleLosses(frame: Frame, canvas: HTMLCanvasElement, width: number): VisibleLoss[] {
  const r = canvas.getBoundingClientRect();
  return frame.losses
    .filter((d) => d.x1 >= GUTTER && d.x0 <= width)
    .map((d) => ({
      agent_id: d.process.agent_id,
      t0: Number(d.loss.t0),
      t1: Number(d.loss.t1),
      events_dropped: Number(d.loss.events_dropped),
      batches_missing: Number(d.loss.batches_missing),
      x0: r.left + d.x0,
      x1: r.left + d.x1,
      top: r.top + d.y0,
      bottom: r.top + d.y1,
      x: r.left + (Math.max(d.x0, GUTTER) + Math.min(d.x1, width)) / 2,
      y: r.top + (d.y0 + d.y1) / 2,
      text: lossLines([d]),
    }));
}
