// The timeline's lanes sized to what they draw, its first view and Fit on
// the training, and its filter (search box, dimmed casts, next match), over
// a real job (tests/jobs/late_train.py: a slow model construction, then a
// short training whose cat ops stack six casts; the density view over
// tests/jobs/dense_train.py) run by `castscope run --serve`.

import fs from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import type { SitesAnswer, TimelineAnswer, TracksAnswer } from "../src/api-types";
import { type ApiRun, apiGet, JOBS, runJob, type Server, type VisibleCast, visibleCasts, waitForCasts, waitForRun, watchPage } from "./castscope";

const JOB = path.join(JOBS, "late_train.py");
const MARK_R = 5; // a cast mark's half size (timeline/layout.ts)
let server: Server;
let run: ApiRun;

type Hooks = {
  setRange(a: number, b: number): void;
  getRange(): { t0: number; t1: number };
  tMax(): number;
  dataKinds(): Record<string, string>;
};

/** A cast as the test reads it from /api/timeline. */
type RunCast = { seq: number; op_seq: number; ts: number; op: string; src: string; dst: string; role: string; outcome: string; file: string; line: number };
let casts: RunCast[] = [];
let ops: { seq: number; ts: number; dur: number; op: string }[] = [];

test.describe.configure({ mode: "serial" });

test.beforeAll(async () => {
  server = await runJob("late_train.py");
  run = await waitForRun(server, { finished: true, minCasts: 50 });
  // Every cast of the run: it has fewer than the 5 000 events a lane shows one by one.
  const rid = encodeURIComponent(run.run_id);
  const tracks = await apiGet<TracksAnswer>(server, `/api/tracks?run=${rid}`);
  const names = tracks.processes.flatMap((p) => p.tracks.map((t) => t.track));
  const answer = await apiGet<TimelineAnswer>(server, `/api/timeline?run=${rid}&tracks=${names.map(encodeURIComponent).join(",")}&t0=0&t1=${tracks.t_max + 1}&px=2000`);
  for (const lane of answer.lanes) {
    if (lane.kind !== "events") throw new Error(`lane ${lane.track} came as density`);
    for (const c of lane.casts) casts.push({ ...c, file: lane.locations[c.location].file, line: lane.locations[c.location].line });
    ops.push(...lane.ops);
  }
  casts = casts.sort((a, b) => a.ts - b.ts || a.seq - b.seq);
});

test.afterAll(async () => {
  await server?.stop();
});

const hooks = (page: Page) => page.evaluate(() => (window as unknown as { __castscope?: Hooks }).__castscope !== undefined);
const range = (page: Page) => page.evaluate(() => (window as unknown as { __castscope: Hooks }).__castscope.getRange());
const setRange = (page: Page, t0: number, t1: number) =>
  page.evaluate(([a, b]) => (window as unknown as { __castscope: Hooks }).__castscope.setRange(a, b), [t0, t1]);

async function openTimeline(page: Page, query = ""): Promise<void> {
  await page.goto(`${server.url}#/run/${encodeURIComponent(run.run_id)}/timeline${query}`);
  await expect(page.locator("canvas.tl-lanes")).toBeVisible();
  await waitForCasts(page);
}

function lineOf(marker: string): number {
  const lines = fs.readFileSync(JOB, "utf8").split("\n");
  return lines.findIndex((l) => l.includes(marker)) + 1;
}

test("the first view and Fit frame the training, not the model's construction; Shift+0 shows the whole run", async ({ page }) => {
  const watch = await watchPage(page);
  const conversions = casts.filter((c) => c.outcome === "cast");
  const [first, last] = [conversions[0].ts, conversions.at(-1)!.ts];
  const train = last - first;
  // The construction's ops and decisions came two seconds before.
  expect(casts[0].ts).toBeLessThan(first - 1.5e9);
  await openTimeline(page);
  const near = async () => {
    const r = await range(page);
    expect(r.t0, JSON.stringify(r)).toBeLessThanOrEqual(first);
    expect(r.t0, JSON.stringify(r)).toBeGreaterThan(first - 0.1 * train);
    expect(r.t1, JSON.stringify(r)).toBeGreaterThanOrEqual(last);
    expect(r.t1, JSON.stringify(r)).toBeLessThan(last + 0.1 * train);
  };
  await expect.poll(async () => (await range(page)).t0).toBeGreaterThan(first - 0.1 * train);
  await near();

  await page.locator("canvas.tl-lanes").focus();
  await page.keyboard.press("Shift+0");
  const end = await page.evaluate(() => (window as unknown as { __castscope: Hooks }).__castscope.tMax());
  let r = await range(page);
  expect(r.t0).toBeLessThanOrEqual(0);
  expect(r.t1).toBeGreaterThanOrEqual(end);
  await page.keyboard.press("0");
  await near();
  await page.getByRole("button", { name: "Whole run" }).click();
  r = await range(page);
  expect(r.t0).toBeLessThanOrEqual(0);
  await page.getByRole("button", { name: "Fit" }).click();
  await near();
  // Opened at a range of its own, Fit still finds the training (from the whole run's answer).
  await openTimeline(page, `?t0=0&t1=${Math.round(casts[0].ts + 1e6)}`);
  await page.getByRole("button", { name: "Fit" }).click();
  await expect.poll(async () => (await range(page)).t0).toBeGreaterThan(first - 0.1 * train);
  await near();
  await watch.check();
});

test("lanes fit their marks: stacked casts in rows apart, all under the numerics strip and inside the lane", async ({ page }) => {
  const watch = await watchPage(page);
  await openTimeline(page);
  const cat = casts.find((c) => c.op.includes("cat") && c.line === lineOf("castscope-ui: cat line"))!;
  expect(cat).toBeDefined();
  const check = (drawn: VisibleCast[]) => {
    expect(drawn.length).toBeGreaterThan(0);
    for (const c of drawn) {
      const at = `${c.op} #${c.seq} at y ${c.y} in lane ${c.laneTop}..${c.laneBottom}`;
      // The numerics strip: a bar from 1 to 6 px under the lane's top, its triangle to 10 px.
      expect.soft(c.y - MARK_R, `${at}: under the numerics strip`).toBeGreaterThanOrEqual(c.laneTop + 11);
      expect.soft(c.y + MARK_R, `${at}: inside its lane`).toBeLessThanOrEqual(c.laneBottom);
    }
    const byOp = new Map<number, VisibleCast[]>();
    // Casts of one op (op_seq 0: a conversion outside autocast's ops, drawn at its own time).
    for (const c of drawn) if (c.op_seq) byOp.set(c.op_seq, [...(byOp.get(c.op_seq) ?? []), c]);
    for (const group of byOp.values()) {
      const ys = group.sort((a, b) => a.seq - b.seq).map((c) => c.y);
      for (let i = 1; i < ys.length; i++) expect.soft(ys[i] - ys[i - 1], `stacked rows of op ${group[0].op} overlap`).toBeGreaterThanOrEqual(2 * MARK_R);
    }
    return byOp;
  };
  check(await visibleCasts(page));
  // One cat op up close: its six casts, each in a row of its own.
  await setRange(page, cat.ts - 30_000, cat.ts + 30_000);
  await expect.poll(async () => (await visibleCasts(page)).filter((c) => c.op_seq === cat.op_seq).length).toBe(casts.filter((c) => c.op_seq === cat.op_seq).length);
  const byOp = check(await visibleCasts(page));
  expect(byOp.get(cat.op_seq)!.length).toBe(6);
  await watch.check();
});

test("nested ops are drawn in rows of their own", async ({ page }) => {
  const watch = await watchPage(page);
  // This job's ops do not nest (a callable overlay's module or function holds the ops it calls): one
  // made up around every op of each answer.
  await page.route("**/api/timeline?*", async (route) => {
    const res = await route.fetch();
    const answer = await res.json();
    for (const lane of answer.lanes as { kind: string; ops: { seq: number; ts: number; dur: number; op: string }[] }[]) {
      if (lane.kind !== "events" || lane.ops.length === 0) continue;
      const t0 = Math.min(...lane.ops.map((o) => o.ts));
      const t1 = Math.max(...lane.ops.map((o) => o.ts + o.dur));
      lane.ops.unshift({ ...lane.ops[0], seq: 1e9, ts: t0 - 1, dur: t1 - t0 + 2, op: "test::outer" });
    }
    await route.fulfill({ response: res, json: answer });
  });
  // The training's longest op, with nothing else for a while in its middle.
  const train = ops.filter((o) => o.ts >= casts.find((c) => c.outcome === "cast")!.ts - 1);
  const inner = train.reduce((a, b) => (b.dur > a.dur ? b : a));
  await openTimeline(page, `?t0=${inner.ts - inner.dur}&t1=${inner.ts + 2 * inner.dur}`);
  const lane = (await visibleCasts(page))[0];
  const x = (await page.evaluate((t) => (window as unknown as { __castscope: { xOfTime(t: number): number } }).__castscope.xOfTime(t), inner.ts + inner.dur / 2));
  const tooltip = page.locator(".tooltip");
  await page.mouse.move(x, lane.bodyTop + 6);
  await expect(tooltip).toContainText("op test::outer");
  await page.mouse.move(x, lane.laneBottom - 6);
  await expect(tooltip).toContainText(`op ${inner.op}`);
  await watch.check();
});

const matches = (c: VisibleCast | RunCast, want: Partial<Record<"src" | "dst" | "role" | "line", string | number>>) =>
  Object.entries(want).every(([k, v]) => (c as unknown as Record<string, unknown>)[k] === v);

test("a filter dims the casts that do not match, counts the matches in view and stays in the URL", async ({ page }) => {
  const watch = await watchPage(page);
  await openTimeline(page);
  const box = page.getByRole("searchbox", { name: "filter casts" });
  await page.locator("canvas.tl-lanes").focus();
  await page.keyboard.press("/");
  await expect(box).toBeFocused();
  await page.keyboard.type("float32->bf16 role:weight");
  await expect.poll(async () => (await visibleCasts(page)).some((c) => c.dimmed)).toBe(true);
  let drawn = await visibleCasts(page);
  const want = { src: "float32", dst: "bfloat16", role: "weight" };
  expect(drawn.filter((c) => !c.dimmed).length).toBeGreaterThan(0);
  for (const c of drawn) expect(c.dimmed, `${c.op} #${c.seq} ${c.src}->${c.dst} ${c.role}`).toBe(!matches(c, want));
  await expect(page.locator(".tl-search-count")).toHaveText(`${drawn.filter((c) => !c.dimmed).length} of ${drawn.length} casts in view match`);
  await expect(page).toHaveURL(/[?&]q=float32-%3Ebf16\+role%3Aweight/);

  // file:line
  const line = lineOf("castscope-ui: cat line");
  await box.fill(`late_train.py:${line}`);
  await expect.poll(async () => (await visibleCasts(page)).filter((c) => !c.dimmed).every((c) => c.line === line && c.op.includes("cat"))).toBe(true);
  drawn = await visibleCasts(page);
  expect(drawn.filter((c) => !c.dimmed).length).toBe(drawn.filter((c) => c.line === line).length);

  // The filter comes back with the URL.
  await expect(page).toHaveURL(/[?&]q=late_train\.py%3A\d+/);
  await page.reload();
  await waitForCasts(page);
  await expect(box).toHaveValue(`late_train.py:${line}`);
  await expect.poll(async () => (await visibleCasts(page)).some((c) => c.dimmed)).toBe(true);
  // An empty filter: nothing dimmed.
  await box.fill("");
  await expect.poll(async () => (await visibleCasts(page)).some((c) => c.dimmed)).toBe(false);
  await watch.check();
});

const centre = async (page: Page) => ((r) => (r.t0 + r.t1) / 2)(await range(page));

test("Enter and n go to the next matching cast, N and Shift+Enter to the previous, beyond the data in hand too", async ({ page }) => {
  const watch = await watchPage(page);
  const line = lineOf("castscope-ui: cat line");
  const wanted = casts.filter((c) => c.line === line && c.src === "bfloat16");
  expect(wanted.length).toBeGreaterThan(3);
  await openTimeline(page);
  // A view narrower than one step, before the first match: the next steps lie beyond the data fetched.
  const start = wanted[0].ts - 50_000;
  await setRange(page, start, start + 200_000);
  await page.waitForTimeout(300);
  const box = page.getByRole("searchbox", { name: "filter casts" });
  await box.fill(`late_train.py:${line} bf16->`);
  await box.press("Enter");
  await expect.poll(() => centre(page)).toBeCloseTo(wanted[0].ts, -1);
  await page.locator("canvas.tl-lanes").focus();
  for (const next of wanted.slice(1, 4)) {
    await page.keyboard.press("n");
    await expect.poll(() => centre(page), { timeout: 15_000 }).toBeCloseTo(next.ts, -1);
    await expect.poll(async () => (await visibleCasts(page)).some((c) => c.seq === next.seq && !c.dimmed)).toBe(true);
  }
  // N (and Shift+Enter) go back.
  await page.keyboard.press("N");
  await expect.poll(() => centre(page), { timeout: 15_000 }).toBeCloseTo(wanted[2].ts, -1);
  await box.press("Shift+Enter");
  await expect.poll(() => centre(page), { timeout: 15_000 }).toBeCloseTo(wanted[1].ts, -1);
  await watch.check();
});

test("in the density view the filter says it applies to single casts, and Enter zooms to a match", async ({ page }) => {
  const watch = await watchPage(page);
  // A run dense enough for density answers (tests/jobs/dense_train.py: some 18 000 events in 0.6 s), one mm at a line of its own halfway.
  const DENSE = path.join(JOBS, "dense_train.py");
  const dense = await runJob("dense_train.py");
  try {
    const denseRun = await waitForRun(dense, { finished: true, minCasts: 10_000 });
    const line = fs.readFileSync(DENSE, "utf8").split("\n").findIndex((l) => l.includes("castscope-ui: the rare line")) + 1;
    // The rare line's first cast, from the collector: its site's first seq, then that event's time.
    const rid = encodeURIComponent(denseRun.run_id);
    const tracks = await apiGet<TracksAnswer>(dense, `/api/tracks?run=${rid}`);
    const { sites } = await apiGet<SitesAnswer>(dense, `/api/sites?run=${rid}`);
    const seqs = sites.filter((r) => r.line === line && r.file.endsWith("dense_train.py")).map((r) => r.first_seq);
    expect(seqs.length, "the rare line's site").toBeGreaterThan(0);
    const agent = encodeURIComponent(String(tracks.processes[0].agent_id));
    const first = (await apiGet<{ ts: number }>(dense, `/api/event?run=${rid}&agent=${agent}&seq=${Math.min(...seqs)}`)).ts;

    await page.goto(`${dense.url}#/run/${rid}/timeline`);
    await expect.poll(() => hooks(page)).toBe(true);
    await expect.poll(() => page.evaluate(() => Object.values((window as unknown as { __castscope: Hooks }).__castscope.dataKinds()))).toEqual(["buckets"]);
    const before = await range(page);
    // The rare cast lies inside the first view, among thousands of others, not at its edge.
    expect(first).toBeGreaterThan(before.t0 + (before.t1 - before.t0) * 0.1);
    expect(first).toBeLessThan(before.t1 - (before.t1 - before.t0) * 0.1);
    const box = page.getByRole("searchbox", { name: "filter casts" });
    await box.fill(`dense_train.py:${line}`);
    await expect(page.locator(".tl-search-count")).toContainText("the filter applies once single casts are drawn");
    await box.press("Enter");
    await expect.poll(async () => (await visibleCasts(page)).filter((c) => !c.dimmed && c.line === line).length, { timeout: 30_000 }).toBeGreaterThan(0);
    const r = await range(page);
    expect(r.t0).toBeLessThanOrEqual(first);
    expect(r.t1).toBeGreaterThanOrEqual(first);
    expect(r.t1 - r.t0, "Enter zoomed in").toBeLessThanOrEqual(((before.t1 - before.t0) / 10) * 1.001);
    // Single casts around it: the others there drawn pale.
    expect((await visibleCasts(page)).filter((c) => c.dimmed).length).toBeGreaterThan(0);
    await watch.check();
  } finally {
    await dense.stop();
  }
});
