// A run whose file and op names contain markup: the page shows them as text
// and runs none of it. The crafted database comes from the server side's
// tests/integration/crafted_run.py.

import fs from "node:fs";
import path from "node:path";
import { execFileSync } from "node:child_process";
import { expect, test } from "@playwright/test";
import { PYTHON, REPO, type Server, tempDir, view, waitForRun, watchPage } from "./castscope";

const CRAFTED = path.join(REPO, "tests", "integration", "crafted_run.py");
let server: Server | undefined;

test.afterAll(async () => {
  await server?.stop();
});

test("markup in file and op names is shown as text and never runs", async ({ page }) => {
  test.skip(!fs.existsSync(CRAFTED), `${CRAFTED} does not exist yet (the server side provides it)`);
  const db = path.join(tempDir("crafted"), "crafted.db");
  execFileSync(PYTHON, [CRAFTED, "--db", db], { cwd: REPO, stdio: ["ignore", "pipe", "pipe"], timeout: 120_000 });
  server = await view(db);
  const run = await waitForRun(server, { finished: true });

  const watch = await watchPage(page);
  const dialogs: string[] = [];
  page.on("dialog", (d) => {
    dialogs.push(d.message());
    void d.dismiss();
  });
  const ran = () => page.evaluate(() => (window as unknown as { __xss?: unknown }).__xss !== undefined || document.querySelector("body script:not([src])") !== null);

  await page.goto(server.url);
  await expect(page.locator("article.run-card")).toBeVisible();
  await page.goto(`${server.url}#/run/${encodeURIComponent(run.run_id)}/sites`);
  const table = page.locator(".sites-table table");
  await expect(table).toBeVisible();
  await expect(table.getByText("<script>", { exact: false }).first()).toBeVisible();
  expect(await table.locator("script").count()).toBe(0);

  await page.goto(`${server.url}#/run/${encodeURIComponent(run.run_id)}/timeline`);
  await expect(page.locator("canvas.tl-lanes")).toBeVisible();
  await expect.poll(async () => (await page.evaluate(() => (window as unknown as { __castscope?: { visibleCasts(): unknown[] } }).__castscope?.visibleCasts().length ?? 0))).toBeGreaterThan(0);
  const casts = await page.evaluate(() => (window as unknown as { __castscope: { visibleCasts(): { x: number; y: number; file: string | null; op: string }[] } }).__castscope.visibleCasts());
  const crafted = casts.find((c) => /</.test(c.file ?? "") || /</.test(c.op)) ?? casts[0];
  await page.mouse.move(crafted.x, crafted.y);
  await expect(page.locator(".tooltip")).toBeVisible();
  expect(await page.locator(".tooltip script").count()).toBe(0);
  await page.mouse.click(crafted.x, crafted.y);
  await expect(page.locator("section.detail table.fields")).toBeVisible();
  expect(await page.locator("section.detail script").count()).toBe(0);
  expect(await page.locator(".findings script").count()).toBe(0);

  // Numerics: the overflowing cast's mark and the skipped step on the scale
  // track carry the crafted op, argument and file in their text.
  type Drawn = { kind: string; x: number; y: number; text: string[] };
  let drawn: Drawn[] = [];
  await expect
    .poll(async () => {
      drawn = await page.evaluate(() => (window as unknown as { __castscope: { visibleNumerics(): Drawn[] } }).__castscope.visibleNumerics());
      return drawn.map((d) => d.kind).sort().join();
    })
    .toBe("cast,skip");
  for (const d of drawn) {
    await page.mouse.move(d.x, d.y);
    await expect(page.locator(".tooltip")).toBeVisible();
    await expect(page.locator(".tooltip")).toContainText(d.kind === "cast" ? "<script>" : "step skipped");
    expect(await page.locator(".tooltip script, .tooltip img, .tooltip svg").count()).toBe(0);
    await page.mouse.click(d.x, d.y);
    await expect(page.locator("section.detail .note-title")).toHaveText(d.text[0]);
    expect(await page.locator("section.detail script, section.detail img, section.detail svg").count()).toBe(0);
  }

  expect(dialogs).toEqual([]);
  expect(await ran()).toBe(false);
  await watch.check();
});
