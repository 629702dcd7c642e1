// An aggregate-mode run (docs/aggregate.md; tests/jobs/stale_train.py under
// `castscope run --aggregate`): the run list says it holds counters only,
// and the sites view, folded from counters, still shows the job's sites.

import { expect, test } from "@playwright/test";
import { runJob, type Server, waitForRun, watchPage } from "./castscope";

let server: Server | undefined;

test.afterAll(async () => {
  await server?.stop();
});

test("an aggregate run says counters only and still lists its sites", async ({ page }) => {
  const watch = await watchPage(page);
  server = await runJob("stale_train.py", undefined, ["--aggregate"]);
  const run = await waitForRun(server, { finished: true });
  await page.goto(server.url);

  const card = page.locator(`.run-card[data-run="${run.run_id}"]`);
  await expect(card.locator(".badge.aggregate")).toHaveText("aggregate mode: counters only");

  await page.goto(`${server.url}#/run/${encodeURIComponent(run.run_id)}/sites`);
  const table = page.locator(".sites-table table");
  await expect(table).toBeVisible();
  await expect(table.locator("tbody tr")).not.toHaveCount(0);

  // Counters carry no module: the Modules view says why there is no precision map.
  await page.goto(`${server.url}#/run/${encodeURIComponent(run.run_id)}/modules`);
  await expect(page.locator(".modules-tree p.muted")).toContainText("No precision map: aggregate mode's counters carry no module");
  await watch.check();
});
