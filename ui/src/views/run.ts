// The run page: the timeline with its counters below and findings and event
// details beside it, the live feed while the run is live, and the test hooks.

import { api, type ReportSite, type SiteRow } from "../api";
import { h } from "../dom";
import { fmtDuration, fmtTick } from "../format";
import { LiveFeed } from "../live";
import { errorText, notice } from "../notice";
import { hashFor, replaceHash } from "../router";
import { stats } from "../stats";
import { TimelineView } from "../timeline/view";
import { CountersView } from "./counters";
import { DetailPanel } from "./detail";
import { FindingsPanel } from "./findings";

const RUN_POLL_MS = 2000;
const TRACKS_POLL_MS = 2000;
const JUMP_MIN_SPAN = 2e6; // at least 2 ms from a site's first cast on

export class RunPage {
  readonly el: HTMLElement;
  private timeline: TimelineView;
  private counters: CountersView;
  private findings: FindingsPanel;
  private detail: DetailPanel;
  private live: LiveFeed | null = null;
  private isLive = false;
  private runTimer = 0;
  private tracksTimer = 0;
  private hashTimer = 0;
  private destroyed = false;
  private sites: SiteRow[] | null = null;
  private connEl: HTMLElement | null = document.getElementById("conn");

  constructor(private readonly run: string, params: URLSearchParams) {
    this.timeline = new TimelineView(run, {
      rangeChanged: (t0, t1, live, busy) => this.rangeChanged(t0, t1, live, busy),
      select: (agent, seq) => void this.detail.show(agent, seq),
      note: (blocks) => this.detail.showNote(blocks),
      filterChanged: () => this.writeHash(),
    });
    this.counters = new CountersView(run, (t0, t1) => this.timeline.setRange(t0, t1));
    this.findings = new FindingsPanel(run, (site) => void this.jumpToSite(site));
    this.detail = new DetailPanel(run, () => this.timeline.select(null));
    this.el = h(
      "div",
      { class: "run-page" },
      h("div", { class: "run-main" }, this.timeline.el, this.counters.el),
      h("aside", { class: "run-side" }, this.detail.el, this.findings.el),
    );
    this.installHooks();
    void this.start(params);
  }

  private async start(params: URLSearchParams): Promise<void> {
    try {
      const { runs } = await api.runs();
      const run = runs.find((r) => r.run_id === this.run);
      if (!run) {
        notice(`run ${this.run} is not in this store`, "error", 0);
        return;
      }
      this.isLive = run.live;
      if (!run.live) this.counters.setRunCacheSamples(run.agents.reduce((n, a) => n + (a.cache_samples ?? 0), 0));
      const num = (k: string) => (params.has(k) ? Number(params.get(k)) : undefined);
      await this.timeline.load({ t0: num("t0"), t1: num("t1"), q: params.get("q") ?? undefined }, run.live);
      if (this.destroyed) return;
      this.findings.setLive(run.live);
      if (!run.live) void this.findings.refresh();
      this.timeline.setLive(run.live);
      this.counters.setRange(this.timeline.range.t0, this.timeline.range.t1);
      if (run.live) this.openLive();
    } catch (e) {
      notice(`cannot open run ${this.run}: ${errorText(e)}`, "error", 0);
    }
  }

  private openLive(): void {
    this.live = new LiveFeed(this.run, {
      batch: (b) => this.timeline.onBatch(b),
      skipped: (n) => this.timeline.onSkipped(n),
      state: (s) => {
        if (this.connEl) {
          this.connEl.textContent = s === "open" ? "● live" : s === "connecting" ? "○ connecting" : s === "error" ? "○ reconnecting" : "";
          this.connEl.className = `conn ${s}`;
        }
      },
    });
    this.live.open();
    this.pollRun();
    this.pollTracks();
  }

  /** Watches for the run's end: then stops the feed and refetches once. */
  private pollRun(): void {
    this.runTimer = window.setTimeout(async () => {
      if (this.destroyed) return;
      try {
        const { runs } = await api.runs();
        const run = runs.find((r) => r.run_id === this.run);
        if (run && !run.live) {
          this.isLive = false;
          this.live?.close();
          this.live = null;
          window.clearTimeout(this.tracksTimer);
          this.timeline.setTracks(await api.tracks(this.run));
          this.timeline.setLive(false);
          this.findings.setLive(false);
          void this.findings.refresh();
          this.counters.schedule();
          notice("the run finished", "info");
          if (this.connEl) this.connEl.textContent = "finished";
          return;
        }
      } catch {
        /* try again */
      }
      this.pollRun();
    }, RUN_POLL_MS);
  }

  private pollTracks(): void {
    this.tracksTimer = window.setTimeout(async () => {
      if (this.destroyed || !this.isLive) return;
      try {
        this.timeline.setTracks(await api.tracks(this.run));
      } catch {
        /* try again */
      }
      this.pollTracks();
    }, TRACKS_POLL_MS);
  }

  private rangeChanged(t0: number, t1: number, live = false, busy = false): void {
    this.counters.setRange(t0, t1, live, busy);
    this.writeHash();
  }

  /** The view's range (none while following) and the timeline's filter, in the hash. */
  private writeHash(): void {
    window.clearTimeout(this.hashTimer);
    this.hashTimer = window.setTimeout(() => {
      if (this.destroyed) return;
      const { t0, t1 } = this.timeline.range;
      const range = this.timeline.following ? {} : { t0: Math.round(t0), t1: Math.round(t1) };
      replaceHash(hashFor("timeline", this.run, { ...range, q: this.timeline.filterText || undefined }));
    }, 300);
  }

  /** Finds a site's first cast (sites give first_seq, not the agent) and centres the view on it. */
  async jumpToSite(site: { file: string; line: number; op?: string; arg?: string | number }): Promise<boolean> {
    this.timeline.setHighlights([site]);
    try {
      if (!this.sites || this.isLive) this.sites = (await api.sites(this.run)).sites;
      const candidates = this.sites.filter((s) => s.file === site.file && s.line === site.line);
      const exact = candidates.filter((s) => (site.op === undefined || s.op === site.op) && (site.arg === undefined || String(s.arg) === String(site.arg)));
      const rows = (exact.length ? exact : candidates).sort((a, b) => a.first_seq - b.first_seq);
      const agents = (await api.tracks(this.run)).processes.map((p) => p.agent_id);
      for (const row of rows) {
        for (const agent of agents) {
          try {
            const ev = await api.event(this.run, agent, row.first_seq);
            if ("location" in ev && ev.location.file === site.file && ev.location.line === site.line && typeof ev.ts === "number") {
              // Show several of the site's casts: an eighth of the run from the first one on.
              const span = Math.max(JUMP_MIN_SPAN, this.timeline.tMax / 8);
              this.timeline.jumpTo(ev.ts, span, 0.1);
              notice(`${site.file}:${site.line}: first cast at ${fmtDuration(ev.ts)}; its casts are highlighted`, "info");
              return true;
            }
          } catch {
            /* not this agent's event */
          }
        }
      }
      notice(`no cast found for ${site.file}:${site.line}; marks at that line are highlighted where drawn`, "warn");
    } catch (e) {
      notice(`jump to ${site.file}:${site.line}: ${errorText(e)}`, "error");
    }
    return false;
  }

  private installHooks(): void {
    const tl = this.timeline;
    window.__castscope = {
      run: this.run,
      setRange: (t0: number, t1: number) => tl.setRange(t0, t1),
      getRange: () => tl.range,
      tMax: () => tl.tMax,
      visibleCasts: () => tl.visibleCasts(),
      visibleNumerics: () => tl.visibleNumerics(),
      visibleLosses: () => tl.visibleLosses(),
      dataKinds: () => tl.dataKinds(),
      loading: () => tl.loading,
      following: () => tl.following,
      setFollow: (on: boolean) => tl.setFollow(on),
      xOfTime: (t: number) => tl.xOfTime(t),
      jumpToSite: (site: ReportSite) => this.jumpToSite(site),
      highlight: (sites: { file: string; line: number }[]) => tl.setHighlights(sites),
      counterAxes: () => this.counters.axes(),
      fmtTick,
      stats,
    };
  }

  destroy(): void {
    this.destroyed = true;
    window.clearTimeout(this.runTimer);
    window.clearTimeout(this.tracksTimer);
    window.clearTimeout(this.hashTimer);
    this.live?.close();
    this.timeline.destroy();
    this.counters.destroy();
    this.findings.destroy();
    this.detail.destroy();
    window.__castscope = undefined;
    if (this.connEl) this.connEl.textContent = "";
  }
}
