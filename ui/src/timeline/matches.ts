// Finding the next cast that matches the timeline's filter (Enter in the
// search box, or n), after the last match shown (or the view's start when
// that has left the view): first in the single casts already fetched, then
// in a few windows of the same width further on (one request each, and
// only for this key press), then, where those are density (too many
// events) or hold none, among the sites' first casts (/api/sites rows with
// their first_seq, each looked up once with /api/event). A site whose first
// cast lies before the cursor is found this way only by the two first
// steps. Also the casts' span (castSpanOf), which Fit frames.

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

const after = (c: { ts: number; seq: number }, cur: { ts: number; seq: number }) => c.ts > cur.ts || (c.ts === cur.ts && c.seq > cur.seq);
const asMatch = (c: Cast): Match => ({ agent: c.agent_id, seq: c.seq, ts: c.ts });

export class MatchFinder {
  private cursor: { ts: number; seq: number } | null = null;
  private gen = 0; // a newer key press or filter wins over a search still waiting for answers
  private sites: { rows: SiteRow[]; at: number } | null = null;
  private firstCasts = new Map<string, Match | null>();

  constructor(private readonly run: string, private readonly t: MatchTarget) {}

  /** The filter changed: the next search starts from the view. */
  reset(): void {
    this.cursor = null;
    this.gen++;
  }

  async next(f: CastFilter, match: (c: Cast) => boolean): Promise<void> {
    const gen = ++this.gen;
    const { t0, t1 } = this.t.range();
    const cur = this.cursor && this.cursor.ts >= t0 && this.cursor.ts <= t1 ? this.cursor : { ts: t0, seq: -1 };
    const lanes = this.t.lanes();
    const dense = lanes.some((l) => this.t.data().lanes.get(l.key)?.data.kind === "buckets");
    let found: Match | null = null;
    let wrapped = false;
    try {
      found = this.inLoaded(lanes, cur, match);
      if (!found && !dense) found = await this.scan(lanes, cur, match, gen);
      if (gen !== this.gen) return;
      if (!found) {
        const s = await this.viaSites(f, cur, lanes, gen);
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
    this.t.say(wrapped ? "no later match: back to the first" : "");
    this.t.show(found, dense);
  }

  /** The earliest matching single cast after `cur` in the data fetched. */
  private inLoaded(lanes: Lane[], cur: { ts: number; seq: number }, match: (c: Cast) => boolean): Match | null {
    let best: Cast | null = null;
    for (const lane of lanes) {
      const d = this.t.data().lanes.get(lane.key)?.data;
      if (d?.kind !== "events") continue;
      for (const c of d.casts) if (after(c, cur) && (!best || after(best, c)) && match(c)) best = c;
    }
    return best ? asMatch(best) : null;
  }

  /** The next few windows after the fetched data; stops at the run's end or at a window of density. */
  private async scan(lanes: Lane[], cur: { ts: number; seq: number }, match: (c: Cast) => boolean, gen: number): Promise<Match | null> {
    const { t0, t1 } = this.t.range();
    let width = (t1 - t0) * SCAN_SPANS;
    let from = Math.max(cur.ts, ...lanes.map((l) => this.t.data().lanes.get(l.key)?.window.t1 ?? t1));
    const px = this.t.plotWidth() * SCAN_SPANS;
    for (let i = 0; i < SCAN_WINDOWS && from <= this.t.tMax(); i++, width *= 2) {
      const to = from + width;
      let best: Cast | null = null;
      for (const group of requestGroups(lanes)) {
        const answers = await api.timeline(this.run, group.map((l) => l.track.track), from, to, px);
        if (gen !== this.gen) return null;
        for (const a of answers) {
          if (a.kind !== "events") return null; // too many events: the sites say where to go
          for (const c of a.casts) if (after(c, cur) && (!best || after(best, c)) && match(c)) best = c;
        }
      }
      if (best) return asMatch(best);
      from = to;
    }
    return null;
  }

  /** The earliest first cast after `cur` of the sites the filter can match (the earliest of all when none is after). */
  private async viaSites(f: CastFilter, cur: { ts: number; seq: number }, lanes: Lane[], gen: number): Promise<{ match: Match; wrapped: boolean } | null> {
    if (!this.sites || performance.now() - this.sites.at > SITES_STALE_MS) this.sites = { rows: (await api.sites(this.run)).sites, at: performance.now() };
    if (gen !== this.gen) return null;
    const rows = this.sites.rows.filter((r) => f.site(r)).sort((a, b) => a.first_seq - b.first_seq).slice(0, MAX_SITE_LOOKUPS);
    const agents = [...new Set(lanes.map((l) => l.process.agent_id))];
    let best: Match | null = null;
    let first: Match | null = null;
    for (const row of rows) {
      const m = await this.firstCast(row, agents);
      if (gen !== this.gen) return null;
      if (!m) continue;
      if (!first || after(first, m)) first = m;
      if (after(m, cur) && (!best || after(best, m))) best = m;
    }
    if (best) return { match: best, wrapped: false };
    return first ? { match: first, wrapped: true } : null;
  }

  /** A site row's first cast: its seq is known, its agent is not (the one whose event there is at the row's line). */
  private async firstCast(row: SiteRow, agents: AgentId[]): Promise<Match | null> {
    const key = `${row.first_seq}\u0000${row.line}\u0000${row.file}`;
    if (this.firstCasts.has(key)) return this.firstCasts.get(key)!;
    let found: Match | null = null;
    for (const agent of agents) {
      try {
        const ev = await api.event(this.run, agent, row.first_seq);
        if (ev.kind === "cast" && ev.location.file === row.file && ev.location.line === row.line) {
          found = { agent, seq: ev.seq, ts: ev.ts };
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
