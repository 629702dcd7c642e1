// The page's state lives in the URL hash: #/runs, #/run/<id>/timeline?t0=&t1=,
// #/run/<id>/sites?q=, #/run/<id>/modules, #/live (waits, then opens the newest live run that
// sends events); on the fleet page (castscope-collector fleet view)
// #/fleet?since=&kind= and #/fleet/job/<id>. Views read it and write it back
// with replaceState; a jump the user may want to undo (a finding's site on the
// timeline) pushes an entry instead, so Back returns to where it started.

export type ViewName = "runs" | "live" | "timeline" | "sites" | "modules" | "fleet" | "fleet-job";

export interface Route {
  view: ViewName;
  run: string | null;
  /** The fleet job (#/fleet/job/<id>); null elsewhere. */
  job: string | null;
  params: URLSearchParams;
}

function decode(part: string): string {
  try {
    return decodeURIComponent(part);
  } catch {
    return part;
  }
}

export function parseHash(hash: string): Route {
  const raw = hash.replace(/^#/, "");
  const [path, query = ""] = raw.split("?", 2);
  const parts = path.split("/").filter(Boolean);
  const params = new URLSearchParams(query);
  if (parts[0] === "run" && parts.length >= 2) {
    const view = parts[2] === "sites" ? "sites" : parts[2] === "modules" ? "modules" : "timeline";
    return { view, run: decode(parts[1]), job: null, params };
  }
  if (parts[0] === "live") return { view: "live", run: null, job: null, params };
  if (parts[0] === "fleet") {
    if (parts[1] === "job" && parts.length >= 3) return { view: "fleet-job", run: null, job: decode(parts[2]), params };
    return { view: "fleet", run: null, job: null, params };
  }
  return { view: "runs", run: null, job: null, params };
}

function withQuery(h: string, params?: Record<string, string | number | undefined>): string {
  if (!params) return h;
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== "") q.set(k, String(v));
  const s = q.toString();
  return s ? `${h}?${s}` : h;
}

export function hashFor(view: "runs" | "timeline" | "sites" | "modules", run: string | null, params?: Record<string, string | number | undefined>): string {
  return withQuery(view === "runs" || run === null ? "#/runs" : `#/run/${encodeURIComponent(run)}/${view}`, params);
}

/** The fleet page (job null) or one job's page. */
export function fleetHash(job: string | null, params?: Record<string, string | number | undefined>): string {
  return withQuery(job === null ? "#/fleet" : `#/fleet/job/${encodeURIComponent(job)}`, params);
}

/** Rewrites the hash without a history entry or a hashchange-driven rerender. */
export function replaceHash(h: string): void {
  if (location.hash === h) return;
  history.replaceState(null, "", h);
}

/** Sets the hash with a history entry of its own (Back returns to the one before), without a rerender. */
export function pushHash(h: string): void {
  history.pushState(null, "", h);
}
