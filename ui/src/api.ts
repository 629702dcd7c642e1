// The collector's HTTP API as the page sees it: its answers are declared in
// docs/schema/viewer-api.schema.json. Times are integer nanoseconds since the
// run's origin; origin_ns stays a string. The fleet page (castscope-collector
// fleet view) has /api/fleet/* alone.

import type {
  AgentId,
  BucketColumns,
  Cast,
  CountersAnswer,
  EventAnswer,
  FindingsAnswer,
  FleetFindingsAnswer,
  FleetJobAnswer,
  FleetJobsAnswer,
  FleetSitesAnswer,
  Kernel,
  NumericsAnswer,
  Op,
  RunsAnswer,
  ModulesAnswer,
  SitesAnswer,
  TimelineAnswer,
  TimelineBuckets,
  TimelineEvents,
  TracksAnswer,
} from "./api-types";

// The answers' types are generated from the schema (api-types.mjs).
export type * from "./api-types";

/** One bucket as the page draws it: row i of a lane's BucketColumns, its modes named. */
export type Bucket = { [K in Exclude<keyof BucketColumns, "modes">]: number } & { modes: string[] };

/** One lane of /api/timeline's answer as the page draws it: its events in
 * full (agent id and location object in each, as /api/live sends them), its
 * bucket columns turned into rows. */
export type LaneAnswer =
  | (Omit<TimelineEvents, "agent_id" | "locations" | "ops" | "casts" | "kernels"> & { ops: Op[]; casts: Cast[]; kernels: Kernel[] })
  | (Omit<TimelineBuckets, "buckets"> & { buckets: Bucket[] });

/** The lane's events completed in place: its agent id into each, each location index replaced by its entry. */
function eventsInFull(lane: TimelineEvents): LaneAnswer {
  const { agent_id, locations } = lane;
  const complete = (events: object[], located: boolean) => {
    for (const e of events as Record<string, unknown>[]) {
      e.agent_id = agent_id;
      if (located) e.location = locations[e.location as number];
    }
  };
  complete(lane.ops, true);
  complete(lane.casts, true);
  complete(lane.kernels, false);
  const { track, events, kind } = lane;
  return { track, events, kind, ops: lane.ops as unknown as Op[], casts: lane.casts as unknown as Cast[], kernels: lane.kernels as unknown as Kernel[] };
}

const NO_MODES: string[] = [];

function bucketRows(c: BucketColumns, modeNames: string[]): Bucket[] {
  const rows: Bucket[] = new Array(c.t.length);
  // Most buckets share one mode set (eager): one array per distinct mask.
  const modesOf = new Map<number, string[]>();
  for (let i = 0; i < c.t.length; i++) {
    const mask = c.modes[i];
    let modes = modesOf.get(mask);
    if (!modes) {
      modes = mask ? modeNames.filter((_, bit) => bit > 0 && Math.floor(mask / 2 ** bit) % 2 === 1) : NO_MODES;
      modesOf.set(mask, modes);
    }
    rows[i] = {
      t: c.t[i], ops: c.ops[i], op_ns: c.op_ns[i], decisions: c.decisions[i], casts: c.casts[i], bytes: c.bytes[i],
      miss: c.miss[i], hit: c.hit[i], stale_hit: c.stale_hit[i], backward: c.backward[i], to_bfloat16: c.to_bfloat16[i],
      to_float16: c.to_float16[i], to_float32: c.to_float32[i], modes, kernels: c.kernels[i], kernel_ns: c.kernel_ns[i],
    };
  }
  return rows;
}

async function timeline(run: string, tracks: string[], t0: number, t1: number, px: number, signal?: AbortSignal): Promise<LaneAnswer[]> {
  const params = { run, tracks: tracks.join(","), t0: Math.floor(t0), t1: Math.ceil(t1), px: Math.max(1, Math.round(px)) };
  const answer = await get<TimelineAnswer>("/api/timeline", params, signal);
  return answer.lanes.map((lane) => (lane.kind === "buckets" ? { ...lane, buckets: bucketRows(lane.buckets, answer.mode_names) } : eventsInFull(lane)));
}

export class ApiError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

async function get<T>(path: string, params: Record<string, string | number | undefined>, signal?: AbortSignal): Promise<T> {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined) q.set(k, String(v));
  const url = q.toString() ? `${path}?${q}` : path;
  const res = await fetch(url, { signal, credentials: "same-origin", headers: { Accept: "application/json" } });
  if (!res.ok) {
    let msg = `${res.status} ${res.statusText}`;
    try {
      const body = (await res.json()) as { error?: string };
      if (body && typeof body.error === "string") msg = `${res.status}: ${body.error}`;
    } catch {
      /* not JSON: keep the status line */
    }
    throw new ApiError(res.status, `GET ${path}: ${msg}`);
  }
  return (await res.json()) as T;
}

export const api = {
  runs: (signal?: AbortSignal) => get<RunsAnswer>("/api/runs", {}, signal),
  tracks: (run: string, signal?: AbortSignal) => get<TracksAnswer>("/api/tracks", { run }, signal),
  /** Every lane of one view step in one request; the lanes in the order asked. */
  timeline,
  event: (run: string, agent: AgentId, seq: number, signal?: AbortSignal) =>
    get<EventAnswer>("/api/event", { run, agent, seq }, signal),
  counters: (run: string, t0: number, t1: number, points: number, signal?: AbortSignal) =>
    get<CountersAnswer>("/api/counters", { run, t0: Math.floor(t0), t1: Math.ceil(t1), points: Math.max(2, Math.round(points)) }, signal),
  findings: (run: string, signal?: AbortSignal) => get<FindingsAnswer>("/api/findings", { run }, signal),
  sites: (run: string, signal?: AbortSignal) => get<SitesAnswer>("/api/sites", { run }, signal),
  modules: (run: string, signal?: AbortSignal) => get<ModulesAnswer>("/api/modules", { run }, signal),
  numerics: (run: string, signal?: AbortSignal) => get<NumericsAnswer>("/api/numerics", { run }, signal),
};

/** What the fleet routes take: `since` is 7d, 12h, 30m or Unix seconds; empty ones are left out. */
export interface FleetQuery {
  since?: string;
  job?: string;
  kind?: string;
}

const opt = (v: string | undefined) => v || undefined;

export const fleetApi = {
  jobs: (q: FleetQuery, signal?: AbortSignal) => get<FleetJobsAnswer>("/api/fleet/jobs", { since: opt(q.since) }, signal),
  sites: (q: FleetQuery, signal?: AbortSignal) =>
    get<FleetSitesAnswer>("/api/fleet/sites", { since: opt(q.since), job: opt(q.job) }, signal),
  findings: (q: FleetQuery, signal?: AbortSignal) =>
    get<FleetFindingsAnswer>("/api/fleet/findings", { since: opt(q.since), job: opt(q.job), kind: opt(q.kind) }, signal),
  job: (job: string, signal?: AbortSignal) => get<FleetJobAnswer>("/api/fleet/job", { job }, signal),
};

/**
 * Whether this server is the fleet page (castscope-collector fleet view: no
 * store, /api/fleet/* alone) or a run's collector (/api/runs). One probe, the
 * route the page is on picks which: a fleet route asks /api/fleet/jobs (it
 * answers, or 5xx when PostgreSQL failed), any other /api/runs (404 only on
 * the fleet page). So a run's pages never ask a route their server lacks.
 * A request that fails outright leaves the page a run viewer.
 */
export async function isFleetServer(onFleetRoute: boolean): Promise<boolean> {
  try {
    const res = await fetch(onFleetRoute ? "/api/fleet/jobs" : "/api/runs", { credentials: "same-origin", headers: { Accept: "application/json" } });
    return onFleetRoute ? res.ok || res.status >= 500 : res.status === 404;
  } catch {
    return false;
  }
}

export function isAbort(e: unknown): boolean {
  return e instanceof DOMException && e.name === "AbortError";
}
