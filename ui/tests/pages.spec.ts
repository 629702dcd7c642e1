// Every page of a run, stored and live, without a console error or a failed
// request; the Runs page's findings; the sites view at 1440 px and its way to
// the timeline and back; Back after a finding's jump; a live job whose viewer
// stopped with it. The stored run: tests/jobs/stale_train.py (stale cache
// hits: critical findings) copied into a deep folder, as a real project's
// absolute paths are long, run to its end and opened with `castscope view`.

import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { type ApiRun, apiGet, CASTSCOPE, JOBS, PYTHON, REPO, type Server, startCastscope, tempDir, UI_DIST, view, visibleCasts, waitForCasts, waitForRun } from "./castscope";

/** What went wrong on the page: console errors, page errors, failed requests, answers of 400 and up. */
function watchProblems(page: Page): string[] {
  const problems: string[] = [];
  const where = (url: string) => url.replace(/token=[^&#]+/, "token=…");
  page.on("console", (m) => {
    if (m.type() === "error") problems.push(`console error: ${m.text()} (${where(m.location().url)})`);
  });
  page.on("pageerror", (e) => problems.push(`page error: ${e.message}`));
  // An abort is the page's own choice (a superseded fetch, a closed feed, leaving the page).
  page.on("requestfailed", (r) => {
    if (r.failure()?.errorText !== "net::ERR_ABORTED") problems.push(`request failed: ${where(r.url())}: ${r.failure()?.errorText}`);
  });
  page.on("response", (r) => {
    if (r.status() >= 400) problems.push(`answer ${r.status()}: ${where(r.url())}`);
  });
  return problems;
}

type Hooks = { getRange(): { t0: number; t1: number }; setRange(t0: number, t1: number): void; tMax(): number };
const rangeOf = (page: Page) => page.evaluate(() => (window as unknown as { __castscope: Hooks }).__castscope.getRange());

let stored: Server;
let run: ApiRun;
let jobFile: string;
let staleLine: number;

// Not serial: each test says its own verdict (a failure restarts the worker, which runs the job again).
test.describe("a stored run", () => {
  test.beforeAll(async () => {
    const dir = path.join(tempDir("pages"), "a_project_with_a_longer_name", "src", "training_runs", "experiments", "mixed_precision", "autocast_cache");
    fs.mkdirSync(dir, { recursive: true });
    jobFile = path.join(dir, "stale_train.py");
    fs.copyFileSync(path.join(JOBS, "stale_train.py"), jobFile);
    staleLine = fs.readFileSync(jobFile, "utf8").split("\n").findIndex((l) => l.includes("castscope-ui: the stale line")) + 1;
    const out = path.join(path.dirname(dir), "out");
    execFileSync(CASTSCOPE, ["run", "--out", out, "--", PYTHON, jobFile], { cwd: REPO, stdio: ["ignore", "pipe", "pipe"], timeout: 240_000 });
    stored = await view(out);
    run = await waitForRun(stored, { finished: true, minCasts: 20 });
  });

  test.afterAll(async () => {
    await stored?.stop();
  });

  const timeline = () => `${stored.url}#/run/${encodeURIComponent(run.run_id)}/timeline`;

  test("the export buttons save the run's report, Perfetto and Chrome traces; SARIF is the command that writes it", async ({ page }) => {
    const problems = watchProblems(page);
    await page.goto(timeline());
    const menu = page.locator("section.export-menu");
    await expect(menu).toBeVisible();
    const saved = async (label: string) => {
      const [download] = await Promise.all([page.waitForEvent("download"), menu.getByRole("link", { name: label }).click()]);
      const file = await download.path();
      return { name: download.suggestedFilename(), body: fs.readFileSync(file) };
    };
    const report = await saved("Report JSON");
    expect(report.name).toMatch(/^castscope-.*-report\.json$/);
    const parsed = JSON.parse(report.body.toString("utf8"));
    expect(parsed.run.run_id).toBe(run.run_id);
    expect(parsed.findings.some((f: { kind: string }) => f.kind === "stale-cache-hit")).toBe(true);
    const chrome = await saved("Chrome trace");
    expect(JSON.parse(chrome.body.toString("utf8")).traceEvents.length).toBeGreaterThan(10);
    const perfetto = await saved("Perfetto trace");
    expect(perfetto.name).toMatch(/\.perfetto-trace$/);
    expect(perfetto.body.length).toBeGreaterThan(1000);
    await expect(menu.locator(".export-sarif code")).toContainText(`castscope report ${run.run_id}`);
    expect(problems).toEqual([]);
  });

  test("runs, timeline, findings, sites and modules: no console error, no failed request", async ({ page }) => {
    const problems = watchProblems(page);
    await page.goto(stored.url);
    const card = page.locator(`article.run-card[data-run="${run.run_id}"]`);
    await card.getByText("Open timeline →").click();
    await waitForCasts(page);
    await expect(page.locator("article.finding").first()).toBeVisible();
    await page.locator("#tabs a.tab", { hasText: "Sites" }).click();
    await expect(page.locator(".sites-table table")).toBeVisible();
    await page.locator("#tabs a.tab", { hasText: "Modules" }).click();
    await expect(page.locator("details.pm-module").first()).toBeVisible();
    await page.locator("#tabs a.tab", { hasText: "Runs" }).click();
    await expect(card).toBeVisible();
    await page.waitForTimeout(500); // answers still on their way
    expect(problems).toEqual([]);
  });

  test("the Runs page shows the run's critical findings, each count a link to them", async ({ page }) => {
    const { findings } = await apiGet<{ findings: { severity: string }[] }>(stored, `/api/findings?run=${encodeURIComponent(run.run_id)}`);
    const critical = findings.filter((f) => f.severity === "critical").length;
    expect(critical).toBeGreaterThan(0);
    await page.goto(stored.url);
    const count = page.locator(`article.run-card[data-run="${run.run_id}"] a.finding-count[data-severity="critical"]`);
    await expect(count).toHaveText(`${critical} critical`);
    await count.click();
    await expect(page).toHaveURL(/#\/run\/[^/]+\/timeline\?findings=critical/);
    await expect(page.locator(".findings .sev-group.sev-critical")).toBeInViewport();
  });

  test("the findings panel wraps words whole: a path breaks after a /, never inside a name", async ({ page }) => {
    await page.goto(timeline());
    const sites = page.locator(".findings-list .finding ul.sites li");
    await expect(sites.first()).toBeVisible();
    // Each word (a path's part with its "/", a hyphenated name's part with its "-") on one line: its boxes
    // share one top; and inside the panel.
    const broken = await page.locator(".findings-list").evaluate((list) => {
      const out: string[] = [];
      const right = list.getBoundingClientRect().right;
      const walker = document.createTreeWalker(list, NodeFilter.SHOW_TEXT);
      for (let n = walker.nextNode(); n; n = walker.nextNode()) {
        for (const m of (n.textContent ?? "").matchAll(/[^\s/-]+[/-]?/g)) {
          const r = document.createRange();
          r.setStart(n, m.index!);
          r.setEnd(n, m.index! + m[0].length);
          const boxes = [...r.getClientRects()];
          if (new Set(boxes.map((b) => Math.round(b.top))).size > 1) out.push(m[0]);
          if (boxes.some((b) => b.right > right + 1)) out.push(`${m[0]} (past the panel's edge)`);
        }
      }
      return out;
    });
    expect(broken).toEqual([]);
    // The path did wrap (it is longer than the panel is wide), so the check saw breaks.
    const jump = sites.locator("button.site-jump").first();
    await expect(jump).toHaveText(`${jobFile}:${staleLine}`);
    expect((await jump.boundingBox())!.height).toBeGreaterThan(30);
  });

  test("sites at 1440 px: every column on screen, paths shortened (in full in their title)", async ({ page }) => {
    expect(page.viewportSize()?.width).toBe(1440);
    await page.goto(`${stored.url}#/run/${encodeURIComponent(run.run_id)}/sites`);
    const table = page.locator(".sites-table table");
    await expect(table).toBeVisible();
    for (const th of await table.locator("thead th").all()) {
      const box = (await th.boundingBox())!;
      expect(box.x + box.width, `column ${await th.textContent()}`).toBeLessThanOrEqual(1440);
    }
    const row = table.locator(`tr[data-site="${jobFile}:${staleLine}"]`).first();
    const open = row.locator("a.site-open");
    await expect(open).toHaveAttribute("title", new RegExp(`^${jobFile.replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}:${staleLine}`));
    expect(((await open.textContent()) ?? "").length).toBeLessThan(jobFile.length);
  });

  test("a site's findings are marked on its row, each leading to them in the run's findings", async ({ page }) => {
    await page.goto(`${stored.url}#/run/${encodeURIComponent(run.run_id)}/sites`);
    const row = page.locator(`.sites-table tr[data-site="${jobFile}:${staleLine}"]`).first();
    const badge = row.locator(".site-findings a.badge.sev-critical", { hasText: "stale-cache-hit" }).first();
    await expect(badge).toBeVisible();
    // The finding names its sites' arguments: the rows of the line with stale hits carry it, the input row does not.
    const staleRows = page.locator(`.sites-table tr[data-site="${jobFile}:${staleLine}"]`);
    for (const r of await staleRows.all()) {
      const stale = Number(((await r.locator("td.num").nth(3).textContent()) ?? "0").replace(/,/g, ""));
      await expect(r.locator(".site-findings a", { hasText: "stale-cache-hit" })).toHaveCount(stale > 0 ? 1 : 0);
    }
    await badge.click();
    await expect(page).toHaveURL(/#\/run\/[^/]+\/timeline\?findings=critical/);
    await expect(page.locator('article.finding[data-kind="stale-cache-hit"]').first()).toBeVisible();
  });

  test("a site row leads to its casts on the timeline; Back returns to the row", async ({ page }) => {
    await page.goto(`${stored.url}#/run/${encodeURIComponent(run.run_id)}/sites?q=${encodeURIComponent("stale_train")}`);
    const row = page.locator(`.sites-table tr[data-site="${jobFile}:${staleLine}"]`).first();
    await row.locator("td.num").first().click();
    await expect(page).toHaveURL(/#\/run\/[^/]+\/timeline/);
    await expect.poll(async () => (await visibleCasts(page)).filter((c) => c.highlighted).length, { timeout: 30_000 }).toBeGreaterThan(0);
    for (const c of (await visibleCasts(page)).filter((c) => c.highlighted)) expect(`${c.file}:${c.line}`).toBe(`${jobFile}:${staleLine}`);

    await page.goBack();
    await expect(page).toHaveURL(/#\/run\/[^/]+\/sites\?/);
    await expect(page.getByLabel("filter sites")).toHaveValue("stale_train");
    await expect(page.locator(`.sites-table tr.row-at[data-site="${jobFile}:${staleLine}"]`)).toBeInViewport();
  });

  test("Back after a finding's jump returns to the range the jump started from", async ({ page }) => {
    await page.goto(timeline());
    await waitForCasts(page);
    const tMax = await page.evaluate(() => (window as unknown as { __castscope: Hooks }).__castscope.tMax());
    const from = { t0: Math.round(tMax * 0.8), t1: Math.round(tMax * 0.9) };
    await page.evaluate(([a, b]) => (window as unknown as { __castscope: Hooks }).__castscope.setRange(a, b), [from.t0, from.t1]);
    await expect(page).toHaveURL(new RegExp(`t0=${from.t0}&t1=${from.t1}`));

    await page.locator('article.finding[data-kind="stale-cache-hit"] button.site-jump').first().click();
    await expect.poll(async () => (await visibleCasts(page)).filter((c) => c.highlighted).length, { timeout: 30_000 }).toBeGreaterThan(0);
    await expect(page).not.toHaveURL(new RegExp(`t0=${from.t0}&t1=${from.t1}`));

    await page.goBack();
    await expect(page).toHaveURL(new RegExp(`#/run/[^/]+/timeline\\?t0=${from.t0}&t1=${from.t1}`));
    await expect.poll(() => rangeOf(page)).toEqual(from);
  });
});

test("a live job's pages: no console error or failed request; when the job ends, its viewer's end said plainly", async ({ page }) => {
  // castscope run without --serve: its collector, and so the viewer, exits with the job.
  const out = tempDir("pages-live");
  const live = await startCastscope(["run", "--out", out, "--ui-dir", UI_DIST, "--", PYTHON, path.join(JOBS, "slow_train.py"), "20"]);
  try {
    const r = await waitForRun(live, { minCasts: 1, timeoutMs: 120_000 });
    const problems = watchProblems(page);
    await page.goto(live.url);
    const card = page.locator(`article.run-card[data-run="${r.run_id}"]`);
    await expect(card.locator(".badge.live")).toBeVisible();
    await card.locator("a.run-sites").click();
    await expect(page.locator(".sites-table table")).toBeVisible();
    await page.locator("#tabs a.tab", { hasText: "Modules" }).click();
    await expect(page.locator(".modules-tree > *").first()).not.toHaveText(/loading/);
    await page.locator("#tabs a.tab", { hasText: "Timeline" }).click();
    await expect(page.locator("#conn")).toHaveText("● live");
    await expect.poll(async () => (await visibleCasts(page)).length, { timeout: 30_000 }).toBeGreaterThan(0);
    await expect(page.locator(".findings h2")).toBeVisible();
    // What went wrong while the server was surely up: it still answers, and the run is live.
    const seen = [...problems];
    const { runs } = await apiGet<{ runs: ApiRun[] }>(live, "/api/runs");
    expect(runs[0]?.live, "the job ended before its pages were seen").toBe(true);
    expect(seen).toEqual([]);

    // The job ends, its collector exits: the page says so, and stops asking.
    const banner = page.locator(".run-ended");
    await expect(banner).toBeVisible({ timeout: 90_000 });
    await expect(banner).toContainText("The job ended and its viewer stopped with it");
    await expect(banner).toContainText(`castscope view ${path.join(out, "castscope.db")}`); // the store /api/runs named
    await expect(page.locator("#conn")).toHaveText("ended: viewer stopped");
    await expect(page.locator(".tl-status")).not.toContainText("live");
    // The findings panel: the run's final list (the page saw it finish before the
    // viewer stopped) or what it is, never an error above an outdated "no findings".
    const findings = page.locator(".findings");
    await expect(findings).not.toContainText(/unavailable|Failed to fetch/);
    const final = await page.locator(".findings-list").textContent();
    if (!(final ?? "").includes("No findings for this run.")) await expect(findings).toContainText("viewer stopped");
    let asked = 0;
    page.on("request", () => asked++);
    await page.waitForTimeout(5_000);
    expect(asked, "requests after the viewer stopped").toBe(0);
  } finally {
    await live.stop();
  }
});
