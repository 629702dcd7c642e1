// One fleet job (#/fleet/job/<id>): its ranks as their node collectors last
// shipped them (each linked to its node's viewer when that is a web URL),
// its findings and its top casting sites. Refreshed every 2 s while a rank
// has not finished.

import { type FleetJobAnswer, type FleetRank, type FleetSiteRow, fleetApi, isAbort } from "../api";
import { clear, h } from "../dom";
import { fmtCount } from "../format";
import { externalLink } from "../links";
import { errorText } from "../notice";
import { fleetHash, replaceHash } from "../router";
import { renderFleetFindings } from "./fleet-findings";
import { renderFleetSites } from "./fleet-sites";

const POLL_MS = 2000;
const IDLE_MS = 15000; // no such job (yet): it may still come
const RETRY_MS = 5000;

export class FleetJobView {
  readonly el: HTMLElement;
  private head: HTMLElement;
  private ranksEl: HTMLElement;
  private findingsEl: HTMLElement;
  private sitesEl: HTMLElement;
  private answer: FleetJobAnswer | null = null;
  private last = { job: "", sites: "" };
  private timer = 0;
  private ctrl: AbortController | null = null;
  private destroyed = false;

  constructor(private readonly job: string, private kind: string) {
    this.head = h("span", { class: "muted" });
    this.ranksEl = h("div", { class: "fleet-ranks" }, h("p", { class: "muted" }, "loading ranks…"));
    this.findingsEl = h("div", { class: "fleet-findings-body" });
    this.sitesEl = h("div", { class: "fleet-sites-body" });
    this.el = h(
      "section",
      { class: "fleet-job page" },
      h("p", { class: "crumbs" }, h("a", { href: fleetHash(null) }, "← all jobs")),
      h("h1", null, "Job ", h("code", { class: "job-name" }, job), " ", this.head),
      h("section", { class: "fleet-section", "aria-label": "ranks" }, h("h2", null, "Ranks"), this.ranksEl),
      h("section", { class: "fleet-section", "aria-label": "findings" }, h("h2", null, "Findings"), this.findingsEl),
      h("section", { class: "fleet-section", "aria-label": "sites" }, h("h2", null, "Top casting sites"), this.sitesEl),
    );
    void this.refresh();
  }

  private async refresh(): Promise<void> {
    const ctrl = new AbortController();
    this.ctrl = ctrl;
    let next = POLL_MS;
    try {
      const [answer, { sites }] = await Promise.all([fleetApi.job(this.job, ctrl.signal), fleetApi.sites({ job: this.job }, ctrl.signal)]);
      if (this.destroyed) return;
      this.render(answer, sites);
      if (answer.ranks.length && answer.ranks.every((r) => r.finished)) return; // nothing more will change
      if (!answer.ranks.length) next = IDLE_MS;
    } catch (e) {
      if (isAbort(e) || this.destroyed) return;
      clear(this.ranksEl);
      this.ranksEl.appendChild(h("p", { class: "error" }, `${errorText(e)} (trying again)`));
      this.last.job = "";
      next = RETRY_MS;
    }
    if (!this.destroyed) this.timer = window.setTimeout(() => void this.refresh(), next);
  }

  private render(answer: FleetJobAnswer, sites: FleetSiteRow[]): void {
    const json = JSON.stringify(answer);
    if (json !== this.last.job) {
      this.last.job = json;
      this.answer = answer;
      this.renderRanks(answer.ranks);
      this.renderFindings();
    }
    const sitesJson = JSON.stringify(sites);
    if (sitesJson !== this.last.sites) {
      this.last.sites = sitesJson;
      renderFleetSites(this.sitesEl, sites, false);
    }
  }

  private renderFindings(): void {
    renderFleetFindings(this.findingsEl, this.answer?.findings ?? [], {
      showJob: false,
      kind: this.kind,
      onKind: (kind) => {
        this.kind = kind;
        replaceHash(fleetHash(this.job, { kind }));
        this.renderFindings();
      },
    });
  }

  private renderRanks(ranks: FleetRank[]): void {
    clear(this.ranksEl);
    if (!ranks.length) {
      this.head.textContent = "";
      this.ranksEl.appendChild(h("p", { class: "muted" }, "The fleet database has no such job."));
      return;
    }
    const running = ranks.some((r) => !r.finished);
    clear(this.head);
    this.head.appendChild(running ? h("span", { class: "badge live" }, "running") : h("span", { class: "badge done" }, "ended"));
    const body = h("tbody");
    for (const r of ranks) {
      const viewer = externalLink(r.viewer, "open", "this node's viewer (its own token applies)");
      body.appendChild(
        h(
          "tr",
          { "data-agent": r.agent_id, "data-rank": r.rank },
          h("td", { class: "node" }, r.node),
          // -1: the process set no RANK (torchrun's launcher).
          h("td", { class: "num rank" }, r.rank >= 0 ? String(r.rank) : "—"),
          h("td", { class: "num" }, r.local_rank >= 0 ? String(r.local_rank) : "—"),
          h("td", { class: "num" }, r.world_size > 0 ? String(r.world_size) : "—"),
          h("td", { class: "num" }, String(r.pid)),
          h("td", { class: "num" }, fmtCount(r.casts)),
          h("td", { class: "num" }, fmtCount(r.ops)),
          h("td", { class: r.events_dropped ? "num bad" : "num" }, fmtCount(r.events_dropped)),
          h("td", { class: "state" }, r.finished ? "finished" : h("span", { class: "live-dot" }, "running")),
          h("td", { class: "viewer" }, viewer ?? h("span", { class: "muted" }, "—")),
        ),
      );
    }
    this.ranksEl.appendChild(
      h(
        "div",
        { class: "table-wrap" },
        h(
          "table",
          { class: "grid fleet-ranks-table" },
          h("thead", null, h("tr", null, ...[["node"], ["rank", "num"], ["local rank", "num"], ["world size", "num"], ["pid", "num"], ["decisions", "num"], ["ops", "num"], ["dropped", "num"], ["state"], ["viewer"]].map(([t, c]) => h("th", { class: c }, t)))),
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
