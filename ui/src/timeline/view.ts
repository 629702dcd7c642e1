// The timeline: two canvases (time axis, lanes) under a toolbar, and the
// state behind them: the range in view with its zoom and pan arithmetic, the
// lanes and the data fetched for them, highlights, the selection, a jump in
// progress, and following the newest event while the run is live. Painting is
// coalesced to one frame per animation frame (pacing.ts); data comes from
// TimelineData, casts pushed while live from LiveCasts until a refetch covers
// them, numerics (GradScaler's scale, numerics problems) from /api/numerics
// once per run (again while it is live, at most every NUMERICS_REFETCH_MS).
// The mouse and keys are input.ts's, what lies under a point pick.ts's, the
// buttons toolbar.ts's, what the browser tests read visible.ts's.

import { type AgentId, ApiError, api, type Cast, isAbort, type NumericsAnswer, type TracksAnswer } from "../api";
import { h } from "../dom";
import { fmtCount } from "../format";
import type { LiveBatch } from "../live";
import { errorText, notice } from "../notice";
import { logPush, stats } from "../stats";
import { TimelineData } from "./data";
import { drawAxis, drawLanes, emptyFrame, type Frame, tOf, type Viewport, xOf } from "./draw";
import { KeyboardHelp } from "./help";
import { TimelineInput } from "./input";
import { computeLayout, GUTTER, type Layout, type LaneNeeds, laneNeeds, threadLaneHeight } from "./layout";
import { LiveCasts, newestTime } from "./live_casts";
import type { NoteBlock } from "./notes";
import { FramePacer, LiveRefetchPacer } from "./pacing";
import { pick } from "./pick";
import { castSpanOf, MatchFinder } from "./matches";
import { type CastFilter, parseFilter } from "./search";
import { timelineToolbar } from "./toolbar";
import { Tooltip } from "./tooltip";
import { type VisibleCast, type VisibleLoss, type VisibleNumerics, visibleCasts, visibleLosses, visibleNumerics } from "./visible";

const AXIS_H = 26;
const MIN_SPAN = 1_000; // 1 µs
const LIVE_SPAN_DEFAULT = 10e9;
// Zooming out stops at the whole run (fit's range) and this much of its span beyond each side.
const ZOOM_OUT_MARGIN = 0.1;
const NUMERICS_REFETCH_MS = 5000;
// Fit frames the casts' span and this much of it either side.
const FIT_MARGIN = 0.03;
// Both canvases are painted edge to edge: opaque, the compositor copies them
// instead of blending them over the page on every frame.
const OPAQUE_CANVAS: CanvasRenderingContext2DSettings = { alpha: false };

export interface TimelineCallbacks {
  /**
   * `live`: the view moved because it follows the live run (many times a
   * second); `busy`: that run is under heavy ingest (BUSY_LIVE_EVENTS).
   */
  rangeChanged(t0: number, t1: number, live: boolean, busy: boolean): void;
  select(agent: AgentId, seq: number, kind: string): void;
  /** A numerics mark or skipped step was clicked. */
  note(blocks: NoteBlock[]): void;
  /** The filter's text changed (to keep it in the URL). */
  filterChanged?(text: string): void;
}

export class TimelineView {
  readonly el: HTMLElement;
  private axis: HTMLCanvasElement;
  private canvas: HTMLCanvasElement;
  private scroller: HTMLElement;
  private tooltip = new Tooltip();
  private help = new KeyboardHelp();
  private layout: Layout = computeLayout(null);
  private data: TimelineData;
  private width = 800;
  private t0 = 0;
  private t1 = 1e9;
  tMax = 0;
  private frame: Frame = emptyFrame();
  private tracks: TracksAnswer | null = null;
  private numerics: NumericsAnswer | null = null;
  private numericsCtrl: AbortController | null = null;
  private numericsAt = 0;
  private pacer = new FramePacer(() => this.paint(), () => this.destroyed);
  private follow = false;
  private followMoved = false;
  private live = false;
  private ended = false; // the viewer stopped: what is drawn stays, nothing more comes
  private liveCasts = new LiveCasts();
  private liveRefetch = new LiveRefetchPacer(() => this.data.loading, () => this.refetch(true), () => this.destroyed);
  private inputFetchPending = false; // input (a range change) asked for data: the next answer paints at once
  private highlights = new Set<string>();
  private selected: { agent: AgentId; seq: number } | null = null;
  private resizeObs: ResizeObserver;
  private input: TimelineInput;
  private destroyed = false;
  private pendingJump: { ts: number; at: number; tries: number } | null = null;
  /** Per lane, what its fetched data needed drawn apart (only grows: lanes do not jump back while zooming). */
  private needs = new Map<string, LaneNeeds>();
  private measured = new WeakSet<object>();
  /** Where the run's conversions happen (from answers that covered the whole run); null: not known yet. */
  private castSpan: { t0: number; t1: number } | null = null;
  /** fit() came before the cast span was known: the answer it asked for frames it. */
  private fitPending = false;
  private filter: CastFilter | null = null;
  private matchMemo = new WeakMap<Cast, boolean>();
  private matches: MatchFinder;
  private followBox: HTMLInputElement;
  private statusEl: HTMLElement;
  private searchBox: HTMLInputElement;
  private searchCount: HTMLElement;
  private searchNote = "";

  constructor(private readonly run: string, private readonly cb: TimelineCallbacks) {
    this.data = new TimelineData(
      run,
      () => this.onData(),
      (e) => notice(`timeline: ${errorText(e)}`, "error"),
      stats,
    );
    this.axis = h("canvas", { class: "tl-axis", "aria-label": "time axis" });
    this.canvas = h("canvas", { class: "tl-lanes", tabindex: 0, "aria-label": "cast timeline" });
    this.scroller = h("div", { class: "tl-scroll" }, this.canvas);
    this.matches = new MatchFinder(run, {
      lanes: () => this.layout.lanes,
      data: () => this.data,
      range: () => this.range,
      tMax: () => this.tMax,
      plotWidth: () => this.width - GUTTER,
      show: (m, dense) => this.showMatch(m, dense),
      say: (text) => this.setSearchNote(text),
    });
    const toolbar = timelineToolbar({
      zoomBy: (factor) => this.zoomBy(factor),
      panBy: (fraction) => this.panBy(fraction),
      fit: () => this.fit(),
      wholeRun: () => this.wholeRun(),
      setFilter: (text) => this.setFilter(text),
      nextMatch: (dir) => void this.nextMatch(dir),
      setFollow: (on) => this.setFollow(on),
      clearHighlights: () => this.setHighlights([]),
      showHelp: () => this.help.toggle(),
    });
    this.followBox = toolbar.followBox;
    this.statusEl = toolbar.statusEl;
    this.searchBox = toolbar.searchBox;
    this.searchCount = toolbar.searchCount;
    this.el = h("section", { class: "timeline" }, toolbar.el, this.axis, this.scroller, this.tooltip.el, this.help.el);

    this.resizeObs = new ResizeObserver(() => this.resize());
    this.resizeObs.observe(this.scroller);
    this.input = new TimelineInput(this.canvas, this.axis, this.tooltip, this.help, {
      width: () => this.width,
      range: () => this.range,
      zoomBy: (factor, atX) => this.zoomBy(factor, atX),
      panBy: (fraction) => this.panBy(fraction),
      setRange: (t0, t1) => this.setRange(t0, t1),
      fit: () => this.fit(),
      wholeRun: () => this.wholeRun(),
      focusSearch: () => this.searchBox.focus(),
      nextMatch: (dir) => void this.nextMatch(dir),
      pick: (x, y) => pick(this.frame, this.layout, this.vp(), x, y),
      select: (sel) => this.select(sel),
      open: (agent, seq, kind) => this.cb.select(agent, seq, kind),
      note: (blocks) => this.cb.note(blocks),
    });
  }

  // ---- setup ----------------------------------------------------------------

  async load(initial: { t0?: number; t1?: number; q?: string }, live: boolean): Promise<void> {
    if (initial.q) {
      this.searchBox.value = initial.q;
      this.filter = parseFilter(initial.q);
    }
    const tracks = await api.tracks(this.run);
    if (this.destroyed) return;
    // The lanes without a fetch: the range is set below, then asked once (a
    // fetch of the default range first would be aborted, but the collector
    // would still answer it).
    this.setTracks(tracks, false);
    this.live = live;
    void this.loadNumerics();
    if (initial.t0 !== undefined && initial.t1 !== undefined && initial.t1 > initial.t0) {
      this.t0 = initial.t0;
      this.t1 = initial.t1;
      this.setFollow(false);
      this.refetch(false);
    } else if (live) {
      this.t0 = 0;
      this.t1 = LIVE_SPAN_DEFAULT;
      this.setFollow(true);
    } else {
      this.fit();
    }
    this.resize();
  }

  setTracks(tracks: TracksAnswer, refetch = true): void {
    const before = JSON.stringify(this.layoutKeys());
    stats.originNs = tracks.origin_ns;
    this.tMax = Math.max(this.tMax, tracks.t_max);
    this.tracks = tracks;
    this.layout = computeLayout(tracks, this.numerics, this.needs);
    const resized = this.canvasSize();
    if (refetch && JSON.stringify(this.layoutKeys()) !== before) this.refetch(false);
    if (refetch && this.live && performance.now() - this.numericsAt >= NUMERICS_REFETCH_MS) void this.loadNumerics();
    if (resized) this.requestPaint();
    else this.requestDataPaint();
  }

  /** GradScaler's scale and the numerics marks; a server without the route (404) leaves the timeline as it was. */
  private async loadNumerics(): Promise<void> {
    this.numericsCtrl?.abort();
    const ctrl = new AbortController();
    this.numericsCtrl = ctrl;
    this.numericsAt = performance.now();
    try {
      const answer = await api.numerics(this.run, ctrl.signal);
      if (ctrl.signal.aborted || this.destroyed) return;
      this.numerics = answer;
      this.layout = computeLayout(this.tracks, answer, this.needs);
      if (this.canvasSize()) this.requestPaint();
      else this.requestDataPaint();
      if (answer.truncated) notice("numerics: more marks or scale points than the viewer shows (10 000 each); the first are drawn", "warn");
    } catch (e) {
      if (isAbort(e) || (e instanceof ApiError && e.status === 404)) return;
      notice(`numerics: ${errorText(e)}`, "error");
    }
  }

  private layoutKeys(): string[] {
    return this.layout.lanes.map((l) => l.key);
  }

  setLive(live: boolean): void {
    if (this.live && !live) void this.loadNumerics();
    this.live = live;
    if (!live && this.follow) {
      this.refetch(true);
    }
    this.renderStatus();
  }

  /** The server is gone (a job's own viewer stopped with it): no longer live, and nothing fetched for it. */
  setEnded(): void {
    this.live = false;
    this.ended = true;
    this.setFollow(false);
  }

  destroy(): void {
    this.destroyed = true;
    this.data.clear();
    this.numericsCtrl?.abort();
    this.resizeObs.disconnect();
    this.pacer.stop();
    this.liveRefetch.stop();
    this.input.detach();
  }

  // ---- viewport ---------------------------------------------------------------

  get range(): { t0: number; t1: number } {
    return { t0: this.t0, t1: this.t1 };
  }

  setRange(t0: number, t1: number, fromUser = true): void {
    if (!(t1 > t0)) return;
    const span = Math.max(MIN_SPAN, t1 - t0);
    const mid = (t0 + t1) / 2;
    this.t0 = span === t1 - t0 ? t0 : mid - span / 2;
    this.t1 = this.t0 + span;
    if (fromUser && this.follow) this.setFollow(false);
    this.afterRangeChange();
  }

  private afterRangeChange(): void {
    this.fitPending = false;
    // What the tooltip named has moved from under the pointer.
    this.tooltip.hide();
    this.inputFetchPending = true;
    this.refetch(false);
    if (!this.data.loading) this.inputFetchPending = false; // nothing to wait for: the data in hand covers the range
    this.requestPaint();
    this.cb.rangeChanged(this.t0, this.t1, false, false);
  }

  /** The whole run with a little room either side: fit's range. */
  private runRange(): { lo: number; hi: number } {
    const end = Math.max(this.tMax, 1_000_000);
    const pad = end * 0.01;
    return { lo: -pad, hi: end + pad };
  }

  /** How long the training lasts (the casts' span), or the whole run while that is not known. */
  get trainingSpan(): number {
    const s = this.castSpan;
    return s ? Math.max(s.t1 - s.t0, MIN_SPAN) : this.tMax;
  }

  /** The training: the span where the run's casts convert, a little room either side (the whole run until that is known). */
  fit(): void {
    const s = this.castSpan;
    if (!s) {
      this.wholeRun();
      // The whole run's answer says where its casts are (none coming: the data in hand has none that convert).
      this.fitPending = this.data.loading;
      return;
    }
    const t1 = this.live ? Math.max(s.t1, this.tMax) : s.t1;
    const pad = Math.max((t1 - s.t0) * FIT_MARGIN, MIN_SPAN);
    this.setRange(s.t0 - pad, t1 + pad);
  }

  /** The whole process, from the run's origin to its newest event. */
  wholeRun(): void {
    const { lo, hi } = this.runRange();
    this.setRange(lo, hi);
  }

  zoomBy(factor: number, atX?: number): void {
    const span = this.t1 - this.t0;
    // The widest view: the run and a margin (a live run's first seconds: its default span).
    const run = this.runRange();
    const margin = (run.hi - run.lo) * ZOOM_OUT_MARGIN;
    const [lo, hi] = [run.lo - margin, run.hi + margin];
    const maxSpan = Math.max(hi - lo, this.live ? LIVE_SPAN_DEFAULT : 0);
    const newSpan = Math.min(Math.max(span * factor, MIN_SPAN), maxSpan);
    if (this.follow) {
      this.t1 = this.tMax;
      this.t0 = this.t1 - newSpan;
      this.afterRangeChange();
      return;
    }
    const x = atX ?? GUTTER + (this.width - GUTTER) / 2;
    const anchor = tOf(this.vp(), x);
    const frac = (anchor - this.t0) / span;
    this.t0 = anchor - frac * newSpan;
    this.t1 = this.t0 + newSpan;
    // Zooming out near an end of the run keeps the view on the run instead of showing empty time.
    if (factor > 1 && newSpan <= hi - lo) {
      if (this.t0 < lo) [this.t0, this.t1] = [lo, lo + newSpan];
      else if (this.t1 > hi) [this.t0, this.t1] = [hi - newSpan, hi];
    }
    this.afterRangeChange();
  }

  panBy(fraction: number): void {
    const d = (this.t1 - this.t0) * fraction;
    this.setRange(this.t0 + d, this.t1 + d);
  }

  setFollow(on: boolean): void {
    this.follow = on;
    this.followBox.checked = on;
    if (on) {
      const span = Math.min(Math.max(this.t1 - this.t0, MIN_SPAN), LIVE_SPAN_DEFAULT);
      this.t1 = Math.max(this.tMax, 1);
      this.t0 = this.t1 - span;
      this.afterRangeChange();
    }
    this.renderStatus();
  }

  private vp(): Viewport {
    return { t0: this.t0, t1: this.t1, width: this.width };
  }

  private refetch(force: boolean): void {
    this.data.ensure(this.layout.lanes, this.t0, this.t1, this.width - GUTTER, force);
    if (force) this.liveRefetch.fetched(performance.now());
    this.renderStatus();
  }

  // ---- live ---------------------------------------------------------------

  onBatch(b: LiveBatch): void {
    stats.liveBatches++;
    this.tMax = newestTime(this.tMax, b);
    const now = performance.now();
    this.pacer.noteBatch(b.events, now);
    this.liveCasts.add(b, now);
    if (this.follow) {
      const span = this.t1 - this.t0;
      this.t1 = this.tMax;
      this.t0 = this.t1 - span;
      this.followMoved = true; // said at the next paint, so that the counters move in the same frame
    }
    this.pacer.requestLivePaint();
    this.liveRefetch.schedule();
  }

  onSkipped(events: number): void {
    stats.skipped += events;
    notice(`viewer fell behind: ${fmtCount(events)} events not shown live; refetched`, "warn");
    this.refetch(true);
  }

  private onData(): void {
    this.measureAnswers();
    if (this.fitPending && !this.data.loading) {
      // Before the frame this answer asked for: the first view shows the training, not the whole run first.
      if (this.castSpan) this.fit();
      this.fitPending = false;
    }
    if (!this.data.loading) {
      this.liveCasts.prune(this.layout, this.data);
      this.liveRefetch.settled();
      this.continueJump();
    }
    if (this.inputFetchPending) {
      if (!this.data.loading) this.inputFetchPending = false;
      this.requestPaint();
    } else {
      this.requestDataPaint();
    }
    this.renderStatus();
  }

  // ---- highlight and jump -------------------------------------------------------

  setHighlights(sites: { file: string; line: number }[]): void {
    this.highlights = new Set(sites.map((s) => `${s.line}:${s.file}`));
    this.requestPaint();
  }

  /** Puts `ts` at `at` (0..1) of a `span` wide view and zooms in until single casts are drawn. */
  jumpTo(ts: number, span: number, at = 0.5): void {
    this.setFollow(false);
    this.setRange(ts - span * at, ts + span * (1 - at));
    this.pendingJump = { ts, at, tries: 0 };
  }

  private continueJump(): void {
    const j = this.pendingJump;
    if (!j) return;
    const anyBuckets = this.layout.lanes.some((l) => this.data.lanes.get(l.key)?.data.kind === "buckets");
    if (!anyBuckets || j.tries >= 6) {
      this.pendingJump = null;
      return;
    }
    j.tries++;
    const span = (this.t1 - this.t0) / 10;
    this.setRange(j.ts - span * j.at, j.ts + span * (1 - j.at));
    this.pendingJump = j;
  }

  // ---- lanes sized to their content, the casts' span ------------------------------

  /**
   * Reads each answer once as it comes: what its lane needs drawn apart (a
   * lane that needs more rows grows, and the canvas with it) and, from an
   * answer over the whole run, where the casts are.
   */
  private measureAnswers(): void {
    let grew = false;
    const run = this.runRange();
    for (const lane of this.layout.lanes) {
      const got = this.data.lanes.get(lane.key);
      if (!got || this.measured.has(got)) continue;
      this.measured.add(got);
      if (got.window.t0 <= Math.max(run.lo, 0) && got.window.t1 >= this.tMax) {
        const s = castSpanOf(got.data);
        if (s) this.castSpan = this.castSpan ? { t0: Math.min(this.castSpan.t0, s.t0), t1: Math.max(this.castSpan.t1, s.t1) } : s;
      }
      if (lane.track.kind === "gpu") continue;
      const n = laneNeeds(got.data);
      const had = this.needs.get(lane.key);
      const next = { stack: Math.max(n.stack, had?.stack ?? 0), opRows: Math.max(n.opRows, had?.opRows ?? 1) };
      if (threadLaneHeight(next) !== threadLaneHeight(had)) grew = true;
      this.needs.set(lane.key, next);
    }
    if (grew) {
      this.layout = computeLayout(this.tracks, this.numerics, this.needs);
      // Resized, the opaque canvas is black until painted: at the next frame, not at the live pace.
      if (this.canvasSize()) this.requestPaint();
    }
  }

  // ---- the filter ---------------------------------------------------------------------

  /** The filter's text, as the URL keeps it. */
  get filterText(): string {
    return this.filter?.text ?? "";
  }

  setFilter(text: string): void {
    const f = parseFilter(text);
    if ((f?.text ?? "") === this.filterText) return;
    this.filter = f;
    this.matchMemo = new WeakMap();
    this.matches.reset();
    this.setSearchNote("");
    this.requestPaint();
    this.cb.filterChanged?.(this.filterText);
  }

  /** Whether a cast matches the filter (remembered per cast until the filter changes: a paint asks again for each). */
  private matchesFilter = (c: Cast): boolean => {
    let m = this.matchMemo.get(c);
    if (m === undefined) {
      m = this.filter ? this.filter.test(c) : true;
      this.matchMemo.set(c, m);
    }
    return m;
  };

  /** Moves the view to the next (`dir` -1: previous) cast that matches the filter (matches.ts). */
  async nextMatch(dir: 1 | -1 = 1): Promise<void> {
    if (!this.filter) {
      this.searchBox.focus();
      return;
    }
    await this.matches.next(this.filter, this.matchesFilter, dir);
  }

  /** Centres the view on a match and selects it; `dense`: the view showed density, so zoom in until single casts are drawn. */
  private showMatch(m: { agent: AgentId; seq: number; ts: number }, dense: boolean): void {
    const span = this.t1 - this.t0;
    this.selected = { agent: m.agent, seq: m.seq };
    if (dense) this.jumpTo(m.ts, span / 10, 0.5);
    else {
      this.setFollow(false);
      this.setRange(m.ts - span / 2, m.ts + span / 2);
    }
  }

  private setSearchNote(text: string): void {
    this.searchNote = text;
    this.renderSearchCount();
  }

  /** "3 of 40 casts in view match", or why the filter shows nothing yet. */
  private renderSearchCount(): void {
    let text = "";
    if (this.filter) {
      const dense = this.layout.lanes.some((l) => this.data.lanes.get(l.key)?.data.kind === "buckets");
      let shown = 0;
      let matched = 0;
      for (const d of this.frame.casts) {
        if (d.x < GUTTER || d.x > this.width) continue;
        shown++;
        if (!d.dimmed) matched++;
      }
      text = dense && shown === 0
        ? "density view: the filter applies once single casts are drawn (zoom in, or Enter for the next match)"
        : `${fmtCount(matched)} of ${fmtCount(shown)} casts in view match${dense ? " (density elsewhere)" : ""}`;
      if (this.searchNote) text += ` · ${this.searchNote}`;
    }
    if (this.searchCount.textContent !== text) this.searchCount.textContent = text;
  }

  select(sel: { agent: AgentId; seq: number } | null): void {
    this.selected = sel;
    this.requestPaint();
  }

  // ---- painting -----------------------------------------------------------------

  /** Sizes both canvases to the view; true when one changed size, which empties it (opaque: black) until the next paint. */
  private canvasSize(): boolean {
    const dpr = window.devicePixelRatio || 1;
    let resized = false;
    const w = Math.max(GUTTER + 100, this.scroller.clientWidth || this.width);
    this.width = w;
    const hgt = this.layout.height;
    for (const [c, ch] of [
      [this.canvas, hgt],
      [this.axis, AXIS_H],
    ] as [HTMLCanvasElement, number][]) {
      const pw = Math.round(w * dpr);
      const ph = Math.round(ch * dpr);
      if (c.width !== pw || c.height !== ph) resized = true;
      if (c.width !== pw) c.width = pw;
      if (c.height !== ph) c.height = ph;
      c.style.width = `${w}px`;
      c.style.height = `${ch}px`;
    }
    return resized;
  }

  private resize(): void {
    if (this.destroyed) return;
    const before = this.width;
    const resized = this.canvasSize();
    if (before !== this.width) this.refetch(false);
    // ResizeObserver runs after this frame's animation callbacks: a canvas it
    // emptied is painted now, or the frame would show it black.
    if (resized) {
      this.pacer.paintNow();
    } else {
      this.requestDataPaint();
    }
  }

  requestPaint(): void {
    this.pacer.requestPaint();
  }

  /** A frame for data that came by itself, not asked for by input (FramePacer.requestDataPaint). */
  private requestDataPaint(): void {
    this.pacer.requestDataPaint();
  }

  private paint(): void {
    const start = performance.now();
    this.pacer.painting(start);
    if (this.followMoved) {
      this.followMoved = false;
      this.cb.rangeChanged(this.t0, this.t1, true, this.pacer.busy(start));
    }
    const dpr = window.devicePixelRatio || 1;
    const vp = this.vp();
    const actx = this.axis.getContext("2d", OPAQUE_CANVAS);
    const ctx = this.canvas.getContext("2d", OPAQUE_CANVAS);
    if (!actx || !ctx) return;
    // Opaque canvases start black: every device pixel is painted first, the
    // last column and row too, which CSS pixels miss at a fractional ratio.
    for (const c of [actx, ctx]) {
      c.setTransform(1, 0, 0, 1, 0, 0);
      c.fillStyle = "#ffffff";
      c.fillRect(0, 0, c.canvas.width, c.canvas.height);
    }
    actx.setTransform(dpr, 0, 0, dpr, 0, 0);
    drawAxis(actx, vp, AXIS_H, this.live ? this.tMax : null);
    ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
    const live = this.liveCasts.byLane(this.layout);
    const contents = this.layout.lanes.map((lane) => ({
      lane,
      data: this.data.lanes.get(lane.key)?.data ?? null,
      live: live.get(lane.key) ?? [],
    }));
    const hl = this.highlights;
    this.frame = drawLanes(
      ctx,
      vp,
      this.layout,
      contents,
      (c) => hl.size > 0 && !!c.location && hl.has(`${c.location.line}:${c.location.file}`),
      this.selected,
      this.numerics?.marks ?? [],
      this.filter ? this.matchesFilter : null,
    );
    const end = performance.now();
    stats.paints++;
    stats.lastPaintMs = end - start;
    stats.maxPaintMs = Math.max(stats.maxPaintMs, stats.lastPaintMs);
    const withData = contents.filter((c) => c.data).length;
    if (stats.firstPaintAt === null && withData > 0) stats.firstPaintAt = end;
    if (stats.firstFullPaintAt === null && withData > 0 && withData === contents.length) stats.firstFullPaintAt = end;
    logPush(stats.paintLog, { at: end, ms: stats.lastPaintMs, lanesWithData: withData, lanes: contents.length, t0: vp.t0, t1: vp.t1 });
    this.liveCasts.painted(this.frame, this.width, end);
    this.renderSearchCount();
  }

  private renderStatus(): void {
    const parts: string[] = [];
    if (this.live) parts.push(this.follow ? "live · following" : "live");
    else if (this.ended) parts.push("ended: the viewer stopped");
    if (this.data.loading) parts.push("loading…");
    const kinds = new Set<string>();
    for (const l of this.layout.lanes) {
      const d = this.data.lanes.get(l.key);
      if (d) kinds.add(d.data.kind);
    }
    if (kinds.has("buckets")) parts.push("density view: zoom in for single casts");
    // Unchanged text is not written: each write costs the page a layout and a frame.
    const text = parts.join(" · ");
    if (this.statusEl.textContent !== text) this.statusEl.textContent = text;
  }

  // ---- test hooks ---------------------------------------------------------------

  visibleCasts(): VisibleCast[] {
    return visibleCasts(this.frame, this.canvas, this.width);
  }

  visibleNumerics(): VisibleNumerics[] {
    return visibleNumerics(this.frame, this.canvas, this.width);
  }

  visibleLosses(): VisibleLoss[] {
    return visibleLosses(this.frame, this.canvas, this.width);
  }

  dataKinds(): Record<string, string> {
    const out: Record<string, string> = {};
    for (const l of this.layout.lanes) out[l.key] = this.data.lanes.get(l.key)?.data.kind ?? "none";
    return out;
  }

  get loading(): boolean {
    return this.data.loading;
  }

  get following(): boolean {
    return this.follow;
  }

  xOfTime(t: number): number {
    return this.canvas.getBoundingClientRect().left + xOf(this.vp(), t);
  }
}
