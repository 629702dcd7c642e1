// Counters under the timeline, on the timeline's x range: casts/s, bytes cast
// per second, live cast-cache entries and bytes per process, and optimizer
// steps as ticks in a thin strip above them (lines across the charts became
// a grey hatch with a thousand steps). Four small uPlot charts whose y axes
// fill the timeline's label column, so their x pixels line up with the lanes
// above. Time ticks are chosen by their labels' measured width, so labels
// never run into each other.

import uPlot from "uplot";
import { type AgentId, api, type CountersAnswer, isAbort } from "../api";
import { h } from "../dom";
import { fmtBytes, fmtBytesTick, fmtCount, fmtDuration, fmtCountTick, fmtTick, niceStep, nextNiceStep } from "../format";
import { errorText } from "../notice";
import { GUTTER } from "../timeline/layout";

const AGENT_COLORS = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#4d7c0f"];
const CHART_H = 72;
const AXIS_FONT = "11px system-ui";
// Room below each plot for its lowest value label (its middle sits on the plot's bottom edge).
const PLOT_PAD_BOTTOM = 8;
const LABEL_GAP = 14; // px between two time labels, at least
const STRIP_H = 10;
const STEP_COLOR = "#475569";
// Tick steps of the value axes: 1, 2, 5 × 10^k for counts, powers of two for bytes, so
// that every label is its tick's exact value (uPlot's default 2.5 steps needed a digit more).
const COUNT_INCRS = Array.from({ length: 16 }, (_, k) => [1, 2, 5].map((m) => m * 10 ** (k - 3))).flat();
const BYTE_INCRS = Array.from({ length: 50 }, (_, k) => 2 ** k);
const THROTTLE_MS = 250;
const LIVE_THROTTLE_MS = 1000;
// Under heavy ingest (the timeline's BUSY_LIVE_EVENTS), every 2 s: each
// answer redraws four canvases in a frame of their own, on the cores of the
// collector the page watches (docs/performance.md).
const BUSY_LIVE_THROTTLE_MS = 2000;

/** A chart's axis labels as drawn (CountersView.axes(), for the browser tests). */
export interface CounterAxes {
  title: string;
  font: string;
  canvas: { left: number; right: number; top: number; bottom: number };
  plot: { left: number; right: number; top: number; bottom: number };
  x: { v: number; text: string; pos: number }[];
  y: { v: number; text: string; pos: number }[];
}

interface ChartSpec {
  title: string;
  fmt: (v: number) => string;
  /** A value axis label for ticks `step` apart, `ref` the axis's largest |value|. */
  tick: (v: number, step: number, ref: number) => string;
  incrs: number[];
}

const SPECS: ChartSpec[] = [
  { title: "casts/s", fmt: (v) => compact(v), tick: fmtCountTick, incrs: COUNT_INCRS },
  { title: "bytes cast/s", fmt: (v) => fmtBytes(v), tick: fmtBytesTick, incrs: BYTE_INCRS },
  { title: "cache entries", fmt: (v) => compact(v), tick: fmtCountTick, incrs: COUNT_INCRS },
  { title: "cache bytes", fmt: (v) => fmtBytes(v), tick: fmtBytesTick, incrs: BYTE_INCRS },
];
const CACHE_CHARTS = [2, 3];

let measureCtx: CanvasRenderingContext2D | null = null;
/** Width in CSS px of `text` in the axes' font. */
function labelWidth(text: string): number {
  if (!measureCtx) {
    measureCtx = document.createElement("canvas").getContext("2d");
    if (!measureCtx) return text.length * 7;
    measureCtx.font = AXIS_FONT;
  }
  return measureCtx.measureText(text).width;
}

function compact(v: number): string {
  const a = Math.abs(v);
  if (a >= 1e9) return `${(v / 1e9).toFixed(1)}G`;
  if (a >= 1e6) return `${(v / 1e6).toFixed(1)}M`;
  if (a >= 1e3) return `${(v / 1e3).toFixed(1)}k`;
  return fmtCount(Math.round(v * 10) / 10);
}

export class CountersView {
  readonly el: HTMLElement;
  private charts: uPlot[] = [];
  private t0 = 0;
  private t1 = 1;
  private steps: CountersAnswer["steps"] = [];
  private ctrl: AbortController | null = null;
  private timer = 0;
  private last = 0;
  private width = 800;
  private agents: AgentId[] = [];
  private resizeObs: ResizeObserver;
  private status: HTMLElement;
  private host: HTMLElement;
  private strip: HTMLCanvasElement;
  private empties: HTMLElement[] = [];
  /** The time axis's tick step and unit reference, chosen by timeSplits for its labels. */
  private xStep = 1;
  private xRef = 1;
  /** Cache samples in the whole run (null: not known); an empty cache chart says "in this run" when 0. */
  private runCacheSamples: number | null = null;
  /** No cache sample in range: the cache charts keep their axes' place but write no values. */
  private noCache = false;

  constructor(private readonly run: string, private readonly onSelectRange: (t0: number, t1: number) => void) {
    this.status = h("span", { class: "muted" });
    this.host = h("div", { class: "counter-charts" });
    this.strip = h("canvas", { class: "steps-strip", "aria-label": "optimizer steps" });
    this.el = h("section", { class: "counters" }, h("div", { class: "counters-head" }, h("strong", null, "Counters"), " ", this.status), this.strip, this.host);
    this.resizeObs = new ResizeObserver(() => {
      const w = this.host.clientWidth;
      if (w && w !== this.width) {
        this.width = w;
        for (const c of this.charts) c.setSize({ width: w, height: CHART_H });
        this.drawSteps();
      }
    });
    this.resizeObs.observe(this.host);
  }

  /**
   * The charts take the timeline's range at once, in the frame the timeline
   * paints it (while following a live run, once per frame it paints, not per
   * pushed batch): their time axis stays under the lanes' instead of trailing
   * them until the next answer. `live`: new data is asked at most every
   * LIVE_THROTTLE_MS (BUSY_LIVE_THROTTLE_MS when `busy`: the run is under
   * heavy ingest).
   */
  setRange(t0: number, t1: number, live = false, busy = false): void {
    this.t0 = t0;
    this.t1 = t1;
    this.applyRange();
    this.schedule(live ? (busy ? BUSY_LIVE_THROTTLE_MS : LIVE_THROTTLE_MS) : THROTTLE_MS);
  }

  private applyRange(): void {
    for (const c of this.charts) c.setScale("x", { min: this.t0, max: this.t1 });
    this.drawSteps();
  }

  /** How many cache samples the run holds (its agents' cache_samples). */
  setRunCacheSamples(n: number): void {
    this.runCacheSamples = n;
  }

  /**
   * The time axis's ticks: the smallest nice step whose labels, measured,
   * fit between ticks, and of those only the ones whose label lies inside
   * the chart (a label cut at the right edge read as another number).
   */
  private timeSplits(min: number, max: number): number[] {
    const span = max - min;
    const plotW = this.width - GUTTER;
    if (!(span > 0) || plotW <= 0) return [];
    const ref = Math.max(Math.abs(min), Math.abs(max));
    const pxOf = (v: number) => GUTTER + ((v - min) / span) * plotW;
    let step = niceStep(span, Math.max(1, Math.floor(plotW / 60)));
    for (let tries = 0; tries < 30; tries++) {
      const first = Math.ceil(min / step) * step;
      const widest = Math.max(labelWidth(fmtTick(first, step, ref)), labelWidth(fmtTick(first + step * Math.floor((max - first) / step), step, ref)));
      if ((step / span) * plotW >= widest + LABEL_GAP) break;
      step = nextNiceStep(step);
    }
    this.xStep = step;
    this.xRef = ref;
    const splits: number[] = [];
    for (let k = Math.ceil(min / step); k * step <= max; k++) {
      const v = k * step;
      const half = labelWidth(fmtTick(v, step, ref)) / 2;
      const x = pxOf(v);
      if (x - half >= 0 && x + half <= this.width) splits.push(v);
    }
    return splits;
  }

  /** The optimizer steps in range as 1 px ticks in the strip above the charts, one per device-pixel column. */
  private drawSteps(): void {
    const dpr = window.devicePixelRatio || 1;
    const w = this.host.clientWidth || this.width;
    const [pw, ph] = [Math.round(w * dpr), Math.round(STRIP_H * dpr)];
    const c = this.strip;
    if (c.width !== pw) c.width = pw;
    if (c.height !== ph) c.height = ph;
    c.style.width = `${w}px`;
    c.style.height = `${STRIP_H}px`;
    const ctx = c.getContext("2d");
    if (!ctx) return;
    ctx.setTransform(1, 0, 0, 1, 0, 0);
    ctx.fillStyle = "#ffffff"; // the counters' background
    ctx.fillRect(0, 0, pw, ph);
    ctx.fillStyle = "#64748b";
    ctx.font = `${Math.round(9 * dpr)}px system-ui`;
    ctx.textBaseline = "middle";
    ctx.fillText("optimizer steps", 8 * dpr, ph / 2);
    const span = this.t1 - this.t0;
    if (!(span > 0) || this.steps.length === 0) return;
    const left = Math.round(GUTTER * dpr);
    const scale = (pw - left) / span;
    const tick = Math.max(1, Math.round(dpr));
    ctx.fillStyle = STEP_COLOR;
    let last = -1;
    for (const s of this.steps) {
      const x = Math.round(left + (s.t - this.t0) * scale);
      if (x <= left || x >= pw || x === last) continue;
      last = x;
      ctx.fillRect(x, Math.round(dpr), tick, ph - 2 * Math.round(dpr));
    }
  }

  /** Fetches again (throttled: at most every `throttleMs`, trailing call kept). */
  schedule(throttleMs = THROTTLE_MS): void {
    if (this.timer) return;
    const wait = Math.max(0, this.last + throttleMs - performance.now());
    this.timer = window.setTimeout(() => {
      this.timer = 0;
      this.last = performance.now();
      this.applyRange();
      void this.fetch();
    }, wait);
  }

  private async fetch(): Promise<void> {
    this.ctrl?.abort();
    const ctrl = new AbortController();
    this.ctrl = ctrl;
    const { t0, t1 } = this;
    const points = Math.max(16, Math.round((this.width - GUTTER) / 3));
    try {
      const c = await api.counters(this.run, Math.max(0, t0), Math.max(t1, 1), points, ctrl.signal);
      if (ctrl.signal.aborted) return;
      this.render(c);
      this.status.textContent = `bucket ${fmtDuration(c.bucket_ns)} · ${c.steps.length} optimizer steps in range`;
    } catch (e) {
      if (isAbort(e)) return;
      this.status.textContent = `counters unavailable: ${errorText(e)}`;
    }
  }

  private render(c: CountersAnswer): void {
    this.steps = c.steps ?? [];
    const agents = (c.cache ?? []).map((x) => x.agent_id);
    const mainData: uPlot.AlignedData = [c.t, c.casts_per_s, c.bytes_per_s];
    const tables: uPlot.AlignedData[] = (c.cache ?? []).map((x) => [x.t, x.live_casts, x.live_bytes] as uPlot.AlignedData);
    // The answer may carry a sample from beside the range (a line's end); the range has none of its own
    // unless a sample lies inside it, or samples on both sides draw a line across it.
    const [t0, t1] = [this.t0, this.t1];
    this.noCache = tables.every((t) => {
      const ts = t[0] as number[];
      return !ts.some((v) => v >= t0 && v <= t1) && !(ts.some((v) => v < t0) && ts.some((v) => v > t1));
    });
    let cacheCasts: uPlot.AlignedData = [[], []];
    let cacheBytes: uPlot.AlignedData = [[], []];
    if (tables.length === 1) {
      cacheCasts = [tables[0][0], tables[0][1]];
      cacheBytes = [tables[0][0], tables[0][2]];
    } else if (tables.length > 1) {
      const casts = uPlot.join(tables.map((t) => [t[0], t[1]] as uPlot.AlignedData));
      const bytes = uPlot.join(tables.map((t) => [t[0], t[2]] as uPlot.AlignedData));
      cacheCasts = casts;
      cacheBytes = bytes;
    }
    const datas: uPlot.AlignedData[] = [
      [mainData[0], mainData[1]],
      [mainData[0], mainData[2]],
      cacheCasts,
      cacheBytes,
    ];
    if (this.charts.length === 0 || agents.join() !== this.agents.join()) {
      this.agents = agents;
      this.build(datas);
    } else {
      this.charts.forEach((ch, i) => ch.setData(datas[i], false));
      for (const ch of this.charts) ch.setScale("x", { min: this.t0, max: this.t1 });
    }
    // An empty cache chart says why instead of showing a blank box.
    const noSamples = this.noCache;
    const why = this.runCacheSamples === 0 ? "no cache samples in this run" : "no cache samples in this range";
    for (const i of CACHE_CHARTS) {
      const el = this.empties[i];
      if (!el) continue;
      el.hidden = !noSamples;
      el.textContent = noSamples ? why : "";
    }
    this.drawSteps();
  }

  private build(datas: uPlot.AlignedData[]): void {
    for (const c of this.charts) c.destroy();
    this.charts = [];
    this.host.replaceChildren();
    this.width = this.host.clientWidth || this.width;
    this.empties = [];
    SPECS.forEach((spec, i) => {
      const perAgent = i >= 2;
      const series: uPlot.Series[] = [{}];
      if (perAgent) {
        this.agents.forEach((a, k) =>
          series.push({
            label: `agent ${a}`,
            stroke: AGENT_COLORS[k % AGENT_COLORS.length],
            width: 1.5,
            spanGaps: true,
            value: (_u, v) => (v === null ? "—" : spec.fmt(v)),
          }),
        );
      } else {
        series.push({ label: spec.title, stroke: i === 0 ? "#2563eb" : "#d97706", fill: i === 0 ? "rgba(37,99,235,0.10)" : "rgba(217,119,6,0.10)", width: 1.5, value: (_u, v) => (v === null ? "—" : spec.fmt(v)) });
      }
      const opts: uPlot.Options = {
        width: this.width,
        height: CHART_H,
        padding: [8, 0, i === SPECS.length - 1 ? 0 : PLOT_PAD_BOTTOM, 0],
        legend: { show: false },
        cursor: { drag: { x: true, y: false, setScale: false }, points: { show: false } },
        scales: {
          x: { time: false, auto: false, range: () => [this.t0, this.t1] },
          // A chart without data keeps a y range: uPlot would drop its axis, and its plot would
          // widen over the label column, out of line with the timeline's time axis.
          y: { range: (_u, min, max) => (min === null || max === null ? [0, 1] : uPlot.rangeNum(min, max, 0.1, true)) },
        },
        axes: [
          {
            show: i === SPECS.length - 1,
            size: 24,
            splits: (_u, _ax, min, max) => this.timeSplits(min, max),
            values: (_u, splits) => splits.map((v) => fmtTick(v, this.xStep, this.xRef)),
            font: AXIS_FONT,
            stroke: "#334155",
            grid: { stroke: "#eef2f7" },
          },
          {
            size: GUTTER,
            font: AXIS_FONT,
            stroke: "#334155",
            incrs: spec.incrs,
            space: 18, // px between value ticks, at least: two or three labels in a chart this low
            values: (_u, splits, _ax, _space, incr) => {
              if (perAgent && this.noCache) return splits.map(() => "");
              let ref = 0;
              for (const v of splits) ref = Math.max(ref, Math.abs(v));
              return splits.map((v) => spec.tick(v, incr, ref));
            },
            grid: { stroke: "#eef2f7" },
            ticks: { show: false },
            gap: 4,
          },
        ],
        series,
        hooks: {
          setSelect: [
            (u: uPlot) => {
              if (u.select.width > 3) {
                const a = u.posToVal(u.select.left, "x");
                const b = u.posToVal(u.select.left + u.select.width, "x");
                this.onSelectRange(a, b);
              }
              u.setSelect({ left: 0, top: 0, width: 0, height: 0 }, false);
            },
          ],
        },
      };
      const empty = h("span", { class: "chart-empty", hidden: true });
      this.empties[i] = empty;
      const wrap = h("div", { class: "counter-chart", "data-chart": spec.title }, h("span", { class: "chart-title" }, spec.title), empty);
      this.host.appendChild(wrap);
      this.charts.push(new uPlot(opts, datas[i], wrap));
    });
  }

  /** Test hook: each chart's axis labels as uPlot last drew them (page px: x the label's centre, y its middle). */
  axes(): CounterAxes[] {
    return this.charts.map((u, i) => {
      const over = u.over.getBoundingClientRect();
      const canvas = u.ctx.canvas.getBoundingClientRect();
      const ticks = (axis: number, scale: "x" | "y", origin: number) => {
        const a = u.axes[axis] as uPlot.Axis & { _splits?: number[] | null; _values?: string[] | null };
        if (a.show === false) return [];
        const splits = a._splits ?? [];
        const values = a._values ?? [];
        // An axis not drawn (no data) keeps its last splits: their positions are NaN.
        return splits.map((v, k) => ({ v, text: String(values[k] ?? ""), pos: origin + u.valToPos(v, scale) })).filter((t) => t.text !== "" && Number.isFinite(t.pos));
      };
      return {
        title: SPECS[i].title,
        font: AXIS_FONT,
        canvas: { left: canvas.left, right: canvas.right, top: canvas.top, bottom: canvas.bottom },
        plot: { left: over.left, right: over.right, top: over.top, bottom: over.bottom },
        x: ticks(0, "x", over.left),
        y: ticks(1, "y", over.top),
      };
    });
  }

  destroy(): void {
    this.ctrl?.abort();
    window.clearTimeout(this.timer);
    this.resizeObs.disconnect();
    for (const c of this.charts) c.destroy();
    this.charts = [];
  }
}
