// The run page: the timeline with its counters below and findings and event
// details beside it, the live feed while the run is live, and the test hooks.
// Its hash may also ask for a site's casts (?site=file:line&op=&arg=, from the
// sites view) or a severity's findings (?findings=critical, from the runs).

import { ApiError, api, type ReportSite, type SiteRow } from "../api";
import { h } from "../dom";
import { fmtDuration, fmtTick, shellQuoted } from "../format";
import { LiveFeed } from "../live";
import { errorText, notice } from "../notice";
import { hashFor, pushHash, replaceHash } from "../router";
import { stats } from "../stats";
import { TimelineView } from "../timeline/view";
import { CountersView } from "./counters";
import { DetailPanel } from "./detail";
import { exportMenu } from "./export-menu";
import { FindingsPanel } from "./findings";

const RUN_POLL_MS = 2000;
const TRACKS_POLL_MS = 2000;
const JUMP_MIN_SPAN = 2e6; // at least 2 ms from a site's first cast on
const GONE_CHECK_MS = 1000;
// How long the feed watches the server after the run's end: a job's own
// collector exits within seconds of it; a daemon's keeps serving.
const WATCH_AFTER_END_MS = 60_000;

type JumpSite = { file: string; line: number; op?: string; arg?: string | number };

/** The site a hash names (site=file:line, op, arg); null when none or malformed. */
function siteParam(params: URLSearchParams): JumpSite | null {
  const where = params.get("site") ?? "";
  const colon = where.lastIndexOf(":");
  const line = Number(where.slice(colon + 1));
  if (colon <= 0 || !Number.isInteger(line)) return null;
  return { file: where.slice(0, colon), line, op: params.get("op") ?? undefined, arg: params.get("arg") ?? undefined };
}

const sleep = (ms: number) => new Promise((resolve) => window.setTimeout(resolve, ms));

export class RunPage {
  readonly el: HTMLElement;
  private timeline: TimelineView;
  private counters: CountersView;
  private findings: FindingsPanel;
  private detail: DetailPanel;
  private live: LiveFeed | null = null;
  private isLive = false;
  private runTimer = 0;
  private watchTimer = 0;
  private tracksTimer = 0;
  private hashTimer = 0;
  private destroyed = false;
  private sites: SiteRow[] | null = null;
  private connEl: HTMLElement | null = document.getElementById("conn");
  private banner: HTMLElement;
  private checkingServer = false;
  private ended = false;
  /** The store's file (/api/runs' `store`): what `castscope view` opens once the job's viewer stopped. */
  private storePath = "";

  constructor(private readonly run: string, params: URLSearchParams) {
    this.timeline = new TimelineView(run, {
      rangeChanged: (t0, t1, live, busy) => this.rangeChanged(t0, t1, live, busy),
      select: (agent, seq) => void this.detail.show(agent, seq),
      note: (blocks) => this.detail.showNote(blocks),
      filterChanged: () => this.writeHash(),
    });
    this.counters = new CountersView(run, (t0, t1) => this.timeline.setRange(t0, t1));
    // A finding's jump gets a history entry: Back returns to where it started.
    this.findings = new FindingsPanel(run, (site) => void this.jumpToSite(site, true));
    this.detail = new DetailPanel(run, () => this.timeline.select(null));
    this.banner = h("div", { class: "run-ended", role: "status", hidden: true });
    this.el = h(
      "div",
      { class: "run-page" },
      h("div", { class: "run-main" }, this.banner, this.timeline.el, this.counters.el),
      h("aside", { class: "run-side" }, this.detail.el, this.findings.el, exportMenu(run)),
    );
    this.installHooks();
    void this.start(params);
  }

  private async start(params: URLSearchParams): Promise<void> {
    try {
      const { runs, store } = await api.runs();
      this.storePath = store;
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
      const site = siteParam(params);
      if (site) void this.jumpToSite(site);
      const severity = params.get("findings");
      if (severity) this.findings.reveal(severity);
    } catch (e) {
      notice(`cannot open run ${this.run}: ${errorText(e)}`, "error", 0);
    }
  }

  /** The same page's hash changed (Back or Forward): its range, and a severity's findings to show. */
  update(params: URLSearchParams): void {
    const [t0, t1] = [Number(params.get("t0")), Number(params.get("t1"))];
    const r = this.timeline.range;
    if (params.has("t0") && params.has("t1")) {
      if (t1 > t0 && (Math.abs(t0 - r.t0) > 1 || Math.abs(t1 - r.t1) > 1)) this.timeline.setRange(t0, t1);
    } else if (this.isLive && !this.ended && !this.timeline.following) {
      this.timeline.setFollow(true); // no range: the newest time, as when the jump started from following
    }
    const severity = params.get("findings");
    if (severity) this.findings.reveal(severity);
  }

  private openLive(): void {
    // The feed stays open a while after the run finishes: its connection
    // dropping is how the page learns that a job's own collector (castscope
    // run without --serve) exited with it.
    this.live = new LiveFeed(this.run, {
      batch: (b) => {
        if (this.isLive) this.timeline.onBatch(b);
      },
      skipped: (n) => this.timeline.onSkipped(n),
      state: (s) => {
        if (s === "error") void this.checkServer();
        if (!this.connEl || this.ended) return;
        if (!this.isLive) {
          this.connEl.textContent = "finished";
          this.connEl.className = "conn";
          return;
        }
        this.connEl.textContent = s === "open" ? "● live" : s === "connecting" ? "○ connecting" : s === "error" ? "○ reconnecting" : "";
        this.connEl.className = `conn ${s}`;
      },
    });
    this.live.open();
    this.pollRun();
    this.pollTracks();
  }

  /** Watches for the run's end: then refetches once (the feed stays open a while: see openLive). */
  private pollRun(): void {
    this.runTimer = window.setTimeout(async () => {
      if (this.destroyed) return;
      try {
        const { runs } = await api.runs();
        const run = runs.find((r) => r.run_id === this.run);
        if (run && !run.live) {
          this.isLive = false;
          window.clearTimeout(this.tracksTimer);
          window.clearTimeout(this.watchTimer);
          this.watchTimer = window.setTimeout(() => {
            this.live?.close(); // the server stayed: its place for a live viewer freed
            this.live = null;
          }, WATCH_AFTER_END_MS);
          this.timeline.setTracks(await api.tracks(this.run));
          this.timeline.setLive(false);
          this.findings.setLive(false);
          void this.findings.refresh();
          this.counters.schedule();
          notice("the run finished", "info");
          if (this.connEl) this.connEl.textContent = "finished";
          return;
        }
      } catch (e) {
        if (!(e instanceof ApiError)) void this.checkServer(); // no answer at all: is the server still there?
      }
      if (!this.ended) this.pollRun();
    }, RUN_POLL_MS);
  }

  /**
   * After the live feed dropped or a request got no answer: asks for the runs
   * list three times over about seven seconds (a network blip, a laptop
   * waking, a restarting server get their chance), and when none reaches the
   * server at all (fetch's network error), it is gone (the job's own collector
   * exits with the job when it is not run with --serve): the page says so and
   * stops asking.
   */
  private async checkServer(): Promise<void> {
    if (this.checkingServer || this.ended || this.destroyed) return;
    this.checkingServer = true;
    try {
      for (let i = 0; i < 3; i++) {
        if (i > 0) await sleep(GONE_CHECK_MS * 2 ** (i - 1) * 2);
        try {
          await api.runs();
          return; // it answers: the feed reconnects by itself
        } catch (e) {
          if (!(e instanceof TypeError)) return; // an answer of some kind: the server is there
        }
        if (this.destroyed) return;
      }
      this.serverGone();
    } finally {
      this.checkingServer = false;
    }
  }

  private serverGone(): void {
    this.ended = true;
    this.live?.close(); // no more reconnecting
    this.live = null;
    window.clearTimeout(this.runTimer);
    window.clearTimeout(this.watchTimer);
    window.clearTimeout(this.tracksTimer);
    this.timeline.setEnded();
    const command = `castscope view ${this.storePath ? shellQuoted(this.storePath) : "DIR"}`;
    this.findings.serverGone(command);
    this.banner.replaceChildren(
      h("strong", null, "The job ended and its viewer stopped with it"),
      " (castscope run stops its viewer at the job's end unless given --serve). What is drawn here stays, but nothing more can be fetched. To see the whole run, its findings included, open its events with ",
      h("code", null, command),
      this.storePath ? "." : ", DIR being the folder the job printed as castscope: events in DIR.",
    );
    this.banner.hidden = false;
    if (this.connEl) {
      this.connEl.textContent = "ended: viewer stopped";
      this.connEl.className = "conn ended";
    }
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
      replaceHash(this.rangeHash());
    }, 300);
  }

  /** The hash of the view: its range (none while following: the newest time) and the timeline's filter. */
  private rangeHash(): string {
    const { t0, t1 } = this.timeline.range;
    const range = this.timeline.following ? {} : { t0: Math.round(t0), t1: Math.round(t1) };
    return hashFor("timeline", this.run, { ...range, q: this.timeline.filterText || undefined });
  }

  /**
   * Finds a site's first cast (sites give first_seq, not the agent) and centres
   * the view on it. `push`: the jump gets a history entry of its own, the one
   * before it holding the range it started from (Back returns there).
   */
  async jumpToSite(site: JumpSite, push = false): Promise<boolean> {
    this.timeline.setHighlights([site]);
    if (this.ended) {
      notice(`the viewer stopped: cannot look up ${site.file}:${site.line}`, "warn");
      return false;
    }
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
              // Show several of the site's casts: a third of the training (the casts' span) from the first one on.
              const span = Math.max(JUMP_MIN_SPAN, this.timeline.trainingSpan / 3);
              if (push && !this.destroyed) {
                window.clearTimeout(this.hashTimer); // a move still to be written goes in the entry it belongs to
                replaceHash(this.rangeHash());
                pushHash(this.rangeHash()); // rangeChanged writes the jump's range into it
              }
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
    window.clearTimeout(this.watchTimer);
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
