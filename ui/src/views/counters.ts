// Counters under the timeline, on the timeline's x range: casts/s, bytes cast
// per second, live cast-cache entries and bytes per process, optimizer steps
// as vertical lines. Four small uPlot charts whose y axes fill the timeline's
// label column, so their x pixels line up with the lanes above.

import uPlot from "uplot";
import { type AgentId, api, type CountersAnswer, isAbort } from "../api";
import { h } from "../dom";
import { fmtBytes, fmtCount, fmtTick } from "../format";
import { errorText } from "../notice";
import { GUTTER } from "../timeline/layout";

const AGENT_COLORS = ["#2563eb", "#db2777", "#059669", "#d97706", "#7c3aed", "#0891b2", "#dc2626", "#4d7c0f"];
const CHART_H = 72;
const AXIS_FONT = "11px system-ui";
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
}

const SPECS: ChartSpec[] = [
  { title: "casts/s", fmt: (v) => compact(v) },
  { title: "bytes cast/s", fmt: (v) => `${fmtBytes(v)}` },
  { title: "cache entries", fmt: (v) => compact(v) },
  { title: "cache bytes", fmt: (v) => fmtBytes(v) },
];

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

  constructor(private readonly run: string, private readonly onSelectRange: (t0: number, t1: number) => void) {
    this.status = h("span", { class: "muted" });
    this.host = h("div", { class: "counter-charts" });
    this.el = h("section", { class: "counters" }, h("div", { class: "counters-head" }, h("strong", null, "Counters"), " ", this.status), this.host);
    this.resizeObs = new ResizeObserver(() => {
      const w = this.host.clientWidth;
      if (w && w !== this.width) {
        this.width = w;
        for (const c of this.charts) c.setSize({ width: w, height: CHART_H });
      }
    });
    this.resizeObs.observe(this.host);
  }

  /**
   * `live`: the timeline follows a live run and moves with every pushed batch
   * (tens of times a second): the charts then move with the next fetch, at
   * most every LIVE_THROTTLE_MS (BUSY_LIVE_THROTTLE_MS when `busy`: the
   * run is under heavy ingest), instead of redrawing four charts per batch.
   */
  setRange(t0: number, t1: number, live = false, busy = false): void {
    this.t0 = t0;
    this.t1 = t1;
    if (!live) this.applyRange();
    this.schedule(live ? (busy ? BUSY_LIVE_THROTTLE_MS : LIVE_THROTTLE_MS) : THROTTLE_MS);
  }

  private applyRange(): void {
    for (const c of this.charts) c.setScale("x", { min: this.t0, max: this.t1 });
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
      this.status.textContent = `bucket ${fmtTick(c.bucket_ns, c.bucket_ns)} · ${c.steps.length} optimizer steps in range`;
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
  }

  private build(datas: uPlot.AlignedData[]): void {
    for (const c of this.charts) c.destroy();
    this.charts = [];
    this.host.replaceChildren();
    this.width = this.host.clientWidth || this.width;
    const stepsPlugin = (): uPlot.Plugin => ({
      hooks: {
        draw: [
          (u: uPlot) => {
            const ctx = u.ctx;
            ctx.save();
            ctx.strokeStyle = "rgba(15, 23, 42, 0.35)";
            ctx.setLineDash([3, 3]);
            ctx.lineWidth = 1;
            const { top, height } = u.bbox;
            for (const s of this.steps) {
              const x = Math.round(u.valToPos(s.t, "x", true)) + 0.5;
              if (x < u.bbox.left || x > u.bbox.left + u.bbox.width) continue;
              ctx.beginPath();
              ctx.moveTo(x, top);
              ctx.lineTo(x, top + height);
              ctx.stroke();
            }
            ctx.restore();
          },
        ],
      },
    });
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
        padding: [8, 0, 0, 0],
        legend: { show: false },
        cursor: { drag: { x: true, y: false, setScale: false }, points: { show: false } },
        scales: { x: { time: false, auto: false, range: () => [this.t0, this.t1] } },
        axes: [
          { show: i === SPECS.length - 1, size: 24, values: (_u, splits, _ax, _space, incr) => splits.map((v) => fmtTick(v, incr, Math.max(Math.abs(this.t0), Math.abs(this.t1)))), font: AXIS_FONT, stroke: "#334155", grid: { stroke: "#eef2f7" } },
          {
            size: GUTTER,
            font: AXIS_FONT,
            stroke: "#334155",
            values: (_u, splits) => splits.map((v) => spec.fmt(v)),
            grid: { stroke: "#eef2f7" },
            ticks: { show: false },
            gap: 4,
          },
        ],
        series,
        plugins: [stepsPlugin()],
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
      const wrap = h("div", { class: "counter-chart", "data-chart": spec.title }, h("span", { class: "chart-title" }, spec.title));
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
        return splits.map((v, k) => ({ v, text: String(values[k] ?? ""), pos: origin + u.valToPos(v, scale) })).filter((t) => t.text !== "");
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
