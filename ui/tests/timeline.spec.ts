// The timeline, its tooltip and detail panel, and the findings panel, over a
// real job (tests/jobs/stale_train.py) run by `castscope run --serve`.

import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { GUTTER } from "../src/timeline/layout";
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
  for (const key of ["+", "+", "+", "ArrowRight", "-", "0"]) await page.keyboard.press(key);
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
