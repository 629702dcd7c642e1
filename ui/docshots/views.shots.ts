// Each view of the viewer, as docs/viewer.md shows it: the Runs page, the
// timeline with its counters and findings, a finding's jump, the sites and
// modules views of a stored run, and a page following a live run.

import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { REPO, runJob, waitForCasts, waitForRun } from "../tests/castscope";

const IMAGES = path.join(REPO, "docs", "images");

async function shoot(page: Page, name: string): Promise<void> {
  await page.waitForTimeout(800); // the last paint and any notice settle
  await page.screenshot({ path: path.join(IMAGES, `viewer-${name}.png`) });
}

test("stored run: runs, timeline, findings, modules", async ({ page }) => {
  const server = await runJob("stale_train.py");
  try {
    const run = await waitForRun(server, { finished: true });
    const id = encodeURIComponent(run.run_id);
    await page.goto(server.url);
    await expect(page.locator("table").first()).toBeVisible();
    await shoot(page, "runs");
    await page.goto(`${server.origin}/#/run/${id}/timeline`);
    await waitForCasts(page);
    await shoot(page, "timeline");
    const site = page.locator("button.site-jump").first();
    await expect(site).toBeVisible();
    await site.click();
    await waitForCasts(page);
    await shoot(page, "findings");
    await page.goto(`${server.origin}/#/run/${id}/modules`);
    await expect(page.locator(".modules-tree > *").first()).not.toHaveText(/loading/);
    await shoot(page, "modules");
  } finally {
    await server.stop();
  }
});

test("sites: one function eager and scripted", async ({ page }) => {
  const server = await runJob("script_vs_eager.py");
  try {
    const run = await waitForRun(server, { finished: true });
    await page.goto(server.url); // the token, traded for the page's cookie
    await page.goto(`${server.origin}/#/run/${encodeURIComponent(run.run_id)}/sites`);
    await expect(page.locator(".sites-table table")).toBeVisible();
    await shoot(page, "sites");
  } finally {
    await server.stop();
  }
});

test("live: a page following a run", async ({ page }) => {
  const server = await runJob("slow_train.py");
  try {
    const run = await waitForRun(server, { minCasts: 200 });
    await page.goto(server.url);
    await page.goto(`${server.origin}/#/run/${encodeURIComponent(run.run_id)}/timeline`);
    await waitForCasts(page);
    await page.waitForTimeout(4000); // a few seconds of the run arriving
    await shoot(page, "live");
  } finally {
    await server.stop();
  }
});
