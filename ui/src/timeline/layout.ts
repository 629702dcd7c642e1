// Lanes from /api/tracks: per process a header row, its GradScaler scale
// (from /api/numerics) when it has one, then one lane per thread track, then
// its GPU tracks (one per device and stream). A thread lane is a strip for
// numerics marks at its top, then its body: ops as spans (a row per nesting
// level) and cast marks stacked per op, as many rows as its fetched data
// needs (LaneNeeds), so that nothing drawn lies on anything else.

import type { AgentId, LaneAnswer, NumericsAnswer, Process, ScalerSeries, Track, TracksAnswer } from "../api";

export const GUTTER = 180; // label column, CSS px
export const HEADER_H = 20;
export const GPU_H = 22;
/** Cast marks' half size, and the distance between two stacked marks' centres. */
export const MARK_R = 5;
export const STACK_STEP = 2 * MARK_R + 2;
/** A thread lane's top strip: numerics bars and their triangles, a density bucket's stale-hit strip. */
export const NUMERICS_STRIP_H = 12;
/** Room between the strip and the first row of marks, and under the last. */
const BODY_PAD = 4;
/** Rows of stacked marks a thread lane has at least (an op's input, weight and bias) and at most (more are packed closer). */
export const MIN_ROWS = 3;
export const MAX_ROWS = 10;
/** An op row's height at least, when nested ops split the body into rows. */
const OP_ROW_MIN = 8;
const MAX_OP_ROWS = 6;

/** What a thread lane's fetched data needs drawn apart: its largest stack of one op's casts, its ops' nesting depth. */
export interface LaneNeeds {
  stack: number;
  opRows: number;
}

/** A thread lane's height for what it draws. */
export function threadLaneHeight(needs: LaneNeeds | undefined): number {
  const rows = Math.min(Math.max(needs?.stack ?? 0, MIN_ROWS), MAX_ROWS);
  const opRows = Math.min(needs?.opRows ?? 1, MAX_OP_ROWS);
  return NUMERICS_STRIP_H + Math.max(rows * STACK_STEP, opRows * OP_ROW_MIN) + 2 * BODY_PAD;
}

/** The part of a thread lane under its numerics strip, where ops and cast marks are drawn. */
export function laneBody(lane: { y: number; h: number }): { y0: number; y1: number } {
  return { y0: lane.y + NUMERICS_STRIP_H, y1: lane.y + lane.h };
}
export const SCALER_H = 34;

export interface Lane {
  key: string; // unique per track within the run
  process: Process;
  track: Track;
  y: number;
  h: number;
  /** The agent's first thread lane: where live casts without a known thread lane are drawn. */
  primary: boolean;
}

export interface ProcessRow {
  process: Process;
  y: number;
}

/** A process's GradScaler scale: a counter row under its header, not a track of /api/timeline. */
export interface ScalerRow {
  process: Process;
  series: ScalerSeries;
  y: number;
  h: number;
}

export interface Layout {
  lanes: Lane[];
  headers: ProcessRow[];
  scalers: ScalerRow[];
  height: number;
}

export function trackKey(agentId: AgentId, track: Track): string {
  return `${agentId}/${track.kind}/${String(track.track)}`;
}

export function computeLayout(tracks: TracksAnswer | null, numerics: NumericsAnswer | null = null, needs: Map<string, LaneNeeds> = new Map()): Layout {
  const lanes: Lane[] = [];
  const headers: ProcessRow[] = [];
  const scalers: ScalerRow[] = [];
  let y = 0;
  for (const p of tracks?.processes ?? []) {
    headers.push({ process: p, y });
    y += HEADER_H;
    const series = numerics?.scalers.find((s) => String(s.agent_id) === String(p.agent_id) && s.points.length > 0);
    if (series) {
      scalers.push({ process: p, series, y, h: SCALER_H });
      y += SCALER_H;
    }
    const threads = p.tracks.filter((t) => t.kind !== "gpu");
    const gpus = p.tracks.filter((t) => t.kind === "gpu");
    threads.forEach((t, i) => {
      const key = trackKey(p.agent_id, t);
      const h = threadLaneHeight(needs.get(key));
      lanes.push({ key, process: p, track: t, y, h, primary: i === 0 });
      y += h;
    });
    for (const t of gpus) {
      lanes.push({ key: trackKey(p.agent_id, t), process: p, track: t, y, h: GPU_H, primary: false });
      y += GPU_H;
    }
  }
  return { lanes, headers, scalers, height: Math.max(y, 40) };
}

export function laneLabel(t: Track): string {
  if (t.kind === "gpu") {
    const dev = t.device ?? "?";
    const stream = t.stream ?? "?";
    return t.name ? `${t.name}` : `GPU ${dev} stream ${stream}`;
  }
  return t.name ? t.name : `thread ${t.thread ?? t.track}`;
}

/** The lane a live cast belongs on: its agent's thread lane, else the agent's first. */
export function laneForCast(layout: Layout, agent: AgentId, thread: number | string | undefined): Lane | undefined {
  let primary: Lane | undefined;
  for (const l of layout.lanes) {
    if (String(l.process.agent_id) !== String(agent) || l.track.kind === "gpu") continue;
    if (thread !== undefined && thread !== null && String(l.track.thread) === String(thread)) return l;
    if (l.primary) primary = l;
  }
  return primary;
}

/**
 * Each op's row when ops nest (an op that starts before the one on a row has
 * ended goes on the next row), in the order given; -1 where ops do not nest
 * at all. `depth`: how many rows they take.
 */
export function opRows(ops: readonly { ts: number; dur: number }[]): { rows: Int8Array | null; depth: number } {
  const ends: number[] = [];
  let rows: Int8Array | null = null;
  for (let i = 0; i < ops.length; i++) {
    const o = ops[i];
    let r = 0;
    while (r < ends.length && ends[r] > o.ts && r < MAX_OP_ROWS - 1) r++;
    ends[r] = Math.max(ends[r] ?? -Infinity, o.ts + o.dur);
    if (r > 0 && !rows) rows = new Int8Array(ops.length);
    if (rows) rows[i] = r;
  }
  return { rows, depth: Math.max(1, ends.length) };
}

/** What a lane's answer needs drawn apart: the most casts of one op, the ops' nesting depth. */
export function laneNeeds(data: LaneAnswer): LaneNeeds {
  if (data.kind !== "events") return { stack: 0, opRows: 1 };
  const perOp = new Map<number, number>();
  let stack = 0;
  for (const c of data.casts) {
    if (!c.op_seq) continue;
    const n = (perOp.get(c.op_seq) ?? 0) + 1;
    perOp.set(c.op_seq, n);
    if (n > stack) stack = n;
  }
  return { stack, opRows: opRows(data.ops).depth };
}
