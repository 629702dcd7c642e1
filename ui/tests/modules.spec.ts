// The Modules view (the precision map as a module tree) over a real job
// (tests/jobs/stale_train.py: a Linear trained under bf16 autocast).

import { expect, test } from "@playwright/test";
import { runJob, type Server, waitForRun, watchPage } from "./castscope";

let server: Server | undefined;

test.afterAll(async () => {
  await server?.stop();
});

test("the modules view shows each module's and parameter's dtypes and bytes per step", async ({ page }) => {
  const watch = await watchPage(page);
  server = await runJob("stale_train.py");
  const run = await waitForRun(server, { finished: true, minCasts: 20 });
  await page.goto(`${server.url}#/run/${encodeURIComponent(run.run_id)}/modules`);

  // The model is the root: "<Linear>", its weight and bias as rows under it.
  const root = page.locator('details.pm-module[data-module="<Linear>"]');
  await expect(root).toBeVisible();
  await expect(root.locator("summary .pm-name").first()).toHaveText("<Linear>");
  const weight = root.locator('li.pm-parameter[data-parameter="weight"]');
  await expect(weight.locator(".pm-stored")).toHaveText("stored float32");
  await expect(weight.locator(".pm-computed")).toHaveText("computed bfloat16");
  // 20 steps in one autocast region: the weight is cast once, then served (stale) from the cache.
  await expect(weight.locator(".pm-bytes")).toHaveText(/^autocast \d+(\.\d+)? B\/step$/);
  await expect(page.locator(".modules-tree > p.muted")).toContainText("per optimizer step (20 steps)");
  // The tabs lead here and away.
  await expect(page.locator('#tabs a.tab.active')).toHaveText("Modules");
  await page.locator("#tabs a.tab", { hasText: "Sites" }).click();
  await expect(page.locator(".sites-table table")).toBeVisible();
  await watch.check();
});
