// The collector's HTTP API as the page sees it (docs/viewer.md). Times are
// integer nanoseconds since the run's origin; origin_ns stays a string.

/** Agents are named by the server ("host-pid-start"); only ever compared and sent back. */
export type AgentId = string | number;

export interface Agent {
  agent_id: AgentId;
  pid: number;
  rank: number;
  local_rank: number;
  world_size: number;
  hostname: string;
  command: string;
  torch_version: string;
  batches: number;
  casts: number;
  ops: number;
  kernels: number;
  cache_samples: number;
  events_recorded: number;
  events_stored?: number; // not in docs/viewer.md; sent by the server
  missing_batches?: number; // not in docs/viewer.md; sent by the server
  events_dropped: number;
  internal_errors: number;
  gpu_timing: unknown;
  gpu_records_dropped: number;
  finished: boolean;
  aggregate?: boolean; // aggregate mode (docs/aggregate.md): counters only, casts and ops count counter rows
}

export interface Run {
  run_id: string;
  first_seen_unix_ns: string; // decimal: past 2^53
  last_seen_unix_ns: string;
  live: boolean;
  agents: Agent[];
}

export interface Track {
  track: number | string;
  kind: "thread" | "gpu";
  name: string;
  thread?: number | string | null;
  device?: number | null;
  stream?: number | null;
  events: number;
  t_min: number;
  t_max: number;
}

export interface Process {
  agent_id: AgentId;
  label: string;
  pid: number;
  rank: number;
  hostname: string;
  tracks: Track[];
}

export interface Tracks {
  run_id: string;
  origin_ns: string;
  t_max: number;
  processes: Process[];
}

export interface Location {
  file: string;
  line: number;
  function?: string;
  source?: string | null;
}

export interface Op {
  agent_id: AgentId;
  seq: number;
  ts: number;
  dur: number;
  op: string;
  policy: string;
  outcome: string;
  mode: string;
  phase: string;
  output_dtype: string;
  input_dtypes: string[];
  thread?: number | string; // not in docs/viewer.md; the thread track it ran on
  location?: Location | null;
}

export interface Cast {
  agent_id: AgentId;
  seq: number;
  ts: number;
  op_seq: number;
  op: string;
  arg: string | number;
  list_index: number;
  policy: string;
  src: string;
  dst: string;
  outcome: string;
  role: string;
  cache: string;
  mode: string;
  phase: string;
  bytes: number;
  shape: number[] | string;
  thread?: number | string; // not in docs/viewer.md; the thread track it ran on
  location?: Location | null;
}

export interface Kernel {
  agent_id: AgentId;
  seq: number;
  ts: number;
  dur: number;
  name: string;
  activity: string;
  launched_by: string;
  launch_seq: number;
  device: number;
  stream: number;
  bytes: number;
}

export interface Bucket {
  t: number;
  ops: number;
  op_ns: number;
  decisions: number;
  casts: number;
  bytes: number;
  miss: number;
  hit: number;
  stale_hit: number;
  backward: number;
  to_bfloat16: number;
  to_float16: number;
  to_float32: number;
  modes: string[];
  kernels: number;
  kernel_ns: number;
}

export type Timeline =
  | { kind: "events"; ops: Op[]; casts: Cast[]; kernels: Kernel[] }
  | { kind: "buckets"; bucket_ns: number; buckets: Bucket[] };

export interface Counters {
  bucket_ns: number;
  t: number[];
  casts_per_s: number[];
  bytes_per_s: number[];
  cache: { agent_id: AgentId; t: number[]; live_casts: number[]; live_bytes: number[] }[];
  steps: { agent_id: AgentId; t: number; iteration: number }[];
}

export interface Site {
  file: string;
  line: number;
  function: string;
  op: string;
  arg: string | number;
}

export interface Finding {
  id: string | number;
  kind: string;
  severity: string;
  summary: string;
  explanation?: string;
  fix?: string;
  sites: Site[];
  evidence?: unknown;
}

export interface SiteRow extends Site {
  first_seq: number;
  total: number;
  bytes: number;
  hits: number;
  stale_hits: number;
  by_mode: Record<string, Record<string, number>>;
  mismatch: boolean;
}

export type EventDetail = Record<string, unknown> & {
  kind: "cast" | "op" | "kernel";
  location?: Location | null;
};

export class ApiError extends Error {
  constructor(readonly status: number, message: string) {
    super(message);
  }
}

async function get<T>(path: string, params: Record<string, string | number>, signal?: AbortSignal): Promise<T> {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) q.set(k, String(v));
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
  runs: (signal?: AbortSignal) => get<{ runs: Run[] }>("/api/runs", {}, signal),
  tracks: (run: string, signal?: AbortSignal) => get<Tracks>("/api/tracks", { run }, signal),
  timeline: (run: string, track: number | string, t0: number, t1: number, px: number, signal?: AbortSignal) =>
    get<Timeline>("/api/timeline", { run, track, t0: Math.floor(t0), t1: Math.ceil(t1), px: Math.max(1, Math.round(px)) }, signal),
  event: (run: string, agent: AgentId, seq: number, signal?: AbortSignal) =>
    get<EventDetail>("/api/event", { run, agent, seq }, signal),
  counters: (run: string, t0: number, t1: number, points: number, signal?: AbortSignal) =>
    get<Counters>("/api/counters", { run, t0: Math.floor(t0), t1: Math.ceil(t1), points: Math.max(2, Math.round(points)) }, signal),
  findings: (run: string, signal?: AbortSignal) => get<{ findings: Finding[] }>("/api/findings", { run }, signal),
  sites: (run: string, signal?: AbortSignal) => get<{ sites: SiteRow[] }>("/api/sites", { run }, signal),
};

export function isAbort(e: unknown): boolean {
  return e instanceof DOMException && e.name === "AbortError";
}
