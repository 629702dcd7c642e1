// Numbers the benchmarks and tests read from the page.
import type { AgentId } from "./api";

export interface LivePaint {
  seq: number;
  agent_id: AgentId;
  ts: number; // ns since the run's origin, as the server sent it
  paintedAt: number; // performance.timeOrigin + performance.now(), ms since the Unix epoch
}

/** One timeline request: a request per lane, all started at once (data.ts). */
export interface FetchRecord {
  startedAt: number; // performance.now()
  doneAt: number | null; // when the last lane answered (or failed); null while in flight or aborted
  lanes: number;
  laneMs: number[]; // per answered lane: request start to its JSON parsed
  kinds: string[]; // "events" | "buckets" per answered lane
  aborted: boolean;
}

export interface PaintRecord {
  at: number; // performance.now() when the paint ended
  ms: number; // the paint's own time (canvas drawing)
  lanesWithData: number;
  t0?: number; // the range painted (the browser tests line the counters up with it)
  t1?: number;
  lanes: number;
}

export interface CastscopeStats {
  paints: number;
  lastPaintMs: number;
  maxPaintMs: number;
  firstPaintAt: number | null; // performance.now() of the first paint with data
  firstFullPaintAt: number | null; // performance.now() of the first paint with data in every lane
  lastFetchMs: number;
  fetches: number;
  fetchErrors: number;
  aborted: number;
  liveBatches: number;
  liveOpens: number; // EventSource "open" events (more than 1: it reconnected)
  liveErrors: number;
  lastBatchAt: number | null; // performance.now() of the newest batch
  implausibleTMax: number; // live batches whose t_max was not believed
  liveCasts: number;
  busyLog: number[]; // performance.now() of the newest LOG_MAX live batches of BUSY_LIVE_EVENTS or more (heavy ingest)
  skipped: number;
  originNs: string | null;
  livePaints: LivePaint[];
  fetchLog: FetchRecord[]; // the newest LOG_MAX timeline requests
  paintLog: PaintRecord[]; // the newest LOG_MAX paints
}

export const LIVE_PAINTS_MAX = 5000;
export const LOG_MAX = 2000;

export const stats: CastscopeStats = {
  paints: 0,
  lastPaintMs: 0,
  maxPaintMs: 0,
  firstPaintAt: null,
  firstFullPaintAt: null,
  lastFetchMs: 0,
  fetches: 0,
  fetchErrors: 0,
  aborted: 0,
  liveBatches: 0,
  liveOpens: 0,
  liveErrors: 0,
  lastBatchAt: null,
  implausibleTMax: 0,
  liveCasts: 0,
  busyLog: [],
  skipped: 0,
  originNs: null,
  livePaints: [],
  fetchLog: [],
  paintLog: [],
};

/** Appends to a bounded log (oldest entries go first). */
export function logPush<T>(log: T[], entry: T): void {
  log.push(entry);
  if (log.length > LOG_MAX) log.splice(0, log.length - LOG_MAX);
}

export function recordLivePaint(p: LivePaint): void {
  stats.livePaints.push(p);
  if (stats.livePaints.length > LIVE_PAINTS_MAX) stats.livePaints.splice(0, stats.livePaints.length - LIVE_PAINTS_MAX);
}

declare global {
  interface Window {
    __castscopeStats: CastscopeStats;
    __castscope: unknown;
  }
}
window.__castscopeStats = stats;
