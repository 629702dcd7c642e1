// Marks on the timeline from what the agents said beyond their casts, over
// real jobs run by `castscope run --serve`: where a process lost events
// (tests/jobs/lossy_train.py: a second thread without a ring), and the
// filter's maker: terms on explicit casts beside autocast's
// (tests/jobs/explicit_casts.py).

import fs from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import type { TimelineAnswer, TracksAnswer } from "../src/api-types";
import type { VisibleLoss } from "../src/timeline/visible";
import { type ApiRun, apiGet, JOBS, runJob, type Server, visibleCasts, waitForCasts, waitForRun, watchPage } from "./castscope";

test.describe.configure({ mode: "serial" });

type Hooks = {
  setRange(a: number, b: number): void;
  visibleLosses(): VisibleLoss[];
};

const visibleLosses = (page: Page) =>
  page.evaluate(() => (window as unknown as { __castscope?: Partial<Hooks> }).__castscope?.visibleLosses?.() ?? []);

/** Every cast of a run's lanes (fewer than 5 000 events: one answer, one by one). */
async function runCasts(server: Server, run: ApiRun): Promise<{ ts: number; thread: string; line: number }[]> {
  const rid = encodeURIComponent(run.run_id);
  const tracks = await apiGet<TracksAnswer>(server, `/api/tracks?run=${rid}`);
  const names = tracks.processes.flatMap((p) => p.tracks.map((t) => t.track));
  const answer = await apiGet<TimelineAnswer>(server, `/api/timeline?run=${rid}&tracks=${names.map(encodeURIComponent).join(",")}&t0=0&t1=${tracks.t_max + 1}&px=2000`);
  return answer.lanes.flatMap((lane) => {
    if (lane.kind !== "events") throw new Error(`lane ${lane.track} came as density`);
    return lane.casts.map((c) => ({ ts: c.ts, thread: lane.track, line: lane.locations[c.location].line }));
  });
}

test.describe("lost events", () => {
  let server: Server;
  let run: ApiRun;
  test.beforeAll(async () => {
    server = await runJob("lossy_train.py");
    run = await waitForRun(server, { finished: true, minCasts: 400 });
  });
  test.afterAll(async () => {
    await server?.stop();
  });

  test("the timeline marks where events were dropped, with how many; the marks add up to the Runs page's count", async ({ page }) => {
    const watch = await watchPage(page);
    // The Runs page's "dropped" cell of the job's process.
    await page.goto(server.url);
    const card = page.locator(`article.run-card[data-run="${run.run_id}"]`);
    await expect(card).toBeVisible();
    const dropped = await card.evaluate((el) => {
      const heads = [...el.querySelectorAll("th")].map((th) => th.textContent?.trim());
      const col = heads.indexOf("dropped");
      const cell = el.querySelector("tbody tr")?.querySelectorAll("td")[col];
      return Number((cell?.textContent ?? "").replace(/,/g, ""));
    });
    // The second thread's 100 mm calls, each an op and its two casts, and no more than a few besides.
    expect(dropped).toBeGreaterThanOrEqual(300);

    // Where the thread ran: the main thread's one long pause between its casts before and after it.
    const casts = (await runCasts(server, run)).sort((a, b) => a.ts - b.ts);
    expect(new Set(casts.map((c) => c.thread)).size, "the thread without a ring has a lane").toBe(1);
    let gap = 1;
    for (let i = 2; i < casts.length; i++) if (casts[i].ts - casts[i - 1].ts > casts[gap].ts - casts[gap - 1].ts) gap = i;
    const [before, after] = [casts[gap - 1].ts, casts[gap].ts];
    expect(after - before, "the job pauses a second either side of the thread").toBeGreaterThan(1e9);

    await page.goto(`${server.url}#/run/${encodeURIComponent(run.run_id)}/timeline`);
    await waitForCasts(page);
    await expect(page.locator(".toolbar .legend")).toContainText("events lost");
    await page.getByRole("button", { name: "Whole run" }).click();
    await expect.poll(async () => (await visibleLosses(page)).length, { timeout: 15_000 }).toBeGreaterThan(0);
    const marks = await visibleLosses(page);
    expect(marks.reduce((n, m) => n + m.events_dropped, 0), "the marks' drops differ from the Runs page's").toBe(dropped);
    const mark = marks.find((m) => m.t0 <= before && m.t1 >= after);
    expect(mark, `no mark over the thread's time ${before}..${after}: ${JSON.stringify(marks)}`).toBeTruthy();
    expect(mark!.x1 - mark!.x0).toBeGreaterThanOrEqual(2);

    // Drawn: red on the header row over the mark, and nowhere on that row but over the marks.
    const row = await page.evaluate(async (y) => {
      await new Promise((r) => requestAnimationFrame(r));
      const canvas = document.querySelector("canvas.tl-lanes") as HTMLCanvasElement;
      const box = canvas.getBoundingClientRect();
      const s = canvas.width / box.width;
      const d = canvas.getContext("2d")!.getImageData(0, Math.round((y - box.top) * s), canvas.width, 1).data;
      const red: number[] = [];
      for (let i = 0; i < d.length; i += 4) if (d[i] > 150 && d[i + 1] < 60 && d[i + 2] < 60) red.push(box.left + i / 4 / s);
      return red;
    }, mark!.y);
    expect(row.filter((x) => x >= mark!.x0 - 1 && x <= mark!.x1 + 1).length, "no red on the process's header row over the mark").toBeGreaterThan(0);
    expect(row.filter((x) => !marks.some((m) => x >= m.x0 - 1 && x <= m.x1 + 1)), "red on the header row away from the marks").toEqual([]);

    // Hover: how many, and why.
    await page.mouse.move(mark!.x, mark!.y);
    const tooltip = page.locator(".tooltip");
    await expect(tooltip).toBeVisible();
    await expect(tooltip).toContainText(`${mark!.events_dropped.toLocaleString("en-US")} events dropped here`);
    await expect(tooltip).toContainText("ring");

    // Zoomed far out, a span of two seconds is still a mark two pixels wide.
    await page.evaluate(() => (window as unknown as { __castscope: Hooks }).__castscope.setRange(-1e13, 1e13));
    await expect.poll(async () => (await visibleLosses(page)).length).toBeGreaterThan(0);
    for (const m of await visibleLosses(page)) expect(m.x1 - m.x0).toBeGreaterThanOrEqual(2);
    await watch.check();
  });
});

test.describe("explicit casts", () => {
  const JOB = path.join(JOBS, "explicit_casts.py");
  let server: Server;
  let run: ApiRun;
  const lineOf = (marker: string) => fs.readFileSync(JOB, "utf8").split("\n").findIndex((l) => l.includes(marker)) + 1;
  test.beforeAll(async () => {
    server = await runJob("explicit_casts.py");
    run = await waitForRun(server, { finished: true, minCasts: 16 });
  });
  test.afterAll(async () => {
    await server?.stop();
  });

  test("maker:user and maker:explicit dim autocast's casts, maker:autocast the job's own", async ({ page }) => {
    const watch = await watchPage(page);
    const explicit = new Set([lineOf("castscope-ui: explicit to"), lineOf("castscope-ui: explicit float")]);
    const autocast = lineOf("castscope-ui: autocast mm");
    await page.goto(`${server.url}#/run/${encodeURIComponent(run.run_id)}/timeline`);
    await waitForCasts(page, 16);
    const box = page.getByRole("searchbox", { name: "filter casts" });
    for (const [term, wanted] of [
      ["maker:user", explicit],
      ["maker:explicit", explicit],
      ["maker:autocast", new Set([autocast])],
    ] as [string, Set<number>][]) {
      await box.fill(term);
      await expect
        .poll(async () => {
          const shown = await visibleCasts(page);
          const wrong = shown.filter((c) => c.dimmed === wanted.has(c.line ?? -1));
          const kept = shown.filter((c) => !c.dimmed);
          return `${shown.length >= 16 ? "all" : shown.length} shown, ${kept.length > 0 ? "some" : "none"} kept, ${wrong.length} wrong`;
        }, { message: term })
        .toBe("all shown, some kept, 0 wrong");
      // Four steps: two explicit casts and autocast's two each.
      await expect(page.locator(".tl-search-count")).toContainText("8 of 16 casts in view match");
    }
    await watch.check();
  });
});
