// The timeline: two canvases (time axis, lanes), a tooltip, and the input
// handling (wheel and +/- zoom around a point, drag and arrow pan, follow the
// newest event while the run is live). Painting is coalesced to one frame per
// animation frame; data comes from TimelineData, numerics (GradScaler's
// scale, numerics problems) from /api/numerics once per run (again while it
// is live, at most every NUMERICS_REFETCH_MS).

import { type AgentId, ApiError, api, type Cast, isAbort, type NumericsAnswer, type NumericsMark, type ScalerPoint, type ScalerSeries, type TracksAnswer } from "../api";
import { MODE_BADGE } from "../colors";
import { h } from "../dom";
import { fmtBytes, fmtCount, fmtDuration, fmtShape } from "../format";
import type { LiveBatch } from "../live";
import { errorText, notice } from "../notice";
import { logPush, recordLivePaint, stats } from "../stats";
import { TimelineData } from "./data";
import { drawAxis, drawLanes, emptyFrame, type Frame, tOf, type Viewport, xOf } from "./draw";
import { computeLayout, GUTTER, type Layout, type Lane, laneForCast } from "./layout";
import { fmtScale, markLines, markProblems, scaleAt, skipLines } from "./numerics";

const AXIS_H = 26;
const MIN_SPAN = 1_000; // 1 µs
// At most 1 refetch a second while following: pushed casts are drawn at
// once; the refetch only refreshes the density behind them, and each costs
// the collector a query and the page an answer to parse and a frame (two
// pages at 2 a second kept ingest on 2 cores further below none).
const LIVE_REFETCH_MS = 1000;
// At most 10 frames a second for pushed casts. A live run pushes up to 20
// messages a second per agent (10 under heavy ingest); left to
// requestAnimationFrame alone, a page following it draws a frame for most of
// them (every lane redrawn), on the cores of the collector it watches. Input
// still paints at once. Adds at most this much (and one animation frame) to a
// pushed cast's time to the screen.
const LIVE_PAINT_MS = 100;
// Under heavy ingest (one agent's pushed message of BUSY_LIVE_EVENTS or more,
// the collector's own threshold: ~50-100 k events/s per agent), the page
// draws at most 5 frames a second until a second after the last such message:
// pushed casts and the answers input did not ask for (requestDataPaint) wait
// for the next of them; input paints at once. The page then shows density bars, and
// each frame costs Chromium ~5 ms of CPU here, on the cores of the collector
// it watches (docs/performance.md, "A following page under heavy ingest").
// The live target's 30 k events/s never reaches it.
const BUSY_LIVE_EVENTS = 5_000;
const BUSY_LIVE_PAINT_MS = 200;
const BUSY_HOLD_MS = 1000;
const LIVE_SPAN_DEFAULT = 10e9;
const IMPLAUSIBLE_JUMP_NS = 300e9;
const NUMERICS_REFETCH_MS = 5000;
// Both canvases are painted edge to edge: opaque, the compositor copies them
// instead of blending them over the page on every frame.
const OPAQUE_CANVAS: CanvasRenderingContext2DSettings = { alpha: false };

export type Hover =
  | { kind: "cast"; cast: Cast }
  | { kind: "op"; agent: AgentId; seq: number }
  | { kind: "kernel"; agent: AgentId; seq: number }
  | { kind: "numerics"; marks: NumericsMark[] }
  | { kind: "skip"; series: ScalerSeries; point: ScalerPoint; before: ScalerPoint | undefined };

/** What the detail panel shows for a numerics mark or a skipped step: text, no request. */
export interface NoteBlock {
  title: string;
  lines: string[];
  fields: [string, string | number | boolean | null][];
  /** An event to open from it (an op mark's first non-finite call). */
  event?: { agent: AgentId; seq: number; label: string };
}

export interface TimelineCallbacks {
  /**
   * `live`: the view moved because it follows the live run (many times a
   * second); `busy`: that run is under heavy ingest (BUSY_LIVE_EVENTS).
   */
  rangeChanged(t0: number, t1: number, live: boolean, busy: boolean): void;
  select(agent: AgentId, seq: number, kind: string): void;
  /** A numerics mark or skipped step was clicked. */
  note(blocks: NoteBlock[]): void;
}

interface LiveCast {
  cast: Cast;
  receivedAt: number;
}

/** A drawn numerics mark or skipped step, as the browser tests read them (window.__castscope.visibleNumerics()). */
export interface VisibleNumerics {
  kind: "cast" | "op_output" | "skip";
  agent_id: AgentId;
  /** Page coordinates of a point on it to hover or click. */
  x: number;
  y: number;
  file: string;
  line: number;
  text: string[];
}

/** A drawn single cast, as the browser tests read it (window.__castscope.visibleCasts()). */
export interface VisibleCast {
  seq: number;
  op_seq: number;
  agent_id: AgentId;
  x: number;
  y: number;
  ts: number;
  file: string | null;
  line: number | null;
  op: string;
  role: string;
  cache: string;
  mode: string;
  live: boolean;
  highlighted: boolean;
}

export class TimelineView {
  readonly el: HTMLElement;
  private axis: HTMLCanvasElement;
  private canvas: HTMLCanvasElement;
  private scroller: HTMLElement;
  private tooltip: HTMLElement;
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
  private rafId = 0;
  private follow = false;
  private live = false;
  private liveCasts = new Map<string, LiveCast[]>();
  private busyUntil = 0; // performance.now() until which pushed casts paint at most every BUSY_LIVE_PAINT_MS
  private pendingLive = new Map<string, { cast: Cast; at: number }>();
  private liveTimer = 0;
  private livePaintTimer = 0;
  private lastPaintAt = -Infinity;
  private lastLiveFetch = 0;
  private inputFetchPending = false; // input (a range change) asked for data: the next answer paints at once
  private liveDirty = false;
  private highlights = new Set<string>();
  private selected: { agent: AgentId; seq: number } | null = null;
  private drag: { x: number; t0: number; t1: number; moved: boolean } | null = null;
  private resizeObs: ResizeObserver;
  private destroyed = false;
  private pendingJump: { ts: number; tries: number } | null = null;
  private followBox: HTMLInputElement;
  private statusEl: HTMLElement;

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
    this.tooltip = h("div", { class: "tooltip", role: "tooltip", hidden: true });
    this.followBox = h("input", { type: "checkbox", id: "follow" });
    this.followBox.addEventListener("change", () => this.setFollow(this.followBox.checked));
    this.statusEl = h("span", { class: "tl-status" });
    const btn = (label: string, title: string, fn: () => void) =>
      h("button", { type: "button", title, onclick: () => fn() }, label);
    const toolbar = h(
      "div",
      { class: "toolbar" },
      btn("−", "zoom out (-)", () => this.zoomBy(2)),
      btn("+", "zoom in (+)", () => this.zoomBy(0.5)),
      btn("◀", "pan left (←)", () => this.panBy(-0.25)),
      btn("▶", "pan right (→)", () => this.panBy(0.25)),
      btn("Fit", "whole run (0)", () => this.fit()),
      h("label", { class: "follow", title: "keep the newest events in view" }, this.followBox, " follow live"),
      btn("Clear highlight", "clear highlighted site", () => this.setHighlights([])),
      this.statusEl,
      legend(),
    );
    this.el = h("section", { class: "timeline" }, toolbar, this.axis, this.scroller, this.tooltip);

    this.resizeObs = new ResizeObserver(() => this.resize());
    this.resizeObs.observe(this.scroller);
    this.bindInput();
  }

  // ---- setup ----------------------------------------------------------------

  async load(initial: { t0?: number; t1?: number }, live: boolean): Promise<void> {
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
    this.layout = computeLayout(tracks, this.numerics);
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
      this.layout = computeLayout(this.tracks, answer);
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

  destroy(): void {
    this.destroyed = true;
    this.data.clear();
    this.numericsCtrl?.abort();
    this.resizeObs.disconnect();
    cancelAnimationFrame(this.rafId);
    window.clearTimeout(this.liveTimer);
    window.clearTimeout(this.livePaintTimer);
    document.removeEventListener("keydown", this.onKey);
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
    this.inputFetchPending = true;
    this.refetch(false);
    if (!this.data.loading) this.inputFetchPending = false; // nothing to wait for: the data in hand covers the range
    this.requestPaint();
    this.cb.rangeChanged(this.t0, this.t1, false, false);
  }

  fit(): void {
    const end = Math.max(this.tMax, 1_000_000);
    const pad = end * 0.01;
    this.setRange(-pad, end + pad);
  }

  zoomBy(factor: number, atX?: number): void {
    const span = this.t1 - this.t0;
    const newSpan = Math.min(Math.max(span * factor, MIN_SPAN), Math.max(this.tMax * 4, 10e9));
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
    if (force) this.lastLiveFetch = performance.now();
    this.renderStatus();
  }

  // ---- live ---------------------------------------------------------------

  onBatch(b: LiveBatch): void {
    stats.liveBatches++;
    // A batch without casts whose t_max lies minutes past everything seen is
    // not believed (the server sent absolute times for a run's first batches,
    // ~1600 s here, which would take the followed view far off the data).
    const newest = Math.max(this.tMax, ...(b.casts ?? []).map((c) => c.ts));
    if (!(b.casts ?? []).length && b.t_max > newest + IMPLAUSIBLE_JUMP_NS) {
      stats.implausibleTMax++;
      console.warn(`castscope: live batch t_max ${b.t_max} ns is ${((b.t_max - newest) / 1e9).toFixed(0)} s past the newest event; ignored`);
    } else {
      this.tMax = Math.max(newest, b.t_max);
    }
    const now = performance.now();
    if (b.events >= BUSY_LIVE_EVENTS) {
      this.busyUntil = now + BUSY_HOLD_MS;
      logPush(stats.busyLog, now);
    }
    for (const c of b.casts ?? []) {
      const key = liveKey(c.agent_id ?? b.agent_id, c.thread);
      const list = this.liveCasts.get(key) ?? [];
      list.push({ cast: c, receivedAt: now });
      if (list.length > 5000) list.splice(0, list.length - 5000);
      this.liveCasts.set(key, list);
      this.pendingLive.set(`${c.agent_id}:${c.seq}`, { cast: c, at: now });
      stats.liveCasts++;
    }
    if (this.pendingLive.size > 20000) {
      const drop = this.pendingLive.size - 20000;
      let i = 0;
      for (const k of this.pendingLive.keys()) {
        if (i++ >= drop) break;
        this.pendingLive.delete(k);
      }
    }
    if (this.follow) {
      const span = this.t1 - this.t0;
      this.t1 = this.tMax;
      this.t0 = this.t1 - span;
      this.cb.rangeChanged(this.t0, this.t1, true, now < this.busyUntil);
    }
    this.requestLivePaint();
    this.scheduleLiveRefetch();
  }

  onSkipped(events: number): void {
    stats.skipped += events;
    notice(`viewer fell behind: ${fmtCount(events)} events not shown live; refetched`, "warn");
    this.refetch(true);
  }

  /** Refetches the view at most every LIVE_REFETCH_MS, never two at once. */
  private scheduleLiveRefetch(): void {
    if (this.data.loading) {
      this.liveDirty = true;
      return;
    }
    if (this.liveTimer) return;
    const wait = Math.max(0, this.lastLiveFetch + LIVE_REFETCH_MS - performance.now());
    this.liveTimer = window.setTimeout(() => {
      this.liveTimer = 0;
      if (this.destroyed) return;
      this.refetch(true);
    }, wait);
  }

  private onData(): void {
    if (!this.data.loading) {
      this.pruneLive();
      if (this.liveDirty) {
        this.liveDirty = false;
        this.scheduleLiveRefetch();
      }
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

  /** Drops live casts that a later-started fetch has brought in. */
  private pruneLive(): void {
    for (const [key, list] of this.liveCasts) {
      if (!list.length) continue;
      const lane = laneForCast(this.layout, list[0].cast.agent_id, list[0].cast.thread);
      const got = lane ? this.data.lanes.get(lane.key) : undefined;
      if (!got) continue;
      const kept = list.filter((lc) => lc.receivedAt >= got.fetchedAt || lc.cast.ts >= got.window.t1 || lc.cast.ts < got.window.t0);
      this.liveCasts.set(key, kept);
    }
  }

  // ---- highlight and jump -------------------------------------------------------

  setHighlights(sites: { file: string; line: number }[]): void {
    this.highlights = new Set(sites.map((s) => `${s.line}:${s.file}`));
    this.requestPaint();
  }

  /** Puts `ts` at `at` (0..1) of a `span` wide view and zooms in until single casts are drawn. */
  jumpTo(ts: number, span: number, at = 0.5): void {
    this.setFollow(false);
    this.pendingJump = { ts, tries: 0 };
    this.setRange(ts - span * at, ts + span * (1 - at));
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
    this.setRange(j.ts - span * 0.1, j.ts + span * 0.9);
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
      cancelAnimationFrame(this.rafId);
      this.rafId = 0;
      this.paint();
    } else {
      this.requestDataPaint();
    }
  }

  requestPaint(): void {
    if (this.rafId || this.destroyed) return;
    this.rafId = requestAnimationFrame(() => {
      this.rafId = 0;
      this.paint();
    });
  }

  /**
   * A frame for data that came by itself (a live refetch's answer, the lanes
   * or numerics polled while live; anything but an answer input asked for):
   * at the next animation frame, but under heavy ingest at the pushed casts'
   * pace, so that it shares their frame instead of adding one. Input, and
   * the answers it asked for, paint at once.
   */
  private requestDataPaint(): void {
    if (performance.now() < this.busyUntil) this.requestLivePaint();
    else this.requestPaint();
  }

  /**
   * A frame for pushed casts: at the next animation frame, or LIVE_PAINT_MS
   * (BUSY_LIVE_PAINT_MS under heavy ingest) after the last frame.
   */
  private requestLivePaint(): void {
    if (this.livePaintTimer) return;
    const now = performance.now();
    const wait = this.lastPaintAt + (now < this.busyUntil ? BUSY_LIVE_PAINT_MS : LIVE_PAINT_MS) - now;
    if (wait <= 0) return this.requestPaint();
    this.livePaintTimer = window.setTimeout(() => {
      this.livePaintTimer = 0;
      this.requestPaint();
    }, wait);
  }

  private paint(): void {
    const start = performance.now();
    this.lastPaintAt = start;
    window.clearTimeout(this.livePaintTimer); // this frame draws what it waited for
    this.livePaintTimer = 0;
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
    const live = new Map<string, Cast[]>();
    for (const list of this.liveCasts.values()) {
      if (!list.length) continue;
      const lane = laneForCast(this.layout, list[0].cast.agent_id, list[0].cast.thread);
      if (!lane) continue;
      const into = live.get(lane.key) ?? [];
      for (const lc of list) into.push(lc.cast);
      live.set(lane.key, into);
    }
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
    );
    const end = performance.now();
    stats.paints++;
    stats.lastPaintMs = end - start;
    stats.maxPaintMs = Math.max(stats.maxPaintMs, stats.lastPaintMs);
    const withData = contents.filter((c) => c.data).length;
    if (stats.firstPaintAt === null && withData > 0) stats.firstPaintAt = end;
    if (stats.firstFullPaintAt === null && withData > 0 && withData === contents.length) stats.firstFullPaintAt = end;
    logPush(stats.paintLog, { at: end, ms: stats.lastPaintMs, lanesWithData: withData, lanes: contents.length });
    if (this.pendingLive.size) {
      const wall = performance.timeOrigin + end;
      for (const d of this.frame.casts) {
        if (d.x < GUTTER || d.x > this.width) continue;
        const k = `${d.cast.agent_id}:${d.cast.seq}`;
        if (this.pendingLive.delete(k)) recordLivePaint({ seq: d.cast.seq, agent_id: d.cast.agent_id, ts: d.cast.ts, paintedAt: wall });
      }
    }
  }

  private renderStatus(): void {
    const parts: string[] = [];
    if (this.live) parts.push(this.follow ? "live · following" : "live");
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

  // ---- input --------------------------------------------------------------------

  private localX(e: MouseEvent): { x: number; y: number } {
    const r = this.canvas.getBoundingClientRect();
    return { x: e.clientX - r.left, y: e.clientY - r.top };
  }

  private bindInput(): void {
    const c = this.canvas;
    c.addEventListener(
      "wheel",
      (e) => {
        e.preventDefault();
        const { x } = this.localX(e);
        if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
          this.panBy(e.deltaX / Math.max(1, this.width - GUTTER));
          return;
        }
        const unit = e.deltaMode === 1 ? 33 : e.deltaMode === 2 ? 400 : 1;
        this.zoomBy(Math.exp(e.deltaY * unit * 0.0015), Math.max(x, GUTTER));
      },
      { passive: false },
    );
    this.axis.addEventListener(
      "wheel",
      (e) => {
        e.preventDefault();
        const r = this.axis.getBoundingClientRect();
        this.zoomBy(Math.exp(e.deltaY * 0.0015), Math.max(e.clientX - r.left, GUTTER));
      },
      { passive: false },
    );
    c.addEventListener("pointerdown", (e) => {
      if (e.button !== 0) return;
      this.drag = { x: e.clientX, t0: this.t0, t1: this.t1, moved: false };
      c.setPointerCapture(e.pointerId);
    });
    c.addEventListener("pointermove", (e) => {
      const d = this.drag;
      if (d) {
        const dx = e.clientX - d.x;
        if (Math.abs(dx) > 3) d.moved = true;
        if (d.moved) {
          const dt = (dx / Math.max(1, this.width - GUTTER)) * (d.t1 - d.t0);
          this.hideTooltip();
          c.classList.add("dragging");
          this.setRange(d.t0 - dt, d.t1 - dt);
          return;
        }
      }
      this.hover(e);
    });
    c.addEventListener("pointerup", (e) => {
      const d = this.drag;
      this.drag = null;
      c.classList.remove("dragging");
      if (d && !d.moved) this.click(e);
    });
    c.addEventListener("pointerleave", () => this.hideTooltip());
    document.addEventListener("keydown", this.onKey);
  }

  private onKey = (e: KeyboardEvent): void => {
    const t = e.target as HTMLElement | null;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable)) return;
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    switch (e.key) {
      case "+":
      case "=":
        this.zoomBy(0.5);
        break;
      case "-":
      case "_":
        this.zoomBy(2);
        break;
      case "ArrowLeft":
        this.panBy(-0.2);
        break;
      case "ArrowRight":
        this.panBy(0.2);
        break;
      case "0":
        this.fit();
        break;
      case "Escape":
        this.hideTooltip();
        break;
      default:
        return;
    }
    e.preventDefault();
  };

  /** What is under (x, y), canvas CSS px: a cast mark first, then spans, then a bucket. */
  private pick(x: number, y: number): { text: string[]; target: Hover | null } | null {
    // Skipped steps and numerics marks first: small marks over the rest.
    for (const s of this.frame.skips) {
      if ((s.x - x) ** 2 + (s.y - y) ** 2 <= 8 * 8) {
        return { text: skipLines(s.row.series, s.point, s.before), target: { kind: "skip", series: s.row.series, point: s.point, before: s.before } };
      }
    }
    const marks = this.frame.numerics.filter((d) => x >= d.x0 - 1 && x <= d.x1 + 1 && y >= d.y0 - 1 && y <= d.y1 + 1).map((d) => d.item);
    if (marks.length) {
      const more = marks.length > 1 ? [`+ ${marks.length - 1} more numerics mark${marks.length > 2 ? "s" : ""} here (click for all)`] : [];
      return { text: [...markLines(marks[0]), ...marks.slice(1, 3).flatMap((m) => markProblems(m)), ...more], target: { kind: "numerics", marks } };
    }
    for (const row of this.layout.scalers) {
      if (y < row.y || y >= row.y + row.h) continue;
      const p = scaleAt(row.series, tOf(this.vp(), x));
      if (!p) return null;
      const s = row.series;
      return {
        text: [
          `GradScaler scale ${fmtScale(p.scale)} (2^${Math.log2(p.scale).toFixed(Number.isInteger(Math.log2(p.scale)) ? 0 : 2)})`,
          `since update #${fmtCount(p.updates)} at ${fmtDuration(p.t)}`,
          `${fmtCount(s.skipped_total)} of ${fmtCount(s.updates_total)} steps skipped in this run`,
        ],
        target: null,
      };
    }
    let best: Frame["casts"][number] | null = null;
    let bestD = 8 * 8;
    for (const d of this.frame.casts) {
      const dd = (d.x - x) ** 2 + (d.y - y) ** 2;
      if (dd <= bestD) {
        bestD = dd;
        best = d;
      }
    }
    if (best) return { text: castLines(best.cast, best.live), target: { kind: "cast", cast: best.cast } };
    for (const s of this.frame.ops) {
      if (x >= s.x0 - 1 && x <= s.x1 + 1 && y >= s.y0 && y <= s.y1) {
        const o = s.item;
        return {
          text: [
            `op ${o.op}`,
            `policy ${o.policy} · outcome ${o.outcome}`,
            `mode ${o.mode} · ${o.phase}`,
            `inputs ${(o.input_dtypes ?? []).join(", ")} → ${o.output_dtype}`,
            `duration ${fmtDuration(o.dur)}`,
            loc(o.location),
          ],
          target: { kind: "op", agent: o.agent_id, seq: o.seq },
        };
      }
    }
    for (const s of this.frame.kernels) {
      if (x >= s.x0 - 1 && x <= s.x1 + 1 && y >= s.y0 && y <= s.y1) {
        const k = s.item;
        return {
          text: [
            `${k.activity} ${k.name}`,
            `duration ${fmtDuration(k.dur)} · device ${k.device} stream ${k.stream}`,
            `launched by ${k.launched_by} #${k.launch_seq}`,
            k.bytes ? `bytes ${fmtBytes(k.bytes)}` : "",
          ].filter(Boolean),
          target: { kind: "kernel", agent: k.agent_id, seq: k.seq },
        };
      }
    }
    const lane = this.laneAt(y);
    if (lane) {
      for (const b of this.frame.buckets) {
        if (b.lane === lane && x >= b.x0 && x <= b.x1) {
          const k = b.bucket;
          const lines =
            lane.track.kind === "gpu"
              ? [`${fmtCount(k.kernels)} kernels, ${fmtDuration(k.kernel_ns)} busy`]
              : [
                  `${fmtCount(k.decisions)} cast decisions, ${fmtCount(k.casts)} casts (${fmtBytes(k.bytes)})`,
                  `to bf16 ${k.to_bfloat16} · to fp16 ${k.to_float16} · to fp32 ${k.to_float32}`,
                  `cache: miss ${k.miss} · hit ${k.hit} · stale hit ${k.stale_hit}`,
                  `${fmtCount(k.ops)} ops (${fmtDuration(k.op_ns)}) · backward ${k.backward}`,
                  `modes ${(k.modes ?? []).join(", ")}`,
                ];
          return { text: [`${fmtDuration(k.t)} + ${fmtDuration(b.bucketNs)}`, ...lines], target: null };
        }
      }
    }
    return null;
  }

  private laneAt(y: number): Lane | undefined {
    return this.layout.lanes.find((l) => y >= l.y && y < l.y + l.h);
  }

  private hover(e: PointerEvent): void {
    const { x, y } = this.localX(e);
    const p = x > GUTTER ? this.pick(x, y) : null;
    if (!p) {
      this.hideTooltip();
      this.canvas.classList.remove("pointing");
      return;
    }
    this.canvas.classList.toggle("pointing", p.target !== null);
    const tt = this.tooltip;
    tt.replaceChildren(...p.text.map((line, i) => h("div", { class: i === 0 ? "tt-title" : "tt-line" }, line)));
    tt.hidden = false;
    const pad = 14;
    const w = tt.offsetWidth;
    const hh = tt.offsetHeight;
    let left = e.clientX + pad;
    let top = e.clientY + pad;
    if (left + w > window.innerWidth - 4) left = e.clientX - pad - w;
    if (top + hh > window.innerHeight - 4) top = e.clientY - pad - hh;
    tt.style.left = `${Math.max(4, left)}px`;
    tt.style.top = `${Math.max(4, top)}px`;
  }

  private hideTooltip(): void {
    this.tooltip.hidden = true;
  }

  private click(e: PointerEvent): void {
    const { x, y } = this.localX(e);
    const p = x > GUTTER ? this.pick(x, y) : null;
    if (!p || !p.target) return;
    const t = p.target;
    if (t.kind === "cast") {
      this.select({ agent: t.cast.agent_id, seq: t.cast.seq });
      this.cb.select(t.cast.agent_id, t.cast.seq, "cast");
    } else if (t.kind === "numerics") {
      this.cb.note(t.marks.map(markNote));
    } else if (t.kind === "skip") {
      this.cb.note([skipNote(t.series, t.point, t.before)]);
    } else {
      this.select({ agent: t.agent, seq: t.seq });
      this.cb.select(t.agent, t.seq, t.kind);
    }
  }

  // ---- test hooks ---------------------------------------------------------------

  visibleCasts(): VisibleCast[] {
    const r = this.canvas.getBoundingClientRect();
    return this.frame.casts
      .filter((d) => d.x >= GUTTER && d.x <= this.width)
      .map((d) => ({
        seq: d.cast.seq,
        op_seq: d.cast.op_seq,
        agent_id: d.cast.agent_id,
        x: r.left + d.x,
        y: r.top + d.y,
        ts: d.cast.ts,
        file: d.cast.location?.file ?? null,
        line: d.cast.location?.line ?? null,
        op: d.cast.op,
        role: d.cast.role,
        cache: d.cast.cache,
        mode: d.cast.mode,
        live: d.live,
        highlighted: d.highlighted,
      }));
  }

  visibleNumerics(): VisibleNumerics[] {
    const r = this.canvas.getBoundingClientRect();
    const inView = (x: number) => x >= GUTTER && x <= this.width;
    const out: VisibleNumerics[] = [];
    for (const s of this.frame.skips) {
      if (!inView(s.x)) continue;
      out.push({ kind: "skip", agent_id: s.row.series.agent_id, x: r.left + s.x, y: r.top + s.y, file: s.row.series.location.file, line: s.row.series.location.line, text: skipLines(s.row.series, s.point, s.before) });
    }
    for (const d of this.frame.numerics) {
      const x = Math.min(Math.max((d.x0 + d.x1) / 2, GUTTER + 1), this.width - 1);
      if (d.x1 < GUTTER || d.x0 > this.width) continue;
      const m = d.item;
      out.push({ kind: m.kind, agent_id: m.agent_id, x: r.left + x, y: r.top + d.y0 + 2, file: m.location.file, line: m.location.line, text: markLines(m) });
    }
    return out;
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

function markNote(m: NumericsMark): NoteBlock {
  const [title, ...lines] = markLines(m);
  const fields: NoteBlock["fields"] = [];
  for (const [k, v] of Object.entries(m)) {
    if (k === "location") continue;
    fields.push([k, v === null || typeof v === "object" ? JSON.stringify(v) : v]);
  }
  fields.push(["location", `${m.location.file}:${m.location.line}`], ["function", m.location.function]);
  const event = m.first_nonfinite_seq > 0 ? { agent: m.agent_id, seq: m.first_nonfinite_seq, label: `the first call that went non-finite (op seq ${m.first_nonfinite_seq})` } : undefined;
  return { title, lines, fields, event };
}

function skipNote(s: ScalerSeries, p: ScalerPoint, before: ScalerPoint | undefined): NoteBlock {
  const [title, ...lines] = skipLines(s, p, before);
  const fields: NoteBlock["fields"] = [
    ["agent_id", s.agent_id],
    ["scale_before", before ? before.scale : null],
    ...Object.entries(p).map(([k, v]): [string, string | number | boolean] => [k, v]),
    ["location", `${s.location.file}:${s.location.line}`],
  ];
  return { title, lines, fields };
}

function liveKey(agent: AgentId, thread: number | string | undefined): string {
  return `${agent}/${thread ?? ""}`;
}

function loc(l: { file: string; line: number } | null | undefined): string {
  return l && l.file ? `${l.file}:${l.line}` : "(no source location)";
}

function castLines(c: Cast, live: boolean): string[] {
  const mode = MODE_BADGE[c.mode] ? `${c.mode} (not eager)` : c.mode;
  return [
    `${c.op} · arg ${c.arg}${typeof c.list_index === "number" && c.list_index >= 0 ? `[${c.list_index}]` : ""}`,
    `policy ${c.policy} · outcome ${c.outcome}`,
    `${c.src} → ${c.dst}`,
    `shape ${fmtShape(c.shape)} · ${fmtBytes(c.bytes)}`,
    `role ${c.role} · cache ${c.cache.replace("_", " ")}`,
    `mode ${mode} · ${c.phase}`,
    loc(c.location),
    live ? "(live, not yet refetched)" : "",
  ].filter(Boolean);
}

function legend(): HTMLElement {
  // Small static swatches drawn with canvas-free DOM: the colours are CSS classes.
  const item = (cls: string, label: string) => h("span", { class: "lg-item" }, h("span", { class: `lg ${cls}` }), label);
  return h(
    "span",
    { class: "legend" },
    item("lg-bf16", "→bf16"),
    item("lg-fp16", "→fp16"),
    item("lg-fp32", "→fp32"),
    item("lg-skip", "not cast"),
    item("lg-tri", "weight"),
    item("lg-sq", "input"),
    item("lg-circ", "activation"),
    item("lg-miss", "miss"),
    item("lg-hit", "hit"),
    item("lg-stale", "stale hit"),
    item("lg-back", "backward"),
    item("lg-skipped", "step skipped"),
    item("lg-numerics", "inf/NaN, overflow"),
    item("lg-underflow", "underflow"),
  );
}
