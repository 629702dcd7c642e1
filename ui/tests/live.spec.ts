// A live run: the page follows a training job (tests/jobs/slow_train.py,
// about 15 s) and draws its casts as the batches arrive.

import { expect, test } from "@playwright/test";
import { apiGet, runJob, type Server, visibleCasts, waitForRun, watchPage } from "./castscope";

let server: Server | undefined;

test.afterEach(async () => {
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
  await watch.check();
});
