// Numerics on the timeline over a real recorded run: a GradScaler loop whose
// fc1 overflows float16 every 7th batch (tests/integration/scenarios/
// scaler_skips.py spikes; GradScaler skips 5 of its 40 steps), recorded by
// `castscope run`, then served by `castscope view`.

import { execFileSync } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { type ApiRun, apiGet, CASTSCOPE, PYTHON, REPO, schemaErrors, type Server, tempDir, view, waitForRun, watchPage } from "./castscope";
import type { NumericsAnswer, TracksAnswer } from "../src/api-types";
import type { VisibleNumerics } from "../src/timeline/visible";

const SCENARIO = path.join(REPO, "tests", "integration", "scenarios", "scaler_skips.py");
let server: Server;
let run: ApiRun;

test.describe.configure({ mode: "serial" });

test.beforeAll(async () => {
  const out = tempDir("scaler-skips");
  execFileSync(CASTSCOPE, ["run", "--out", out, "--", PYTHON, SCENARIO, "spikes"], { cwd: REPO, stdio: ["ignore", "pipe", "pipe"], timeout: 240_000 });
  server = await view(out);
  run = await waitForRun(server, { finished: true });
});

test.afterAll(async () => {
  await server?.stop();
});

function lineOf(marker: string): number {
  const lines = fs.readFileSync(SCENARIO, "utf8").split("\n");
  const i = lines.findIndex((l) => l.includes(marker));
  if (i < 0) throw new Error(`no line with ${marker} in ${SCENARIO}`);
  return i + 1;
}

async function numerics(page: Page): Promise<VisibleNumerics[]> {
  return page.evaluate(() => (window as unknown as { __castscope?: { visibleNumerics(): VisibleNumerics[] } }).__castscope?.visibleNumerics() ?? []);
}

/**
 * Hovers the mark `pick` finds until its tooltip shows, reading where it is
 * drawn each time (a lane grows as answers come in, moving what is below its
 * top), and returns where it was hovered.
 */
async function hoverMark(page: Page, pick: (marks: VisibleNumerics[]) => VisibleNumerics | undefined): Promise<VisibleNumerics> {
  let at: VisibleNumerics | undefined;
  await expect(async () => {
    at = pick(await numerics(page));
    expect(at).toBeTruthy();
    await page.mouse.move(at!.x, at!.y);
    await expect(page.locator(".tooltip")).toBeVisible({ timeout: 1000 });
  }).toPass({ timeout: 20_000 });
  return at!;
}

async function openTimeline(page: Page): Promise<VisibleNumerics[]> {
  await page.goto(`${server.url}#/run/${encodeURIComponent(run.run_id)}/timeline`);
  await expect(page.locator("canvas.tl-lanes")).toBeVisible();
  let drawn: VisibleNumerics[] = [];
  await expect
    .poll(async () => {
      drawn = await numerics(page);
      return drawn.filter((n) => n.kind === "skip").length;
    }, { timeout: 60_000 })
    .toBe(5);
  return drawn;
}

test("the numerics answer and the tracks it is drawn on match the viewer API's schema", async () => {
  const rid = encodeURIComponent(run.run_id);
  const answer = await apiGet<NumericsAnswer>(server, `/api/numerics?run=${rid}`);
  expect(schemaErrors("NumericsAnswer", answer)).toEqual([]);
  expect(schemaErrors("TracksAnswer", await apiGet<TracksAnswer>(server, `/api/tracks?run=${rid}`))).toEqual([]);
  expect(answer.scalers).toHaveLength(1);
  expect(answer.scalers[0].skipped_total).toBe(5);
  expect(answer.scalers[0].updates_total).toBe(40);
  expect(answer.marks.some((m) => m.location.line === lineOf("h = self.fc1(x)"))).toBe(true);
  // The schema says what it refuses too: an answer with a field it does not declare.
  expect(schemaErrors("NumericsAnswer", { ...answer, extra: 1 })).not.toEqual([]);
});

test("GradScaler's scale is a track with its 5 skipped steps marked, each saying what it backed off from and to", async ({ page }) => {
  const watch = await watchPage(page);
  const drawn = await openTimeline(page);
  await expect(page.locator(".legend")).toContainText("step skipped");
  const skips = drawn.filter((n) => n.kind === "skip").sort((a, b) => a.x - b.x);
  expect(skips.map((s) => s.text[0])).toEqual([
    "step skipped: scale 256 -> 128",
    "step skipped: scale 128 -> 64",
    "step skipped: scale 64 -> 32",
    "step skipped: scale 32 -> 16",
    "step skipped: scale 16 -> 8",
  ]);
  expect(skips.every((s) => s.line === lineOf("scaler.update()"))).toBe(true);

  const skip = await hoverMark(page, (marks) => marks.filter((n) => n.kind === "skip").sort((a, b) => a.x - b.x)[0]);
  const tooltip = page.locator(".tooltip");
  await expect(tooltip.locator(".tt-title")).toHaveText("step skipped: scale 256 -> 128");
  await expect(tooltip).toContainText("5 of 40 steps skipped in this run");
  await page.mouse.click(skip.x, skip.y);
  const detail = page.locator("section.detail");
  await expect(detail.locator(".note-title")).toHaveText("step skipped: scale 256 -> 128");
  await expect(detail.locator("table.fields")).toContainText("scale_before");
  await watch.check();
});

test("fc1's non-finite outputs are a mark on its thread's lane, with the counts and the line", async ({ page }) => {
  const watch = await watchPage(page);
  const drawn = await openTimeline(page);
  const line = lineOf("h = self.fc1(x)");
  const marks = drawn.filter((n) => n.kind !== "skip");
  const fc1 = marks.find((m) => m.line === line);
  expect(fc1, JSON.stringify(marks)).toBeTruthy();
  expect(fc1!.kind).toBe("op_output");
  expect(fc1!.text[0]).toMatch(new RegExp(`^aten::linear produced \\d+ inf/NaN of \\d+ values from finite inputs \\(float16 output at .*scaler_skips\\.py:${line}\\)$`));

  const hovered = await hoverMark(page, (marks) => marks.find((m) => m.kind !== "skip" && m.line === line));
  const tooltip = page.locator(".tooltip");
  await expect(tooltip.locator(".tt-title")).toHaveText(fc1!.text[0]);
  await page.mouse.click(hovered.x, hovered.y);
  const detail = page.locator("section.detail");
  await expect(detail.locator(".note-title").first()).toHaveText(fc1!.text[0]);
  // The op mark opens the first call that went non-finite.
  await detail.locator("button.note-event").first().click();
  await expect(detail.locator("table.fields")).toContainText("aten::linear");
  await expect(detail.locator(".source-where")).toContainText(`scaler_skips.py:${line}`);
  await watch.check();
});
