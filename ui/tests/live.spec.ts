// A live run: the page follows a training job (tests/jobs/slow_train.py,
// about 15 s) and draws its casts as the batches arrive.

import fs from "node:fs";
import path from "node:path";
import { expect, test } from "@playwright/test";
import { type ApiRun, apiGet, jobAgainst, REPO, runJob, type Server, type Started, serveStore, startProgram, tempDir, visibleCasts, waitForRun, watchPage } from "./castscope";

let server: Server | undefined;
let job: Started | undefined;

test.afterEach(async () => {
  await job?.stop();
  job = undefined;
  await server?.stop();
  server = undefined;
});

interface Stats {
  liveBatches: number;
  liveOpens: number;
  liveErrors: number;
  livePaints: { seq: number; ts: number; paintedAt: number }[];
  paints: number;
}

test("casts arrive on the timeline while the job trains", async ({ page }) => {
  const watch = await watchPage(page);
  server = await runJob("slow_train.py");
  const run = await waitForRun(server, { minCasts: 1, timeoutMs: 120_000 });
  expect(run.live).toBe(true);

  await page.goto(server.url);
  const card = page.locator(`article.run-card[data-run="${run.run_id}"]`);
  await expect(card.locator(".badge.live")).toBeVisible();
  await card.getByText("Open timeline →").click();
  await expect(page.locator("#follow")).toBeChecked();
  await expect(page.locator("#conn")).toHaveText("● live");

  const stats = () => page.evaluate(() => window.__castscopeStats as unknown as Stats);
  // Casts pushed by the live feed get painted, and the newest drawn cast moves on.
  await expect.poll(async () => (await stats()).livePaints.length, { timeout: 30_000 }).toBeGreaterThan(0);
  const newest = async () => Math.max(-1, ...(await visibleCasts(page)).map((c) => c.ts));
  const first = await newest();
  const firstPaints = (await stats()).livePaints.length;
  await expect.poll(newest, { timeout: 20_000 }).toBeGreaterThan(first);
  await expect
    .poll(async () => (await stats()).livePaints.length, { timeout: 10_000, message: `live paints stalled; stats when the wait began: ${JSON.stringify({ ...(await stats()), livePaints: undefined })}` })
    .toBeGreaterThan(firstPaints + 8);

  // Each recorded live paint has the cast's time and a wall-clock paint time.
  const p = (await stats()).livePaints[0];
  expect(typeof p.seq).toBe("number");
  expect(p.paintedAt).toBeGreaterThan(Date.now() - 120_000);

  // The run still live while we watched: the job has not ended yet.
  const { runs } = await apiGet<{ runs: { run_id: string; live: boolean }[] }>(server, "/api/runs");
  expect(runs.find((r) => r.run_id === run.run_id)?.live).toBe(true);

  // When the job ends the page says so and stops following the feed.
  await expect(page.locator("#conn")).toHaveText("finished", { timeout: 90_000 });
  await expect(page.locator(".run-ended")).toBeHidden();
  // The viewer stopping later (Ctrl-C on --serve) is noticed too: the feed watches a while after the end.
  await server.stop();
  server = undefined;
  await expect(page.locator(".run-ended")).toContainText("viewer stopped");
  await expect(page.locator("#conn")).toHaveText("ended: viewer stopped");
  await watch.check();
});

test("a page opened at #/live opens the next job's timeline, and not a killed job's run", async ({ page }) => {
  const watch = await watchPage(page);
  const out = tempDir("live-wait");
  const serve = await serveStore(out);
  server = serve;
  await page.goto(`${serve.url}#/live`);
  await expect(page.locator("h1")).toHaveText("Waiting for a live run");
  await expect(page.locator(".live-wait-status")).toHaveText("No runs in this store yet.");
  const historyBefore = await page.evaluate(() => history.length);

  const first = jobAgainst(serve.address, "slow_train.py", `${out}/first`);
  job = first;
  // The page moves to the run's timeline by itself, replacing #/live in the history.
  await expect(page).toHaveURL(/#\/run\/[^/]+\/timeline$/, { timeout: 120_000 });
  const run = await waitForRun(serve, { minCasts: 1, timeoutMs: 60_000 });
  expect(page.url()).toContain(`#/run/${encodeURIComponent(run.run_id)}/timeline`);
  await expect(page.locator("#follow")).toBeChecked();
  await expect(page.locator("#conn")).toHaveText("● live");
  await expect.poll(async () => (await visibleCasts(page)).length, { timeout: 30_000, message: `no casts drawn; job output:\n${first.output()}` }).toBeGreaterThan(0);
  expect(await page.evaluate(() => history.length)).toBe(historyBefore);

  // Killed, the job never sends its last batch: its run stays live in the
  // store but is seen no more. A page waiting at #/live does not open it.
  await first.kill();
  const lastSeen = async () => (await apiGet<{ runs: ApiRun[] }>(serve, "/api/runs")).runs.find((r) => r.run_id === run.run_id);
  let previous = "";
  await expect
    .poll(async () => {
      const now = (await lastSeen())?.last_seen_unix_ns ?? "";
      const settled = now === previous;
      previous = now;
      return settled;
    }, { timeout: 30_000, intervals: [2_000] })
    .toBe(true);
  expect((await lastSeen())?.live).toBe(true);
  await page.goto(`${serve.url}#/live`);
  await expect(page.locator(".live-wait-status")).toContainText("1 run is marked live but sent nothing since this page opened", { timeout: 10_000 });
  await page.waitForTimeout(2_000);
  await expect(page.locator("h1")).toHaveText("Waiting for a live run");

  const second = jobAgainst(serve.address, "slow_train.py", `${out}/second`);
  job = second;
  await expect(page).toHaveURL(/#\/run\/[^/]+\/timeline$/, { timeout: 120_000 });
  const { runs } = await apiGet<{ runs: ApiRun[] }>(serve, "/api/runs");
  const next = runs.find((r) => r.run_id !== run.run_id);
  expect(next, JSON.stringify(runs)).toBeDefined();
  expect(page.url()).toContain(`#/run/${encodeURIComponent(next!.run_id)}/timeline`);
  await expect(page.locator("#conn")).toHaveText("● live");
  await watch.check();
});

// Under heavy ingest (live messages of 5 000 events or more), a following
// page spends its frames on the pushed casts' pace only: an answer it did not
// ask for (the live refetch, the lanes polled) waits for the next of those
// frames instead of adding one, and the counters come every 2 s, not every
// second (docs/viewer.md, "Under heavy ingest"). The run: castscope's ingest
// bench filling the store as fast as the collector takes it, two ranks,
// watched for 5 s once the page follows it with its lanes complete.
test("under heavy ingest a following page paints only at the live pace, its counters every 2 s", async ({ page }) => {
  const watch = await watchPage(page);
  const bench = path.join(REPO, "build", "bench", "castscope_ingest_bench");
  expect(fs.existsSync(bench), `${bench} missing: scripts/setup.sh builds it`).toBe(true);
  const out = tempDir("heavy");
  const serve = await serveStore(out);
  server = serve;
  // Every request of the page in its resource timing (250 by default; the newest dropped past that).
  await page.addInitScript(() => performance.setResourceTimingBufferSize(100_000));
  await page.goto(`${serve.url}#/live`);
  await expect(page.locator(".live-wait-status")).toHaveText("No runs in this store yet.");

  // More events than the window needs: killed once it is over.
  const fill = startProgram(bench, ["--collector", serve.address, "fill", "--events", "40000000", "--agents", "2", "--run", "heavy"]);
  try {
    await expect(page).toHaveURL(/#\/run\/heavy\/timeline$/, { timeout: 60_000 });
    type Stats = { busyLog: number[]; paintLog: { at: number; ms: number; lanes: number }[]; fetchLog: { doneAt: number | null }[] };
    const stats = () => page.evaluate(() => window.__castscopeStats as unknown as Stats);
    // Following heavily: heavy messages come, the opening's own answer (asked
    // for by the page's load, so painted at once) is in, and the page draws
    // every lane of both ranks (a lane that comes later resizes the canvas,
    // which paints at once).
    const lanes = async () => {
      const { processes } = await apiGet<{ processes: { tracks: unknown[] }[] }>(serve, "/api/tracks?run=heavy");
      return processes.length === 2 ? processes.reduce((n, p) => n + p.tracks.length, 0) : -1;
    };
    await expect
      .poll(async () => {
        const s = await stats();
        const drawn = s.paintLog.at(-1)?.lanes ?? 0;
        return s.busyLog.length > 0 && s.fetchLog.some((f) => f.doneAt !== null) && drawn === (await lanes());
      }, { timeout: 60_000, message: `no heavy live message or lanes missing; fill:\n${fill.output()}` })
      .toBe(true);
    await page.waitForTimeout(1_000);
    const from = await page.evaluate(() => performance.now());
    await page.waitForTimeout(5_000);
    const to = await page.evaluate(() => performance.now());
    expect(fill.running(), `the fill ended inside the window:\n${fill.output()}`).toBe(true);
    const s = await stats();
    const counterAsks = await page.evaluate(() =>
      performance.getEntriesByType("resource").filter((e) => new URL(e.name).pathname === "/api/counters").map((e) => e.startTime),
    );
    const rel = (ts: number[]) => JSON.stringify(ts.map((t) => Math.round(t - from)));

    // The window: heavy throughout (the page holds its heavy pace until a
    // second after the last heavy message), with timeline answers.
    const busy = [from - 1_000, ...s.busyLog.filter((t) => t > from - 1_000 && t < to), to];
    const busyGaps = busy.slice(1).map((t, i) => t - busy[i]);
    expect(Math.max(...busyGaps), `heavy messages ${rel(busy)}; fill:\n${fill.output()}`).toBeLessThan(1_000);
    const answers = s.fetchLog.filter((f) => f.doneAt !== null && f.doneAt > from && f.doneAt < to).length;
    expect(answers, "no timeline answer arrived while following").toBeGreaterThan(0);
    // No input meanwhile, so no two frames closer than the heavy pace (200 ms).
    const starts = s.paintLog.map((p) => p.at - p.ms).filter((t) => t > from && t < to);
    expect(starts.length).toBeGreaterThan(3);
    const gaps = starts.slice(1).map((t, i) => t - starts[i]);
    expect(Math.min(...gaps), `paint starts ${rel(starts)}`).toBeGreaterThanOrEqual(195);
    // The counters: no two asks less than 2 s apart (1 s when not heavy).
    const asks = counterAsks.filter((t) => t > from && t < to);
    const askGaps = asks.slice(1).map((t, i) => t - asks[i]);
    expect(askGaps.length, `counter asks ${rel(asks)}`).toBeGreaterThan(0);
    expect(Math.min(...askGaps), `counter asks ${rel(asks)}`).toBeGreaterThanOrEqual(1_950);
  } finally {
    await fill.kill();
  }
  await watch.check();
});
