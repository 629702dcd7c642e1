// The casts a live run pushes (/api/live), kept between refetches. Each is
// drawn on its thread's lane at once, over the fetched data, until an answer
// fetched after it came covers its time; each is also remembered until a
// frame first draws it, for the push-to-screen latency the browser tests
// read (stats.livePaints). newestTime() is the run's end a pushed message
// moves the view to, a message's implausible t_max left out.

import type { AgentId, Cast } from "../api";
import type { LiveBatch } from "../live";
import { recordLivePaint, stats } from "../stats";
import type { TimelineData } from "./data";
import type { Frame } from "./draw";
import { GUTTER, type Layout, laneForCast } from "./layout";

const IMPLAUSIBLE_JUMP_NS = 300e9;

interface LiveCast {
  cast: Cast;
  receivedAt: number;
}

/** The run's newest time after a pushed message: `tMax` moved to its newest cast or t_max. */
export function newestTime(tMax: number, b: LiveBatch): number {
  // A batch without casts whose t_max lies minutes past everything seen is
  // not believed (the server sent absolute times for a run's first batches,
  // ~1600 s here, which would take the followed view far off the data).
  const newest = Math.max(tMax, ...(b.casts ?? []).map((c) => c.ts));
  if (!(b.casts ?? []).length && b.t_max > newest + IMPLAUSIBLE_JUMP_NS) {
    stats.implausibleTMax++;
    console.warn(`castscope: live batch t_max ${b.t_max} ns is ${((b.t_max - newest) / 1e9).toFixed(0)} s past the newest event; ignored`);
    return tMax;
  }
  return Math.max(newest, b.t_max);
}

export class LiveCasts {
  private byThread = new Map<string, LiveCast[]>(); // the newest 5000 per agent and thread
  private unpainted = new Map<string, { cast: Cast; at: number }>(); // by agent:seq, the newest 20000

  /** Keeps a pushed message's casts, received at `now` (performance.now()). */
  add(b: LiveBatch, now: number): void {
    for (const c of b.casts ?? []) {
      const key = liveKey(c.agent_id ?? b.agent_id, c.thread);
      const list = this.byThread.get(key) ?? [];
      list.push({ cast: c, receivedAt: now });
      if (list.length > 5000) list.splice(0, list.length - 5000);
      this.byThread.set(key, list);
      this.unpainted.set(`${c.agent_id}:${c.seq}`, { cast: c, at: now });
      stats.liveCasts++;
    }
    if (this.unpainted.size > 20000) {
      const drop = this.unpainted.size - 20000;
      let i = 0;
      for (const k of this.unpainted.keys()) {
        if (i++ >= drop) break;
        this.unpainted.delete(k);
      }
    }
  }

  /** Drops live casts that a later-started fetch has brought in. */
  prune(layout: Layout, data: TimelineData): void {
    for (const [key, list] of this.byThread) {
      if (!list.length) continue;
      const lane = laneForCast(layout, list[0].cast.agent_id, list[0].cast.thread);
      const got = lane ? data.lanes.get(lane.key) : undefined;
      if (!got) continue;
      const kept = list.filter((lc) => lc.receivedAt >= got.fetchedAt || lc.cast.ts >= got.window.t1 || lc.cast.ts < got.window.t0);
      this.byThread.set(key, kept);
    }
  }

  /** The kept casts by lane key, to draw over each lane's data. */
  byLane(layout: Layout): Map<string, Cast[]> {
    const live = new Map<string, Cast[]>();
    for (const list of this.byThread.values()) {
      if (!list.length) continue;
      const lane = laneForCast(layout, list[0].cast.agent_id, list[0].cast.thread);
      if (!lane) continue;
      const into = live.get(lane.key) ?? [];
      for (const lc of list) into.push(lc.cast);
      live.set(lane.key, into);
    }
    return live;
  }

  /** Records the push-to-screen time of the pushed casts a frame, painted at `end` (performance.now()), drew in view for the first time. */
  painted(frame: Frame, width: number, end: number): void {
    if (this.unpainted.size) {
      const wall = performance.timeOrigin + end;
      for (const d of frame.casts) {
        if (d.x < GUTTER || d.x > width) continue;
        const k = `${d.cast.agent_id}:${d.cast.seq}`;
        if (this.unpainted.delete(k)) recordLivePaint({ seq: d.cast.seq, agent_id: d.cast.agent_id, ts: d.cast.ts, paintedAt: wall });
      }
    }
  }
}

function liveKey(agent: AgentId, thread: number | string | undefined): string {
  return `${agent}/${thread ?? ""}`;
}
