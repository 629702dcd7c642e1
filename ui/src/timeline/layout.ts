// Lanes from /api/tracks: per process a header row, its GradScaler scale
// (from /api/numerics) when it has one, then one lane per thread track, then
// its GPU tracks (one per device and stream).

import type { AgentId, NumericsAnswer, Process, ScalerSeries, Track, TracksAnswer } from "../api";

export const GUTTER = 180; // label column, CSS px
export const HEADER_H = 20;
export const THREAD_H = 36;
export const GPU_H = 22;
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

export function computeLayout(tracks: TracksAnswer | null, numerics: NumericsAnswer | null = null): Layout {
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
      lanes.push({ key: trackKey(p.agent_id, t), process: p, track: t, y, h: THREAD_H, primary: i === 0 });
      y += THREAD_H;
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
