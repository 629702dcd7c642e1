// The page's state lives in the URL hash: #/runs, #/run/<id>/timeline?t0=&t1=,
// #/run/<id>/sites?q=. Views read it and write it back with replaceState.

export type ViewName = "runs" | "timeline" | "sites";

export interface Route {
  view: ViewName;
  run: string | null;
  params: URLSearchParams;
}

export function parseHash(hash: string): Route {
  const raw = hash.replace(/^#/, "");
  const [path, query = ""] = raw.split("?", 2);
  const parts = path.split("/").filter(Boolean);
  const params = new URLSearchParams(query);
  if (parts[0] === "run" && parts.length >= 2) {
    let run: string;
    try {
      run = decodeURIComponent(parts[1]);
    } catch {
      run = parts[1];
    }
    const view = parts[2] === "sites" ? "sites" : "timeline";
    return { view, run, params };
  }
  return { view: "runs", run: null, params };
}

export function hashFor(view: ViewName, run: string | null, params?: Record<string, string | number | undefined>): string {
  let h = view === "runs" || run === null ? "#/runs" : `#/run/${encodeURIComponent(run)}/${view}`;
  if (params) {
    const q = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) if (v !== undefined && v !== "") q.set(k, String(v));
    const s = q.toString();
    if (s) h += `?${s}`;
  }
  return h;
}

/** Rewrites the hash without a history entry or a hashchange-driven rerender. */
export function replaceHash(h: string): void {
  if (location.hash === h) return;
  history.replaceState(null, "", h);
}
