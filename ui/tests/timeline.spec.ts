// The timeline, its tooltip and detail panel, and the findings panel, over a
// real job (tests/jobs/stale_train.py; the density view over tests/jobs/dense_train.py) run by `castscope run --serve`.

import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { GUTTER } from "../src/timeline/layout";
import type { TimelineAnswer } from "../src/api-types";
import { type ApiRun, JOBS, jobLine, runJob, type Server, visibleCasts, waitForCasts, waitForRun, watchPage } from "./castscope";

const JOB = path.join(JOBS, "stale_train.py");
let server: Server;
let run: ApiRun;

test.describe.configure({ mode: "serial" });

test.beforeAll(async () => {
  server = await runJob("stale_train.py");
  run = await waitForRun(server, { finished: true, minCasts: 20 });
});

test.afterAll(async () => {
  await server?.stop();
});

async function openTimeline(page: Page): Promise<void> {
  await page.goto(`${server.url}#/run/${encodeURIComponent(run.run_id)}/timeline`);
  await expect(page.locator("canvas.tl-lanes")).toBeVisible();
  await waitForCasts(page);
}

async function range(page: Page): Promise<{ t0: number; t1: number }> {
  return page.evaluate(() => (window as unknown as { __castscope: { getRange(): { t0: number; t1: number } } }).__castscope.getRange());
}

test("the runs view lists the finished run and opens its timeline", async ({ page }) => {
  const watch = await watchPage(page);
  await page.goto(server.url);
  const card = page.locator(`article.run-card[data-run="${run.run_id}"]`);
  await expect(card).toBeVisible();
  await expect(card.locator(".badge.done")).toHaveText("finished");
  await expect(card.locator("td.cmd")).toContainText("stale_train.py");
  await card.getByText("Open timeline →").click();
  await expect(page).toHaveURL(/#\/run\/.+\/timeline/);
  await waitForCasts(page);
  await watch.check();
});

test("zoom with the keyboard and the wheel, around the cursor", async ({ page }) => {
  const watch = await watchPage(page);
  await openTimeline(page);
  const before = await range(page);
  await page.locator("canvas.tl-lanes").focus();
  await page.keyboard.press("+");
  const zoomed = await range(page);
  expect(zoomed.t1 - zoomed.t0).toBeCloseTo((before.t1 - before.t0) / 2, -1);

  // The wheel zooms around the time under the pointer: that time stays put.
  const box = (await page.locator("canvas.tl-lanes").boundingBox())!;
  const x = box.x + box.width * 0.7;
  const y = box.y + 30;
  const tAt = (r: { t0: number; t1: number }) => r.t0 + ((x - box.x - 180) / (box.width - 180)) * (r.t1 - r.t0);
  await page.mouse.move(x, y);
  const r0 = await range(page);
  await page.mouse.wheel(0, -300);
  await expect.poll(async () => (await range(page)).t1 - (await range(page)).t0).toBeLessThan(r0.t1 - r0.t0);
  const r1 = await range(page);
  expect(Math.abs(tAt(r1) - tAt(r0))).toBeLessThan((r0.t1 - r0.t0) * 0.01);

  // The time axis follows: its range is in the hash, and the casts were refetched.
  await expect(page).toHaveURL(/t0=\d+&t1=\d+/);
  await page.keyboard.press("-");
  await page.keyboard.press("0");
  await waitForCasts(page);
  await watch.check();
});

test("every lane of a view step comes in one request", async ({ page }) => {
  const watch = await watchPage(page);
  const asked: string[][] = [];
  page.on("request", (request) => {
    const url = new URL(request.url());
    if (url.pathname === "/api/timeline") asked.push((url.searchParams.get("tracks") ?? "").split(","));
  });
  await openTimeline(page);
  const tracks = await page.evaluate(async (runId) => {
    const answer = await (await fetch(`/api/tracks?run=${encodeURIComponent(runId)}`)).json();
    return (answer.processes as { tracks: { track: string }[] }[]).flatMap((p) => p.tracks.map((t) => t.track));
  }, run.run_id);
  expect(tracks.length).toBeGreaterThan(0); // this job has one lane; several in one answer: test_viewer_http.py's schema run
  await page.locator("canvas.tl-lanes").focus();
  for (const key of ["+", "+", "+", "ArrowRight", "-", "Shift+0", "0"]) await page.keyboard.press(key);
  await waitForCasts(page);
  expect(asked.length).toBeGreaterThan(1);
  for (const lanes of asked) expect([...lanes].sort()).toEqual([...tracks].sort());
  await watch.check();
});

test("hovering a cast shows its file:line; clicking it shows the source line", async ({ page }) => {
  const watch = await watchPage(page);
  await openTimeline(page);
  // Zoom on the first stale hit so its mark stands apart from its neighbours.
  const all = await visibleCasts(page);
  const target = all.find((c) => c.cache === "stale_hit") ?? all[0];
  await page.evaluate((ts) => (window as unknown as { __castscope: { setRange(a: number, b: number): void } }).__castscope.setRange(ts - 20_000, ts + 20_000), target.ts);
  await expect.poll(async () => (await visibleCasts(page)).some((c) => c.seq === target.seq)).toBe(true);
  const cast = (await visibleCasts(page)).find((c) => c.seq === target.seq)!;
  expect(cast.file).toBe(JOB);

  await page.mouse.move(cast.x, cast.y);
  const tooltip = page.locator(".tooltip");
  await expect(tooltip).toBeVisible();
  await expect(tooltip).toContainText(`${JOB}:${cast.line}`);
  await expect(tooltip).toContainText(cast.op);
  await expect(tooltip).toContainText("float32 → bfloat16");
  await expect(tooltip).toContainText(`cache ${cast.cache.replace("_", " ")}`);

  await page.mouse.click(cast.x, cast.y);
  const detail = page.locator("section.detail");
  await expect(detail).toBeVisible();
  await expect(detail.locator(".source-where")).toContainText(`${JOB}:${cast.line}`);
  await expect(detail.locator("table.fields")).toContainText(new RegExp(`seq${cast.seq}(?!\\d)`));
  // The casts of one op share its start time (one clock read per op): their marks are stacked apart
  // in the lane, in the order they were made (their seqs), so each can be pointed at.
  const sameOp = (await visibleCasts(page)).filter((c) => c.agent_id === cast.agent_id && c.op_seq === cast.op_seq);
  expect(sameOp.length).toBeGreaterThan(1);
  expect(new Set(sameOp.map((c) => c.x)).size).toBe(1);
  const ys = [...sameOp].sort((a, b) => a.seq - b.seq).map((c) => c.y);
  for (let i = 1; i < ys.length; ++i) expect(ys[i] - ys[i - 1]).toBeGreaterThanOrEqual(2 * 5);
  await expect(detail.locator("pre.source-line")).toContainText(jobLine(JOB, cast.line!).trim());
  await watch.check();
});

/** Pixels of the lanes' canvas painted with the halo (HIGHLIGHT_COLOR, amber at 0.45 alpha, over a grey or
 * white background) farther than 11.5 px from every highlighted cast (a halo's radius is 10). Casts within
 * 20 px beyond the lanes' ends are drawn but not listed as visible: 12 px at either end are not looked at. */
async function haloPixelsOutsideHalos(page: Page): Promise<number> {
  return page.evaluate((gutter) => {
    const api = (window as unknown as { __castscope: { visibleCasts(): { x: number; y: number; highlighted: boolean }[] } }).__castscope;
    const lit = api.visibleCasts().filter((c) => c.highlighted);
    const canvas = document.querySelector("canvas.tl-lanes") as HTMLCanvasElement;
    const box = canvas.getBoundingClientRect();
    const sx = canvas.width / box.width;
    const sy = canvas.height / box.height;
    const data = canvas.getContext("2d")!.getImageData(0, 0, canvas.width, canvas.height).data;
    const halo = [245, 158, 11];
    let outside = 0;
    for (let py = 0; py < canvas.height; py++)
      for (let px = 0; px < canvas.width; px++) {
        const i = (py * canvas.width + px) * 4;
        // The background under it, were it the halo: light and grey (no mark colour is, e.g. float16's amber).
        const under = [0, 1, 2].map((k) => (data[i + k] - 0.45 * halo[k]) / 0.55);
        const grey = Math.max(...under) - Math.min(...under) < 30 && Math.min(...under) > 150 && Math.max(...under) < 262;
        if (!grey || data[i] < data[i + 2] + 40 || px / sx < gutter + 12 || px / sx > box.width - 12) continue;
        const x = px / sx + box.left;
        const y = py / sy + box.top;
        if (!lit.some((c) => Math.hypot(c.x - x, c.y - y) <= 11.5)) outside++;
      }
    return outside;
  }, GUTTER);
}

test("the findings panel shows the stale-cache-hit and a click jumps to its site", async ({ page }) => {
  const watch = await watchPage(page);
  await openTimeline(page);
  const finding = page.locator('article.finding[data-kind="stale-cache-hit"]').first();
  await expect(finding).toBeVisible();
  await expect(page.locator(".sev-group.sev-critical, .sev-group.sev-error").first()).toBeVisible();
  const site = finding.locator("button.site-jump").first();
  const where = (await site.textContent())!;
  const [file, line] = [where.slice(0, where.lastIndexOf(":")), Number(where.slice(where.lastIndexOf(":") + 1))];
  expect(file).toBe(JOB);

  await page.evaluate(() => (window as unknown as { __castscope: { setRange(a: number, b: number): void } }).__castscope.setRange(0, 1000));
  await site.click();
  await expect
    .poll(async () => (await visibleCasts(page)).filter((c) => c.highlighted).length, { timeout: 30_000 })
    .toBeGreaterThan(0);
  for (const c of (await visibleCasts(page)).filter((c) => c.highlighted)) {
    expect(c.file).toBe(file);
    expect(c.line).toBe(line);
  }
  // The halos are circles around the highlighted casts and nothing more: no
  // halo fill beyond them (each arc once joined the one before it in the
  // shared path, filling wedges between stacked marks across the lane). Seen
  // over the first three steps: their casts (input, weight, bias: stacked)
  // hundreds of pixels apart.
  const ts = (await visibleCasts(page)).filter((c) => c.highlighted).map((c) => c.ts).sort((a, b) => a - b);
  const [first, third] = [ts[0], ts[Math.min(8, ts.length - 1)]];
  await page.evaluate(([a, b]) => (window as unknown as { __castscope: { setRange(a: number, b: number): void } }).__castscope.setRange(a, b),
    [first - (third - first) * 0.2 - 1, third + (third - first) * 0.2 + 1]);
  await expect.poll(async () => (await visibleCasts(page)).filter((c) => c.highlighted).length).toBeGreaterThanOrEqual(Math.min(9, ts.length));
  expect(await haloPixelsOutsideHalos(page)).toBe(0);
  // and a link to the site in the sites view
  await finding.locator("a.site-link").first().click();
  await expect(page).toHaveURL(/#\/run\/.+\/sites\?q=/);
  await expect(page.locator(`tr[data-site="${where}"]`).first()).toBeVisible();
  await watch.check();
});

test("counters share the timeline's range and show optimizer steps", async ({ page }) => {
  const watch = await watchPage(page);
  await openTimeline(page);
  await expect(page.locator(".counter-chart")).toHaveCount(4);
  await expect(page.locator(".counters-head")).toContainText(/\d+ optimizer steps in range/);
  await expect(page.locator(".counters-head")).not.toContainText("unavailable");
  await watch.check();
});

// ---- issue 70: a timeline people would rather look at ------------------------------

type Hooks = {
  setRange(a: number, b: number): void;
  getRange(): { t0: number; t1: number };
  tMax(): number;
  xOfTime(t: number): number;
  dataKinds(): Record<string, string>;
  counterAxes(): CounterAxes[];
  fmtTick(t: number, step: number, ref?: number): string;
};
type Box = { left: number; right: number; top: number; bottom: number };
type Tick = { v: number; text: string; pos: number };
type CounterAxes = { title: string; font: string; canvas: Box; plot: Box; x: Tick[]; y: Tick[] };

const UNIT_NS: Record<string, number> = { s: 1e9, ms: 1e6, "µs": 1e3, ns: 1 };

test("counter charts: time labels apart, inside and exact; value labels inside their charts", async ({ page }) => {
  const watch = await watchPage(page);
  await openTimeline(page);
  await expect(page.locator(".counter-chart")).toHaveCount(4);
  // The formatter writes a tick's value in full: 975.25 ms is not "975.3 ms".
  const ticks = await page.evaluate(() => {
    const f = (window as unknown as { __castscope: Hooks }).__castscope.fmtTick;
    return [f(975.25e6, 0.25e6, 975.25e6), f(42.0725e9, 2.5e6, 42.0725e9), f(1.5e9, 0.5e9, 1.5e9), f(-2.5e3, 2.5e3, 1e6)];
  });
  expect.soft(ticks).toEqual(["975.25 ms", "42.0725 s", "1.5 s", "-0.0025 ms"]);

  // Spans from 10 µs to the whole run around a cast one second in: at each, what uPlot drew.
  const c = (await visibleCasts(page))[0].ts;
  const sweep = await page.evaluate(async (center) => {
    const api = (window as unknown as { __castscope: Hooks }).__castscope;
    const ctx = document.createElement("canvas").getContext("2d")!;
    ctx.textBaseline = "middle";
    const out: { span: number; charts: (CounterAxes & { xw: number[]; ya: number[]; yd: number[] })[] }[] = [];
    for (let span = 1e4; span < 2e9; span *= 1.7) {
      api.setRange(center - span / 2, center + span / 2);
      for (let k = 0; k < 2; k++) await new Promise((r) => requestAnimationFrame(r));
      out.push({
        span,
        charts: api.counterAxes().map((a) => {
          ctx.font = a.font;
          const m = (t: Tick) => ctx.measureText(t.text);
          return { ...a, xw: a.x.map((t) => m(t).width), ya: a.y.map((t) => m(t).actualBoundingBoxAscent), yd: a.y.map((t) => m(t).actualBoundingBoxDescent) };
        }),
      });
    }
    return out;
  }, c);
  let xLabels = 0;
  for (const { span, charts } of sweep) {
    for (const a of charts) {
      const at = `${a.title} at span ${Math.round(span)} ns: ${JSON.stringify(a.x.map((t) => t.text))}`;
      for (let i = 0; i < a.x.length; i++) {
        const [l, r] = [a.x[i].pos - a.xw[i] / 2, a.x[i].pos + a.xw[i] / 2];
        expect.soft(l, `${at}: label ${i} leaves the canvas`).toBeGreaterThanOrEqual(a.canvas.left - 0.5);
        expect.soft(r, `${at}: label ${i} leaves the canvas`).toBeLessThanOrEqual(a.canvas.right + 0.5);
        if (i > 0) expect.soft(a.x[i - 1].pos + a.xw[i - 1] / 2, `${at}: labels ${i - 1} and ${i} overlap`).toBeLessThanOrEqual(l);
        const m = /^(-?\d+(?:\.\d+)?) (s|ms|µs|ns)$/.exec(a.x[i].text);
        expect(m, at).not.toBeNull();
        const step = a.x.length > 1 ? Math.abs(a.x[1].v - a.x[0].v) : span;
        expect.soft(Math.abs(Number(m![1]) * UNIT_NS[m![2]] - a.x[i].v), `${at}: label ${i} is not its tick's value`).toBeLessThan(step * 1e-3);
        xLabels++;
      }
      for (let i = 0; i < a.y.length; i++) {
        const at = `${a.title} at span ${Math.round(span)} ns: value label ${a.y[i].text}`;
        expect.soft(a.y[i].pos - a.ya[i], `${at} is cut at the top`).toBeGreaterThanOrEqual(a.canvas.top - 0.5);
        expect.soft(a.y[i].pos + a.yd[i], `${at} is cut at the bottom`).toBeLessThanOrEqual(a.canvas.bottom + 0.5);
      }
    }
  }
  expect(xLabels).toBeGreaterThan(sweep.length * 2);
  expect(sweep.at(-1)!.charts.every((a) => a.y.length > 0)).toBe(true);
  await watch.check();
});

/** The dark columns of the steps strip, as runs of adjacent device-pixel columns. */
async function stripRuns(page: Page): Promise<number> {
  return page.evaluate(() => {
    const strip = document.querySelector("canvas.steps-strip") as HTMLCanvasElement | null;
    if (!strip) return 0;
    const { width, height } = strip;
    const data = strip.getContext("2d")!.getImageData(0, 0, width, height).data;
    const x0 = Math.ceil((180 * width) / strip.getBoundingClientRect().width) + 1; // right of the label column
    let runs = 0;
    let prev = false;
    for (let x = x0; x < width; x++) {
      let dark = false;
      for (let y = 0; y < height && !dark; y++) dark = data[(y * width + x) * 4] < 160;
      if (dark && !prev) runs++;
      prev = dark;
    }
    return runs;
  });
}

test("optimizer steps are a strip above the counters, not lines over the charts; an empty cache chart says so", async ({ page }) => {
  const watch = await watchPage(page);
  await openTimeline(page);
  // The job's 20 steps come in its last 10 ms, about 0.45 ms apart.
  const end = await page.evaluate(() => (window as unknown as { __castscope: Hooks }).__castscope.tMax());
  await page.evaluate((t) => (window as unknown as { __castscope: Hooks }).__castscope.setRange(t - 10.5e6, t + 0.5e6), end);
  const status = page.locator(".counters-head");
  await expect(status).toContainText(/bucket .*· \d+ optimizer steps in range/);
  await expect.poll(async () => {
    const n = Number(/(\d+) optimizer steps in range/.exec((await status.textContent()) ?? "")?.[1] ?? -1);
    return n > 1 && (await stripRuns(page)) === n;
  }).toBe(true);
  const strip = (await page.locator("canvas.steps-strip").boundingBox())!;
  const first = (await page.locator(".counter-chart").first().boundingBox())!;
  expect(strip.height).toBeLessThanOrEqual(12);
  expect(strip.y + strip.height).toBeLessThanOrEqual(first.y + 0.5);
  // Inside the plots nothing grey: the charts' lines and fills are coloured, their grid nearly white.
  const grey = await page.evaluate(() =>
    [...document.querySelectorAll(".counter-chart canvas")].map((el) => {
      const canvas = el as HTMLCanvasElement;
      const over = canvas.parentElement!.querySelector(".u-over")!.getBoundingClientRect();
      const box = canvas.getBoundingClientRect();
      const s = canvas.width / box.width;
      const [x0, y0] = [Math.ceil((over.left - box.left) * s) + 1, Math.ceil((over.top - box.top) * s) + 1];
      const [x1, y1] = [Math.floor((over.right - box.left) * s) - 1, Math.floor((over.bottom - box.top) * s) - 1];
      const d = canvas.getContext("2d")!.getImageData(x0, y0, x1 - x0, y1 - y0).data;
      let n = 0;
      for (let i = 0; i < d.length; i += 4) {
        // The canvas is transparent over the white page: composite first.
        const [r, g, b] = [0, 1, 2].map((k) => (d[i + k] * d[i + 3]) / 255 + 255 - d[i + 3]);
        if (Math.max(r, g, b) - Math.min(r, g, b) <= 14 && r < 215) n++;
      }
      return n;
    }),
  );
  expect(grey).toEqual([0, 0, 0, 0]);

  // Before the training loop the job took no cache samples: the cache charts say so.
  await page.evaluate(() => (window as unknown as { __castscope: Hooks }).__castscope.setRange(0, 5e8));
  for (const chart of ["cache entries", "cache bytes"])
    await expect(page.locator(`.counter-chart[data-chart="${chart}"] .chart-empty`)).toHaveText("no cache samples in this range");
  await expect(page.locator('.counter-chart[data-chart="casts/s"] .chart-empty')).toBeHidden();
  await watch.check();
});

type Rgb = [number, number, number];
const rgbOf = (css: string): Rgb => (css.match(/\d+/g) ?? []).slice(0, 3).map(Number) as Rgb;

test("the density view marks stale hits in a colour of their own; the legend explains halo, badges, strips and bar height", async ({ page }) => {
  const watch = await watchPage(page);
  // A run dense enough for the collector to answer the first view in buckets
  // (tests/jobs/dense_train.py: some 18 000 events in 0.6 s, stale hits in most steps).
  const dense = await runJob("dense_train.py");
  try {
    const denseRun = await waitForRun(dense, { finished: true, minCasts: 10_000 });
    // The answers as the page gets them (read, not changed).
    const answers: { t0: number; t1: number; answer: TimelineAnswer }[] = [];
    page.on("response", async (res) => {
      if (!res.url().includes("/api/timeline?") || !res.ok()) return;
      const q = new URL(res.url()).searchParams;
      answers.push({ t0: Number(q.get("t0")), t1: Number(q.get("t1")), answer: (await res.json()) as TimelineAnswer });
    });
    await page.goto(`${dense.url}#/run/${encodeURIComponent(denseRun.run_id)}/timeline`);
    const hooks = () => page.evaluate(() => (window as unknown as { __castscope?: Hooks }).__castscope !== undefined);
    await expect.poll(hooks).toBe(true);
    await expect.poll(() => page.evaluate(() => Object.values((window as unknown as { __castscope: Hooks }).__castscope.dataKinds()))).toEqual(["buckets"]);
    await expect.poll(() => page.evaluate(() => (window as unknown as { __castscope: { loading(): boolean } }).__castscope.loading())).toBe(false);
    await page.waitForTimeout(300);
    const view = await range(page);
    // A bucket with stale hits in the view, from the answer the page drew (the last one over the view), a bucket away from its edges.
    const last = answers.filter((a) => a.t0 <= view.t0 && a.t1 >= view.t1).at(-1)?.answer.lanes[0];
    if (!last || last.kind !== "buckets") throw new Error(`no density answer over the view: ${JSON.stringify(answers.map((a) => [a.t0, a.t1, a.answer.lanes[0]?.kind]))}`);
    const b = last.buckets;
    const BUCKET = last.bucket_ns;
    const staleBuckets = b.t.filter((t, i) => b.stale_hit[i] > 0 && t > view.t0 + BUCKET && t + 2 * BUCKET < view.t1);
    expect(staleBuckets.length, "no bucket with stale hits in view").toBeGreaterThan(0);
    const bucket = staleBuckets[Math.floor(staleBuckets.length / 2)];
    const legend = page.locator(".toolbar .legend");
    const stale = rgbOf(await legend.locator(".lg-stale").evaluate((el) => getComputedStyle(el).borderTopColor));
    const numerics = rgbOf(await legend.locator(".lg-numerics").evaluate((el) => getComputedStyle(el).backgroundColor));
    expect.soft(stale, "stale hits and inf/NaN share a colour").not.toEqual(numerics);
    // In the stale bucket's column of the lane, the stale colour; nowhere the numerics red (this run has no numerics marks).
    const column = await page.evaluate(async (t) => {
      const api = (window as unknown as { __castscope: Hooks }).__castscope;
      await new Promise((r) => requestAnimationFrame(r));
      const canvas = document.querySelector("canvas.tl-lanes") as HTMLCanvasElement;
      const box = canvas.getBoundingClientRect();
      const s = canvas.width / box.width;
      const x = Math.round((api.xOfTime(t) - box.left) * s);
      const d = canvas.getContext("2d")!.getImageData(x, 0, 1, canvas.height).data;
      const out: number[][] = [];
      for (let i = 0; i < d.length; i += 4) out.push([d[i], d[i + 1], d[i + 2]]);
      return out;
    }, bucket + BUCKET / 2);
    const near = (p: number[], c: Rgb) => p.every((v, k) => Math.abs(v - c[k]) <= 8);
    expect.soft(column.some((p) => near(p, stale)), "no stale-hit colour in the stale bucket's column").toBe(true);
    expect.soft(column.some((p) => near(p, numerics)), "the numerics colour in a lane without numerics marks").toBe(false);

    for (const words of ["highlighted site", "not run eagerly", "density view", "bar height", "stale hits in bucket", "not eager in bucket"])
      await expect.soft(legend, `the legend does not explain "${words}"`).toContainText(words);
    await watch.check();
  } finally {
    await dense.stop();
  }
});

/** Words of the details panel (up to 24 characters: not paths) drawn across two lines. */
async function brokenWords(page: Page): Promise<string[]> {
  return page.evaluate(() => {
    const broken: string[] = [];
    const walk = document.createTreeWalker(document.querySelector("section.detail")!, NodeFilter.SHOW_TEXT);
    for (let n = walk.nextNode(); n; n = walk.nextNode()) {
      const text = n.textContent ?? "";
      for (const m of text.matchAll(/\S+/g)) {
        if (m[0].length > 24) continue;
        const r = document.createRange();
        r.setStart(n, m.index!);
        r.setEnd(n, m.index! + m[0].length);
        const tops = new Set([...r.getClientRects()].filter((b) => b.width > 0).map((b) => Math.round(b.top)));
        if (tops.size > 1) broken.push(m[0]);
      }
    }
    return broken;
  });
}

test("details in words without empty fields or broken words, how stale a hit was; a zoom hides the tooltip", async ({ page }) => {
  const watch = await watchPage(page);
  await openTimeline(page);
  const target = (await visibleCasts(page)).find((c) => c.cache === "stale_hit")!;
  expect(target).toBeDefined();
  await page.evaluate((ts) => (window as unknown as { __castscope: Hooks }).__castscope.setRange(ts - 20_000, ts + 20_000), target.ts);
  await expect.poll(async () => (await visibleCasts(page)).some((c) => c.seq === target.seq)).toBe(true);
  let cast = (await visibleCasts(page)).find((c) => c.seq === target.seq)!;
  await page.mouse.move(cast.x, cast.y);
  const tooltip = page.locator(".tooltip");
  await expect(tooltip).toBeVisible();
  // The wheel zooms: what the tooltip named is no longer under the pointer.
  await page.mouse.wheel(0, 300);
  await expect.poll(async () => ((r) => r.t1 - r.t0)(await range(page))).toBeGreaterThan(40_000);
  await expect.soft(tooltip).toBeHidden();

  cast = (await visibleCasts(page)).find((c) => c.seq === target.seq)!;
  await page.mouse.click(cast.x, cast.y);
  const detail = page.locator("section.detail");
  const fields = detail.locator("table.fields");
  await expect(fields).toContainText(new RegExp(`seq${cast.seq}(?!\\d)`));
  // A cast of a plain argument, a location without a stack: nothing said about either.
  await expect.soft(fields).not.toContainText("list_index");
  await expect.soft(fields).not.toContainText("stack");
  await expect.soft(fields).not.toContainText("also_consumed_at");
  await expect.soft(fields).not.toContainText("[]");
  await expect.soft(fields).toContainText("stale hit");
  expect.soft(await brokenWords(page)).toEqual([]);

  // How far behind its source the served copy was: the event's own versions, said in words.
  const ev = await page.evaluate(
    async ({ run, agent, seq }) => (await fetch(`/api/event?run=${encodeURIComponent(run)}&agent=${encodeURIComponent(String(agent))}&seq=${seq}`)).json(),
    { run: run.run_id, agent: cast.agent_id, seq: cast.seq },
  );
  expect(ev.cache).toBe("stale_hit");
  expect(ev.source_version).toBeGreaterThan(ev.cached_version);
  const behind = ev.source_version - ev.cached_version;
  await expect.soft(fields).toContainText(`${behind} version${behind === 1 ? "" : "s"} behind`);
  expect.soft(await brokenWords(page)).toEqual([]);
  await watch.check();
});

test("? shows the keyboard help, Escape closes it; zooming out stops at the run's span", async ({ page }) => {
  const watch = await watchPage(page);
  await openTimeline(page);
  await page.locator("canvas.tl-lanes").focus();
  await page.keyboard.press("?");
  const help = page.getByRole("dialog", { name: "keyboard shortcuts" });
  await expect.soft(help).toBeVisible();
  for (const words of ["zoom in", "zoom out", "pan", "whole run", "Esc"]) await expect.soft(help).toContainText(words);
  await page.keyboard.press("Escape");
  await expect.soft(help).toBeHidden();

  const end = await page.evaluate(() => (window as unknown as { __castscope: Hooks }).__castscope.tMax());
  for (let i = 0; i < 12; i++) await page.keyboard.press("-");
  const r = await range(page);
  expect(r.t1 - r.t0).toBeGreaterThan(end);
  expect(r.t0, JSON.stringify(r)).toBeGreaterThanOrEqual(-0.15 * end);
  expect(r.t1, JSON.stringify(r)).toBeLessThanOrEqual(1.15 * end);
  await watch.check();
});

test("following a live run, the counters' time axis stays under the lanes' (it trailed them until the next answer)", async ({ page }) => {
  const watch = await watchPage(page);
  const live = await runJob("slow_train.py");
  try {
    const liveRun = await waitForRun(live, { minCasts: 5 });
    await page.goto(`${live.url}#/run/${encodeURIComponent(liveRun.run_id)}/timeline`);
    await expect.poll(() => page.evaluate(() => (window as unknown as { __castscope?: { following(): boolean } }).__castscope?.following() ?? false)).toBe(true);
    await expect.poll(async () => (await page.evaluate(() => (window as unknown as { __castscope: Hooks }).__castscope.counterAxes().at(-1)?.x.length ?? 0))).toBeGreaterThan(1);
    // In a frame after a paint of the lanes: where the counters' time labels stand, and where the
    // lanes painted those times (the range of the newest paint; pushed batches move the range between paints).
    const before = await range(page);
    const worst = await page.evaluate(async (gutter) => {
      const api = (window as unknown as { __castscope: Hooks & { stats: { paintLog: { t0?: number; t1?: number }[] } } }).__castscope;
      const lanes = (document.querySelector("canvas.tl-lanes") as HTMLCanvasElement).getBoundingClientRect();
      let worst = 0;
      for (let i = 0; i < 30; i++) {
        await new Promise((r) => setTimeout(r, 97));
        await new Promise((r) => requestAnimationFrame(r));
        const last = api.stats.paintLog.at(-1)!;
        const p = last.t0 !== undefined ? last : api.getRange();
        for (const t of api.counterAxes().at(-1)!.x) {
          const x = lanes.left + gutter + ((t.v - p.t0!) / (p.t1! - p.t0!)) * (lanes.width - gutter);
          worst = Math.max(worst, Math.abs(x - t.pos));
        }
      }
      return worst;
    }, GUTTER);
    expect(worst).toBeLessThan(2);
    // It measured a moving view: still following the run, the range moved on.
    expect(await page.evaluate(() => (window as unknown as { __castscope: { following(): boolean } }).__castscope.following())).toBe(true);
    expect((await range(page)).t1).toBeGreaterThan(before.t1);
    await watch.check();
  } finally {
    await live.stop();
  }
});
