// The fleet page (castscope-collector fleet view): the jobs the fleet's
// PostgreSQL holds, the top casting sites across them and their findings by
// kind. Refreshed every 2 s while a job runs. The window (`since`) and the
// kind shown live in the hash: #/fleet?since=7d&kind=rank-divergence.

import { type FleetFinding, type FleetJob, type FleetQuery, type FleetSiteRow, fleetApi, isAbort } from "../api";
import { clear, h } from "../dom";
import { fmtCount, fmtUnixS } from "../format";
import { linkedText } from "../links";
import { errorText } from "../notice";
import { fleetHash, replaceHash } from "../router";
import { renderFleetFindings } from "./fleet-findings";
import { renderFleetSites } from "./fleet-sites";

const POLL_MS = 2000;
const IDLE_MS = 15000; // no job runs: only a new job would change the page
const RETRY_MS = 5000;
const WINDOWS: [string, string][] = [
  ["", "all time"],
  ["30m", "last 30 minutes"],
  ["12h", "last 12 hours"],
  ["7d", "last 7 days"],
  ["30d", "last 30 days"],
];

export class FleetView {
  readonly el: HTMLElement;
  private jobsEl: HTMLElement;
  private sitesEl: HTMLElement;
  private findingsEl: HTMLElement;
  private status: HTMLElement;
  private since: string;
  private kind: string;
  private findings: FleetFinding[] = [];
  private last = { jobs: "", sites: "", findings: "" };
  private timer = 0;
  private ctrl: AbortController | null = null;
  private destroyed = false;

  constructor(params: URLSearchParams) {
    this.since = params.get("since") ?? "";
    this.kind = params.get("kind") ?? "";
    const select = h("select", { "aria-label": "window", class: "since" });
    const windows = WINDOWS.some(([v]) => v === this.since) ? WINDOWS : [...WINDOWS, [this.since, `since ${this.since}`] as [string, string]];
    for (const [value, label] of windows) select.appendChild(h("option", { value, selected: value === this.since }, label));
    select.addEventListener("change", () => {
      this.since = select.value;
      this.writeHash();
      this.last = { jobs: "", sites: "", findings: "" };
      this.restart();
    });
    this.status = h("span", { class: "muted fleet-status" });
    this.jobsEl = h("div", { class: "fleet-jobs" }, h("p", { class: "muted" }, "loading jobs…"));
    this.sitesEl = h("div", { class: "fleet-sites-body" }, h("p", { class: "muted" }, "loading sites…"));
    this.findingsEl = h("div", { class: "fleet-findings-body" }, h("p", { class: "muted" }, "loading findings…"));
    this.el = h(
      "section",
      { class: "fleet page" },
      h("h1", null, "Fleet"),
      h("div", { class: "toolbar" }, h("label", null, "jobs seen in ", select), this.status),
      h("section", { class: "fleet-section", "aria-label": "jobs" }, h("h2", null, "Jobs"), this.jobsEl),
      h("section", { class: "fleet-section", "aria-label": "sites" }, h("h2", null, "Top casting sites across jobs"), this.sitesEl),
      h("section", { class: "fleet-section", "aria-label": "findings" }, h("h2", null, "Findings by kind"), this.findingsEl),
    );
    this.restart();
  }

  private writeHash(): void {
    replaceHash(fleetHash(null, { since: this.since, kind: this.kind }));
  }

  private restart(): void {
    window.clearTimeout(this.timer);
    this.ctrl?.abort();
    void this.refresh();
  }

  private async refresh(): Promise<void> {
    const ctrl = new AbortController();
    this.ctrl = ctrl;
    const q: FleetQuery = { since: this.since };
    let next = POLL_MS;
    try {
      const [{ jobs }, { sites }, { findings }] = await Promise.all([
        fleetApi.jobs(q, ctrl.signal),
        fleetApi.sites(q, ctrl.signal),
        fleetApi.findings(q, ctrl.signal),
      ]);
      if (this.destroyed || ctrl.signal.aborted) return;
      this.render(jobs, sites, findings);
      const running = jobs.filter((j) => j.running).length;
      this.status.textContent = running ? `${running} running · refreshing every ${POLL_MS / 1000} s` : "";
      if (!running) next = IDLE_MS;
    } catch (e) {
      if (isAbort(e) || this.destroyed) return;
      this.status.textContent = "";
      this.last.jobs = ""; // drawn again once an answer comes, even the same one
      clear(this.jobsEl);
      this.jobsEl.appendChild(h("p", { class: "error" }, `${errorText(e)} (trying again)`));
      next = RETRY_MS;
    }
    if (!this.destroyed && this.ctrl === ctrl) this.timer = window.setTimeout(() => void this.refresh(), next);
  }

  // Each part is redrawn only when its answer changed: a poll must not reset
  // what the reader scrolled to or selected.
  private render(jobs: FleetJob[], sites: FleetSiteRow[], findings: FleetFinding[]): void {
    const changed = (key: "jobs" | "sites" | "findings", value: unknown) => {
      const json = JSON.stringify(value);
      if (json === this.last[key]) return false;
      this.last[key] = json;
      return true;
    };
    if (changed("jobs", jobs)) this.renderJobs(jobs);
    if (changed("sites", sites)) renderFleetSites(this.sitesEl, sites, true);
    if (changed("findings", findings)) {
      this.findings = findings;
      this.renderFindings();
    }
  }

  private renderFindings(): void {
    renderFleetFindings(this.findingsEl, this.findings, {
      showJob: true,
      kind: this.kind,
      onKind: (kind) => {
        this.kind = kind;
        this.writeHash();
        this.renderFindings();
      },
    });
  }

  private renderJobs(jobs: FleetJob[]): void {
    clear(this.jobsEl);
    if (!jobs.length) {
      this.jobsEl.appendChild(h("p", { class: "muted" }, this.since ? "No job in this window." : "No job in the fleet database yet."));
      return;
    }
    const body = h("tbody");
    for (const j of jobs) body.appendChild(jobRow(j));
    this.jobsEl.appendChild(
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          { class: "grid fleet-jobs-table" },
          h("thead", null, h("tr", null, ...[["job"], ["state"], ["nodes"], ["ranks"], ["decisions", "num"], ["findings", "num"], ["first seen"], ["last seen"]].map(([t, c]) => h("th", { class: c }, t)))),
          body,
        ),
      ),
    );
  }

  destroy(): void {
    this.destroyed = true;
    this.ctrl?.abort();
    window.clearTimeout(this.timer);
  }
}

function jobRow(j: FleetJob): HTMLElement {
  const ranks = [...j.ranks].sort((a, b) => a - b);
  const ranked = ranks.filter((r) => r >= 0);
  const unranked = ranks.length - ranked.length;
  const nodes = j.nodes.map((n, i) => [i ? ", " : null, linkedText(n.viewer, n.node || "(unnamed node)", "open this node's viewer")]);
  return h(
    "tr",
    { "data-job": j.job, class: j.running ? "is-running" : "" },
    h("td", { class: "job" }, h("a", { href: fleetHash(j.job) }, j.job)),
    h("td", { class: "state" }, j.running ? h("span", { class: "badge live" }, "running") : h("span", { class: "badge done" }, "ended")),
    h("td", { class: "nodes" }, ...nodes.flat()),
    h(
      "td",
      { class: "ranks" },
      ranked.join(", ") || "—",
      // -1: a process that set no RANK, e.g. torchrun's launcher.
      unranked ? h("span", { class: "muted", title: "processes without RANK (such as torchrun's launcher)" }, ` +${unranked} unranked`) : null,
    ),
    h("td", { class: "num" }, fmtCount(j.casts)),
    h("td", { class: j.findings ? "num warn" : "num" }, fmtCount(j.findings)),
    h("td", { class: "time" }, fmtUnixS(j.first_seen_unix_s)),
    h("td", { class: "time" }, fmtUnixS(j.last_seen_unix_s)),
  );
}
