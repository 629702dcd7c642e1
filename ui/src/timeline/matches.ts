// Finding the next (or previous) cast that matches the timeline's filter
// (Enter or n; Shift+Enter or N), after the last match shown (or the view's
// start, its end going back, when that has left the view): first among the
// single casts already fetched, then in a few windows further on (one
// request each, for this key press only), then, where those are density (too
// many events) or hold none, among the sites' first casts (/api/sites rows
// with their first_seq, each looked up once with /api/event); past the last
// match, back to the first. The sites give only each site's first cast: a
// match beyond the windows at a site seen earlier is not found this way.
// Also the casts' span (castSpanOf), which Fit frames.

import { type AgentId, api, type Cast, type LaneAnswer, type SiteRow } from "../api";
import { requestGroups, type TimelineData } from "./data";
import type { Lane } from "./layout";
import type { CastFilter } from "./search";

// Windows after the fetched data: the first SCAN_SPANS views wide, each next one twice as wide.
const SCAN_WINDOWS = 8;
const SCAN_SPANS = 4;
const MAX_SITE_LOOKUPS = 32;
const SITES_STALE_MS = 5000; // a live run's sites are asked again after this

/** Where a lane's answer has casts that converted: [first, last] (a bucket's whole width), or null. */
export function castSpanOf(data: LaneAnswer): { t0: number; t1: number } | null {
  let t0 = Infinity;
  let t1 = -Infinity;
  if (data.kind === "events") {
    for (const c of data.casts) {
      if (c.outcome !== "cast") continue;
      if (c.ts < t0) t0 = c.ts;
      if (c.ts > t1) t1 = c.ts;
    }
  } else {
    for (const b of data.buckets) {
      if (b.casts <= 0) continue;
      t0 = Math.min(t0, b.t);
      t1 = Math.max(t1, b.t + data.bucket_ns);
    }
  }
  return t0 <= t1 ? { t0, t1 } : null;
}

/** A cast found: its agent, seq and time. */
export interface Match {
  agent: AgentId;
  seq: number;
  ts: number;
}

export interface MatchTarget {
  lanes(): Lane[];
  data(): TimelineData;
  range(): { t0: number; t1: number };
  tMax(): number;
  plotWidth(): number;
  /** Shows a match; `dense`: the view shows density, zoom in to single casts. */
  show(m: Match, dense: boolean): void;
  /** A word on the search's result (nothing found, wrapped around). */
  say(text: string): void;
}

type At = { ts: number; seq: number };
const after = (c: At, cur: At) => c.ts > cur.ts || (c.ts === cur.ts && c.seq > cur.seq);
/** 1: later, -1: earlier. */
type Dir = 1 | -1;
const beyond = (c: At, cur: At, dir: Dir) => (dir > 0 ? after(c, cur) : after(cur, c));
const asMatch = (c: Cast): Match => ({ agent: c.agent_id, seq: c.seq, ts: c.ts });

export class MatchFinder {
  private cursor: { ts: number; seq: number } | null = null;
  private gen = 0; // a newer key press or filter wins over a search still waiting for answers
  private sites: { rows: SiteRow[]; at: number } | null = null;
  private firstCasts = new Map<string, { match: Match; cast: Cast } | null>();

  constructor(private readonly run: string, private readonly t: MatchTarget) {}

  /** The filter changed: the next search starts from the view. */
  reset(): void {
    this.cursor = null;
    this.gen++;
  }

  async next(f: CastFilter, match: (c: Cast) => boolean, dir: Dir = 1): Promise<void> {
    const gen = ++this.gen;
    const { t0, t1 } = this.t.range();
    const edge = dir > 0 ? { ts: t0, seq: -1 } : { ts: t1, seq: Infinity };
    const cur = this.cursor && this.cursor.ts >= t0 && this.cursor.ts <= t1 ? this.cursor : edge;
    const lanes = this.t.lanes();
    const dense = lanes.some((l) => this.t.data().lanes.get(l.key)?.data.kind === "buckets");
    let found: Match | null = null;
    let wrapped = false;
    try {
      found = this.inLoaded(lanes, cur, match, dir);
      if (!found && !dense) found = await this.scan(lanes, cur, match, dir, gen);
      if (gen !== this.gen) return;
      if (!found) {
        const s = await this.viaSites(f, cur, lanes, dir, gen);
        if (gen !== this.gen) return;
        found = s?.match ?? null;
        wrapped = s?.wrapped ?? false;
      }
    } catch (e) {
      if (gen === this.gen) this.t.say(`search: ${e instanceof Error ? e.message : String(e)}`);
      return;
    }
    if (!found) {
      this.t.say("no match found");
      return;
    }
    this.cursor = { ts: found.ts, seq: found.seq };
    this.t.say(wrapped ? (dir > 0 ? "no later match: back to the first" : "no earlier match: on to the last") : "");
    this.t.show(found, dense);
  }

  /** The nearest matching single cast beyond `cur` in the data fetched. */
  private inLoaded(lanes: Lane[], cur: At, match: (c: Cast) => boolean, dir: Dir): Match | null {
    let best: Cast | null = null;
    for (const lane of lanes) {
      const d = this.t.data().lanes.get(lane.key)?.data;
      if (d?.kind !== "events") continue;
      for (const c of d.casts) if (beyond(c, cur, dir) && (!best || beyond(best, c, dir)) && match(c)) best = c;
    }
    return best ? asMatch(best) : null;
  }

  /** The next few windows beyond the fetched data; stops at the run's end or at a window of density. */
  private async scan(lanes: Lane[], cur: At, match: (c: Cast) => boolean, dir: Dir, gen: number): Promise<Match | null> {
    const { t0, t1 } = this.t.range();
    let width = (t1 - t0) * SCAN_SPANS;
    const windows = lanes.map((l) => this.t.data().lanes.get(l.key)?.window);
    // The edge of the data fetched on the side searched: windows start there.
    // Lanes can hold different windows: from the nearest edge, so no lane's unfetched time is skipped.
    let edge = dir > 0
      ? Math.max(cur.ts, Math.min(...windows.map((w) => w?.t1 ?? t1)))
      : Math.min(cur.ts, Math.max(...windows.map((w) => w?.t0 ?? t0)));
    const px = this.t.plotWidth() * SCAN_SPANS;
    for (let i = 0; i < SCAN_WINDOWS && (dir > 0 ? edge <= this.t.tMax() : edge > 0); i++, width *= 2) {
      const [from, to] = dir > 0 ? [edge, edge + width] : [Math.max(0, edge - width), edge];
      let best: Cast | null = null;
      for (const group of requestGroups(lanes)) {
        const answers = await api.timeline(this.run, group.map((l) => l.track.track), from, to, px);
        if (gen !== this.gen) return null;
        for (const a of answers) {
          if (a.kind !== "events") return best ? asMatch(best) : null; // too many events: the sites say where to go
          for (const c of a.casts) if (beyond(c, cur, dir) && (!best || beyond(best, c, dir)) && match(c)) best = c;
        }
      }
      if (best) return asMatch(best);
      edge = dir > 0 ? to : from;
    }
    return null;
  }

  /** The nearest first cast beyond `cur` of the sites the filter can match (past the last, the first of all on the other side). */
  private async viaSites(f: CastFilter, cur: At, lanes: Lane[], dir: Dir, gen: number): Promise<{ match: Match; wrapped: boolean } | null> {
    if (!this.sites || performance.now() - this.sites.at > SITES_STALE_MS) this.sites = { rows: (await api.sites(this.run)).sites, at: performance.now() };
    if (gen !== this.gen) return null;
    const rows = this.sites.rows.filter((r) => f.site(r)).sort((a, b) => a.first_seq - b.first_seq).slice(0, MAX_SITE_LOOKUPS);
    const agents = [...new Set(lanes.map((l) => l.process.agent_id))];
    let best: Match | null = null;
    let first: Match | null = null;
    for (const row of rows) {
      const found = await this.firstCast(row, agents);
      if (gen !== this.gen) return null;
      // A row can hold matching casts without its first one matching (a role, maker or word the row does not say).
      if (!found || !f.test(found.cast)) continue;
      const m = found.match;
      if (!first || beyond(first, m, dir)) first = m;
      if (beyond(m, cur, dir) && (!best || beyond(best, m, dir))) best = m;
    }
    if (best) return { match: best, wrapped: false };
    return first ? { match: first, wrapped: true } : null;
  }

  /** A site row's first cast: its seq is known, its agent is not (the one whose event there is at the row's line). */
  private async firstCast(row: SiteRow, agents: AgentId[]): Promise<{ match: Match; cast: Cast } | null> {
    const key = `${row.first_seq}\u0000${row.line}\u0000${row.file}`;
    if (this.firstCasts.has(key)) return this.firstCasts.get(key)!;
    let found: { match: Match; cast: Cast } | null = null;
    for (const agent of agents) {
      try {
        const ev = await api.event(this.run, agent, row.first_seq);
        if (ev.kind === "cast" && ev.location.file === row.file && ev.location.line === row.line) {
          found = { match: { agent, seq: ev.seq, ts: ev.ts }, cast: ev as Cast };
          break;
        }
      } catch {
        /* not this agent's event */
      }
    }
    this.firstCasts.set(key, found);
    return found;
  }
}
