// Runs: every run in the store, its processes, what was lost on the way, and
// its findings by severity, each count a link to them beside its timeline.

import type { Agent, Run } from "../api";
import { clear, h } from "../dom";
import { fmtCount, fmtUnixNs } from "../format";
import { errorText } from "../notice";
import { hashFor } from "../router";
import { RunsPoll, runsPage } from "./runs-poll";

const POLL_MS = 3000;
const SEVERITIES = ["critical", "error", "warning", "info"];

export class RunsView {
  readonly el: HTMLElement;
  private body: HTMLElement;
  private poll: RunsPoll;

  constructor() {
    this.body = h("div", { class: "runs-body" }, h("p", { class: "muted" }, "loading runs…"));
    this.el = runsPage(
      "runs",
      "Runs",
      "recorded: events a process recorded; stored: events in the store; undelivered = recorded − stored (in flight while a process runs, lost once it finished). Dropped, GPU records dropped and missing batches are losses the agents counted.",
      this.body,
    );
    this.poll = new RunsPoll(
      POLL_MS,
      (runs) => {
        this.render(runs);
        // Poll while something may still change: a live run, or none yet (a job just started).
        return runs.length === 0 || runs.some((r) => r.live);
      },
      (e) => {
        clear(this.body);
        this.body.appendChild(h("p", { class: "error" }, errorText(e)));
        return false;
      },
    );
  }

  private render(runs: Run[]): void {
    clear(this.body);
    if (!runs.length) {
      this.body.appendChild(h("p", { class: "muted" }, "No runs in this store yet."));
      return;
    }
    const sorted = [...runs].sort((a, b) => Number(BigInt(b.first_seen_unix_ns) - BigInt(a.first_seen_unix_ns)) || 0);
    for (const run of sorted) this.body.appendChild(runCard(run));
  }

  destroy(): void {
    this.poll.stop();
  }
}

/** The run's stored findings as counts by severity, each a link to that severity's findings beside the timeline. */
function findingsSummary(run: Run): HTMLElement | null {
  const counts: Record<string, number> = run.findings;
  const known = new Set(SEVERITIES);
  const order = [...SEVERITIES, ...Object.keys(counts).filter((s) => !known.has(s))];
  const links = order
    .filter((sev) => (counts[sev] ?? 0) > 0)
    .map((sev) =>
      h(
        "a",
        { class: `badge sev-${sev.toLowerCase().replace(/[^a-z0-9-]/g, "")} finding-count`, "data-severity": sev, href: hashFor("timeline", run.run_id, { findings: sev }), title: `the ${sev} findings, beside the timeline` },
        `${fmtCount(counts[sev])} ${sev}`,
      ),
    );
  // A live run's findings are stored when it ends: no count yet is no "none".
  if (!links.length) return run.live ? null : h("span", { class: "muted run-findings" }, "no findings");
  return h("span", { class: "run-findings" }, ...links);
}

/** What the store holds of an agent's events: the server's own count when it sends one. */
function stored(a: Agent): number {
  if (typeof a.events_stored === "number") return a.events_stored;
  return (a.casts ?? 0) + (a.ops ?? 0) + (a.cache_samples ?? 0) + (a.kernels ?? 0);
}

function runCard(run: Run): HTMLElement {
  const totals = run.agents.reduce(
    (t, a) => ({ casts: t.casts + (a.casts ?? 0), ops: t.ops + (a.ops ?? 0), dropped: t.dropped + (a.events_dropped ?? 0) + (a.gpu_records_dropped ?? 0) }),
    { casts: 0, ops: 0, dropped: 0 },
  );
  const open = h("a", { href: hashFor("timeline", run.run_id), class: "run-open" }, "Open timeline →");
  const sites = h("a", { href: hashFor("sites", run.run_id), class: "run-sites" }, "Sites");
  const rows = h("tbody");
  for (const a of [...run.agents].sort((x, y) => x.rank - y.rank || x.pid - y.pid)) {
    const missingBatches = a.missing_batches ?? 0;
    const st = stored(a);
    const gap = (a.events_recorded ?? 0) - st;
    const gapCell =
      gap > 0
        ? h("td", { class: a.finished ? "bad num" : "warn num", title: a.finished ? "recorded by the agent but not in the store" : "still in flight while the process runs" }, `${fmtCount(gap)} ${a.finished ? "missing" : "in flight"}`)
        : h("td", { class: "num ok" }, "none");
    const lost = (n: number | undefined) => h("td", { class: n ? "bad num" : "num" }, fmtCount(n ?? 0));
    rows.appendChild(
      h(
        "tr",
        { "data-agent": a.agent_id },
        h("td", { class: "num" }, a.rank >= 0 ? String(a.rank) : "—"),
        h("td", null, a.hostname),
        h("td", { class: "num" }, String(a.pid)),
        h("td", { class: "cmd", title: a.command }, a.command),
        h("td", null, a.finished ? "finished" : h("span", { class: "live-dot" }, "running")),
        h("td", { class: "num" }, fmtCount(a.casts ?? 0)),
        h("td", { class: "num" }, fmtCount(a.ops ?? 0)),
        h("td", { class: "num" }, fmtCount(a.kernels ?? 0)),
        h("td", { class: "num" }, fmtCount(a.events_recorded ?? 0)),
        h("td", { class: "num" }, fmtCount(st)),
        gapCell,
        lost(a.events_dropped),
        lost(a.gpu_records_dropped),
        lost(missingBatches),
      ),
    );
  }
  const table = h(
    "table",
    { class: "grid agents" },
    h(
      "thead",
      null,
      h(
        "tr",
        null,
        ...["rank", "host", "pid", "command", "state", "casts", "ops", "kernels", "recorded", "stored", "undelivered", "dropped", "GPU dropped", "missing batches"].map((t) => h("th", null, t)),
      ),
    ),
    rows,
  );
  return h(
    "article",
    { class: `run-card ${run.live ? "is-live" : ""}`, "data-run": run.run_id },
    h(
      "header",
      null,
      h("h2", null, h("a", { href: hashFor("timeline", run.run_id) }, run.run_id)),
      h("span", { class: run.live ? "badge live" : "badge done" }, run.live ? "live" : "finished"),
      h("span", { class: "muted" }, ` ${fmtUnixNs(run.first_seen_unix_ns)} → ${fmtUnixNs(run.last_seen_unix_ns)}`),
      h("span", { class: "muted" }, ` · ${run.agents.length} process${run.agents.length === 1 ? "" : "es"} · ${fmtCount(totals.casts)} casts · ${fmtCount(totals.ops)} ops`),
      findingsSummary(run),
      totals.dropped ? h("span", { class: "badge bad" }, `${fmtCount(totals.dropped)} lost`) : null,
      run.agents.some((a) => a.aggregate)
        ? h("span", { class: "badge aggregate", title: "casts and ops count counter rows; no timeline of casts (docs/aggregate.md)" }, "aggregate mode: counters only")
        : null,
      h("span", { class: "spacer" }),
      sites,
      open,
    ),
    h("div", { class: "table-wrap" }, table),
  );
}
