// What the timeline holds per lane, and when it asks again. One request for
// every lane (several only when their names overflow a URL) covers three
// viewport widths around the view; the lanes are asked again
// only when the view leaves that window or the zoom changed more than 8x since
// (xprof's rule), or when the live run grew (forced). A newer request aborts
// the older one.

import { api, isAbort, type LaneAnswer } from "../api";
import { type FetchRecord, logPush } from "../stats";
import type { Lane } from "./layout";

export const ZOOM_REFETCH = 8;

interface Window {
  t0: number;
  t1: number;
  viewSpan: number;
}

export interface LaneData {
  window: Window;
  data: LaneAnswer;
  fetchedAt: number; // performance.now() when the request started
}

export interface FetchStats {
  lastFetchMs: number;
  fetches: number;
  fetchErrors: number;
  aborted: number;
  fetchLog: FetchRecord[];
}

export class TimelineData {
  readonly lanes = new Map<string, LaneData>();
  private inflight: { ctrl: AbortController; window: Window; keys: Set<string>; record: FetchRecord } | null = null;

  constructor(
    private readonly run: string,
    private readonly onUpdate: () => void,
    private readonly onError: (e: unknown) => void,
    readonly stats: FetchStats,
  ) {}

  get loading(): boolean {
    return this.inflight !== null;
  }

  private covers(w: Window, t0: number, t1: number, exact: boolean): boolean {
    const span = t1 - t0;
    if (t0 < w.t0 || t1 > w.t1) return false;
    const ratio = w.viewSpan / span;
    // Events are complete at any zoom-in; buckets grow coarse after 8x.
    return (exact || ratio <= ZOOM_REFETCH) && ratio >= 1 / ZOOM_REFETCH;
  }

  /** Asks again where needed; `force` refetches the whole window (live). */
  ensure(lanes: Lane[], t0: number, t1: number, plotWidth: number, force = false): void {
    const span = Math.max(1, t1 - t0);
    let needed = force;
    if (!needed) {
      for (const lane of lanes) {
        const have = this.lanes.get(lane.key);
        const pending = this.inflight && this.inflight.keys.has(lane.key) ? this.inflight.window : null;
        if (pending && this.covers(pending, t0, t1, false)) continue;
        if (!have || !this.covers(have.window, t0, t1, have.data.kind === "events")) {
          needed = true;
          break;
        }
      }
    }
    if (!needed) return;
    this.inflight?.ctrl.abort();
    if (this.inflight) this.inflight.record.aborted = true;
    this.stats.aborted += this.inflight ? 1 : 0;
    const window: Window = { t0: Math.max(0, t0 - span), t1: t1 + span, viewSpan: span };
    if (window.t0 === 0) window.t1 = Math.max(window.t1, 3 * span);
    const ctrl = new AbortController();
    const keys = new Set(lanes.map((l) => l.key));
    const started = performance.now();
    const record: FetchRecord = { startedAt: started, doneAt: null, lanes: lanes.length, laneMs: [], kinds: [], aborted: false };
    const req = { ctrl, window, keys, record };
    this.inflight = req;
    const px = Math.max(1, Math.round((plotWidth * (window.t1 - window.t0)) / span));
    if (lanes.length === 0) {
      this.inflight = null;
      return;
    }
    const groups = requestGroups(lanes);
    let left = groups.length;
    // When the last group has answered or failed: the step's record is done.
    const finish = (): void => {
      if (--left > 0) return;
      if (this.inflight === req) this.inflight = null;
      record.doneAt = performance.now();
      this.stats.lastFetchMs = record.doneAt - started;
    };
    this.stats.fetches++;
    logPush(this.stats.fetchLog, record);
    for (const group of groups) {
      api
        .timeline(this.run, group.map((l) => l.track.track), window.t0, window.t1, px, ctrl.signal)
        .then((answers) => {
          if (ctrl.signal.aborted) return;
          const answeredAt = performance.now() - started;
          group.forEach((lane, i) => {
            record.laneMs.push(answeredAt);
            record.kinds.push(answers[i].kind);
            this.lanes.set(lane.key, { window, data: answers[i], fetchedAt: started });
          });
          finish();
          this.onUpdate();
        })
        .catch((e) => {
          if (isAbort(e) || ctrl.signal.aborted) return;
          this.stats.fetchErrors++;
          finish();
          this.onError(e);
        });
    }
  }

  abort(): void {
    this.inflight?.ctrl.abort();
    if (this.inflight) this.inflight.record.aborted = true;
    this.inflight = null;
  }

  clear(): void {
    this.abort();
    this.lanes.clear();
  }
}

/** The collector's limits on one /api/timeline request: its request line
 * (8 KiB, the run id and the other parameters included) and its lanes. */
const MAX_TRACKS_CHARS = 5000;
const MAX_TRACKS = 256;

/** Lanes in groups that fit one request each: one group unless a job has
 * hundreds of lanes. */
export function requestGroups(lanes: Lane[]): Lane[][] {
  const groups: Lane[][] = [[]];
  let chars = 0;
  for (const lane of lanes) {
    const n = encodeURIComponent(lane.track.track).length + 3;
    const group = groups[groups.length - 1];
    if (group.length > 0 && (chars + n > MAX_TRACKS_CHARS || group.length >= MAX_TRACKS)) {
      groups.push([]);
      chars = 0;
    }
    groups[groups.length - 1].push(lane);
    chars += n;
  }
  return groups;
}
