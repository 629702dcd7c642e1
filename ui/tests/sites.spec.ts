// The sites view over a job that runs one function eagerly and scripted
// (tests/jobs/script_vs_eager.py): the two modes cast differently at one line.

import path from "node:path";
import { expect, test } from "@playwright/test";
import { JOBS, runJob, type Server, waitForRun, watchPage } from "./castscope";

const JOB = path.join(JOBS, "script_vs_eager.py");
let server: Server | undefined;

test.afterAll(async () => {
  await server?.stop();
});

test("the sites view shows an eager/script difference, sortable and filterable", async ({ page }) => {
  const watch = await watchPage(page);
  server = await runJob("script_vs_eager.py");
  const run = await waitForRun(server, { finished: true });
  await page.goto(`${server.url}#/run/${encodeURIComponent(run.run_id)}/sites`);

  const table = page.locator(".sites-table table");
  await expect(table).toBeVisible();
  await expect(table.locator('th[data-sort="mode:eager"]')).toBeVisible();
  await expect(table.locator('th[data-sort="mode:script"]')).toBeVisible();

  // The mm line: float16 eagerly, bfloat16 scripted, marked as differing.
  const line = 10;
  const row = table.locator(`tr.row-mismatch[data-site="${JOB}:${line}"]`).first();
  await expect(row).toBeVisible();
  await expect(row.locator('td[data-mode="eager"]')).toContainText("float32 → float16");
  await expect(row.locator('td[data-mode="script"]')).toContainText("float16 → bfloat16");
  await expect(row.locator("td.mode.differs")).not.toHaveCount(0);

  // Only the differing rows, then a filter that matches nothing, then sorting.
  await page.getByLabel("only mode differences").check();
  for (const r of await table.locator("tbody tr").all()) await expect(r).toHaveClass(/row-mismatch/);
  await page.getByLabel("only mode differences").uncheck();
  await page.getByLabel("filter sites").fill("no-such-thing-here");
  await expect(table.locator("tbody tr")).toHaveCount(0);
  await page.getByLabel("filter sites").fill(`${path.basename(JOB)}:${line}`);
  await expect(table.locator("tbody tr").first()).toBeVisible();
  await expect(page).toHaveURL(/sites\?q=/);
  await page.getByLabel("filter sites").fill("");

  const totals = async () => (await table.locator("tbody tr td:nth-child(5)").allTextContents()).map((t) => Number(t.replace(/,/g, "")));
  await table.locator('th[data-sort="total"]').click(); // already sorted by total, descending: now ascending
  const asc = await totals();
  expect([...asc].sort((a, b) => a - b)).toEqual(asc);
  await table.locator('th[data-sort="total"]').click();
  const desc = await totals();
  expect([...desc].sort((a, b) => b - a)).toEqual(desc);
  await watch.check();
});
