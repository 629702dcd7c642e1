// The fleet page: a real PostgreSQL (tests/integration/postgres_server.py,
// `fleet init` with a writer and a reader role), a real two-rank torchrun job
// shipped to it by `castscope run --ship` (tests/integration/scenarios/
// rank_divergence.py: rank 1 runs the head under float16, rank 0 under
// bfloat16), and `castscope-collector fleet view` over it with the reader
// role. Rows whose every string carries markup, and a job that looks still
// running, are added with psql as the superuser.

import { type ChildProcess, execFile, execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import path from "node:path";
import { expect, type Page, test } from "@playwright/test";
import { apiGet, CASTSCOPE, collectorHas, PYTHON, REPO, type Server, startCollector, tempDir, UI_DIST, watchPage } from "./castscope";

const PG_SERVER = path.join(REPO, "tests", "integration", "postgres_server.py");
const SCENARIO = path.join(REPO, "tests", "integration", "scenarios", "rank_divergence.py");
const INITDB = "/usr/lib/postgresql/15/bin/initdb";
const JOB = "fleet-job";
const HEAD_LINE = fs.existsSync(SCENARIO) ? fs.readFileSync(SCENARIO, "utf8").split("\n").findIndex((l) => l.includes("# the head line")) + 1 : 0;

// Markup in every string an agent or a node collector could ship; none of it may run.
const XSS_JOB = `job<img src=x onerror="window.__xss='job'"><script>window.__xss='job2'</script>`;
const XSS_NODE = `node<img src=x onerror="window.__xss='node'">`;
const XSS_KIND = `kind<img src=x onerror="window.__xss='kind'">`;
const XSS_SUMMARY = `summary<img src=x onerror="window.__xss='summary'"><b>bold</b>`;
const XSS_FILE = `/src/<img src=x onerror="window.__xss='file'">.py`;
const RUNNING_JOB = "still-running";

interface Fleet {
  writer_url: string;
  reader_url: string;
  writer_password_file: string;
  reader_password_file: string;
  admin_psql: string[];
}

interface ApiJob {
  job: string;
  running: boolean;
  ranks: number[];
}

let pg: ChildProcess | undefined;
let fleet: Fleet;
let server: Server | undefined;
let viewerFile = "";

test.describe.configure({ mode: "serial" });

/** tests/integration/postgres_server.py run as a program: resolves with the line of JSON it prints. */
function startPostgres(): Promise<Fleet> {
  const proc = spawn(PYTHON, [PG_SERVER], { cwd: REPO, stdio: ["pipe", "pipe", "pipe"] });
  pg = proc;
  let out = "";
  let err = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`postgres_server.py printed nothing in 90 s:\n${err}`)), 90_000);
    proc.stderr!.on("data", (b: Buffer) => (err += b.toString()));
    proc.stdout!.on("data", (b: Buffer) => {
      out += b.toString();
      const nl = out.indexOf("\n");
      if (nl >= 0) {
        clearTimeout(timer);
        resolve(JSON.parse(out.slice(0, nl)) as Fleet);
      }
    });
    proc.on("exit", (code) => {
      clearTimeout(timer);
      reject(new Error(`postgres_server.py exited (${code}):\n${err}`));
    });
  });
}

/** Runs SQL as the superuser (the server's unix socket, trust), on stdin. */
function psql(sql: string): string {
  const [program, ...args] = fleet.admin_psql;
  const env = Object.fromEntries(Object.entries(process.env).filter(([k]) => !k.startsWith("PG")));
  return execFileSync(program, args, { input: sql, env, encoding: "utf8", timeout: 60_000 });
}

/** `castscope run --ship`: the torchrun job, to its end; its output when it fails. */
function shipJob(): Promise<void> {
  const out = tempDir("fleet-job");
  const args = ["run", "--out", out, "--run-id", JOB, "--ship", fleet.writer_url, "--ship-password-file", fleet.writer_password_file, "--", PYTHON, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port=0", SCENARIO];
  return new Promise((resolve, reject) =>
    execFile(CASTSCOPE, args, { cwd: REPO, timeout: 180_000 }, (e, stdout, stderr) => (e ? reject(new Error(`castscope run: ${e.message}\n${stdout}\n${stderr}`)) : resolve())),
  );
}

async function jobs(): Promise<ApiJob[]> {
  return (await apiGet<{ jobs: ApiJob[] }>(server!, "/api/fleet/jobs")).jobs;
}

/** Until PostgreSQL has the job's end (every agent finished there). */
async function waitForEnd(job: string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  let last = "";
  while (Date.now() < deadline) {
    const all = await jobs();
    last = JSON.stringify(all);
    if (all.some((j) => j.job === job && !j.running)) return;
    await new Promise((r) => setTimeout(r, 300));
  }
  throw new Error(`${job} not ended in PostgreSQL after ${timeoutMs} ms: ${last}`);
}

const q = (s: string) => `$x$${s}$x$`; // dollar-quoted: markup and quotes travel as they are

/** The shipped job's latest rows, copied under XSS_JOB with markup in every string; viewers of three schemes. */
function insertCraftedJob(): void {
  psql(`
BEGIN;
INSERT INTO castscope.agents
SELECT (jsonb_populate_record(NULL::castscope.agents, to_jsonb(a) || jsonb_build_object(
  'job', ${q(XSS_JOB)}, 'node', ${q(XSS_NODE)},
  'viewer', CASE WHEN a.rank = 1 THEN 'http://node-b.example:8080/' WHEN a.rank = 0 THEN 'javascript:window.__xss=''viewer''' ELSE 'data:text/html,<script>window.__xss=1</script>' END))).*
  FROM (SELECT DISTINCT ON (collector, agent_id) * FROM castscope.agents WHERE job = '${JOB}' ORDER BY collector, agent_id, shipment DESC) a;
INSERT INTO castscope.job_ends
SELECT (jsonb_populate_record(NULL::castscope.job_ends, to_jsonb(e) || jsonb_build_object('job', ${q(XSS_JOB)}))).*
  FROM castscope.job_ends e WHERE job = '${JOB}';
INSERT INTO castscope.findings
SELECT collector, shipment, ${q(XSS_JOB)}, ${q(XSS_KIND)}, 'warning', ${q(XSS_SUMMARY)}, ${q(XSS_FILE)}, 7, '[0, 1]'::jsonb, '{}'::jsonb
  FROM castscope.job_ends WHERE job = '${JOB}' ORDER BY shipment DESC LIMIT 1;
INSERT INTO castscope.rank_divergences
SELECT ${q(XSS_JOB)}, site, computed_at, sides FROM castscope.rank_divergences WHERE job = '${JOB}';
INSERT INTO castscope.sites VALUES (4242, ${q(XSS_FILE)}, 7, ${q(`fn<img src=x onerror="window.__xss='fn'">`)}, ${q(`op<svg onload="window.__xss='op'">`)}, ${q(`arg<script>window.__xss='arg'</script>`)});
INSERT INTO castscope.job_sites
SELECT (jsonb_populate_record(NULL::castscope.job_sites, to_jsonb(s) || jsonb_build_object('job', ${q(XSS_JOB)}, 'site', 4242, 'count', 1000000))).*
  FROM castscope.job_sites s WHERE job = '${JOB}' LIMIT 1;
COMMIT;`);
}

/** A job whose agents have not finished: the page polls while it runs. */
function insertRunningJob(finished: boolean): void {
  psql(`
INSERT INTO castscope.agents
SELECT (jsonb_populate_record(NULL::castscope.agents, to_jsonb(a) || jsonb_build_object(
  'job', '${RUNNING_JOB}', 'finished', ${finished}, 'shipment', a.shipment + ${finished ? 1000 : 0}, 'last_seen', now()))).*
  FROM (SELECT DISTINCT ON (collector, agent_id) * FROM castscope.agents WHERE job = '${JOB}' ORDER BY collector, agent_id, shipment DESC) a;`);
}

async function noScriptRan(page: Page, dialogs: string[]): Promise<void> {
  expect(dialogs).toEqual([]);
  expect(await page.evaluate(() => (window as unknown as { __xss?: unknown }).__xss)).toBeUndefined();
  expect(await page.locator("#app img, #app script, #app svg, #app b").count()).toBe(0);
}

test.beforeAll(async () => {
  test.skip(!fs.existsSync(INITDB), `PostgreSQL 15 is not installed (${INITDB}); scripts/setup.sh --tests installs it`);
  test.skip(!collectorHas(["fleet", "view"], "--viewer-file"), "castscope-collector has no `fleet view` yet");
  test.setTimeout(240_000);
  fleet = await startPostgres();
  viewerFile = path.join(tempDir("fleet-view"), "viewer.url");
  // The page first (it needs no job), then the job: its ~10 s overlap the page's start.
  const shipped = shipJob();
  server = await startCollector(["fleet", "view", fleet.reader_url, "--password-file", fleet.reader_password_file, "--viewer-file", viewerFile, "--ui-dir", UI_DIST]);
  await shipped;
  await waitForEnd(JOB);
  insertCraftedJob();
});

test.afterAll(async () => {
  await server?.stop();
  if (pg && pg.exitCode === null) {
    const exited = new Promise((r) => pg!.once("exit", r));
    pg.stdin?.end(); // postgres_server.py stops its server when stdin closes
    const kill = setTimeout(() => pg?.kill("SIGKILL"), 40_000);
    await exited;
    clearTimeout(kill);
  }
});

test("the fleet page lists the shipped job, its sites and its rank-divergence", async ({ page }) => {
  expect(fs.readFileSync(viewerFile, "utf8").trim()).toBe(server!.url);
  const watch = await watchPage(page);
  await page.goto(server!.url);
  // Fleet mode: the fleet page instead of the runs, and only the fleet's tabs.
  await expect(page.locator("body[data-view=fleet]")).toBeVisible();
  await expect(page.locator("#tabs")).toHaveText(/Fleet/);
  await expect(page.locator("#tabs")).not.toHaveText(/Runs/);

  const row = page.locator(`.fleet-jobs-table tr[data-job="${JOB}"]`);
  await expect(row.locator("td.state")).toHaveText("ended");
  await expect(row.locator("td.ranks")).toContainText("0, 1");
  await expect(row.locator("td.nodes")).not.toBeEmpty();

  const sites = page.locator("table.fleet-sites tbody tr[data-site*='rank_divergence.py']");
  await expect(sites.first()).toBeVisible();
  expect(await sites.count()).toBeGreaterThan(1);
  await expect(page.locator(`table.fleet-sites tbody tr[data-site$="rank_divergence.py:${HEAD_LINE}"]`).first()).toBeVisible();

  // Findings by kind: rank-divergence counted, then shown alone with both sides.
  const chip = page.locator('.kind-chip[data-kind="rank-divergence"]');
  await expect(chip).toBeVisible();
  await chip.click();
  await expect(page).toHaveURL(/kind=rank-divergence/);
  const divergent = page.locator(`.fleet-finding[data-kind="rank-divergence"][data-job="${JOB}"]`);
  await expect(divergent.first()).toBeVisible();
  await expect(page.locator(".fleet-finding:not([data-kind='rank-divergence'])")).toHaveCount(0);
  await expect(divergent.first().locator(".finding-where")).toHaveText(new RegExp(`rank_divergence\\.py:${HEAD_LINE}$`));
  await expect(divergent.first().locator(".finding-ranks")).toHaveText(/ranks \[0, 1\]/);
  // One finding per argument of the head's linear: weight and bias, then its input (bfloat16 from the body).
  await expect(divergent.locator("li.side", { hasText: "ranks [1]: float32→float16 ×3 vs ranks [0]: float32→bfloat16 ×3" })).toHaveCount(2);
  await expect(divergent.locator("li.side", { hasText: "ranks [1]: bfloat16→float16 ×3 vs ranks [0]: bfloat16→bfloat16 ×3" })).toHaveCount(1);

  // The job's page: its ranks (node, rank, decisions, finished) and findings.
  await page.locator(`.fleet-jobs-table tr[data-job="${JOB}"] td.job a`).click();
  await expect(page).toHaveURL(new RegExp(`#/fleet/job/${JOB}$`));
  await expect(page.locator("body[data-view=fleet-job]")).toBeVisible();
  for (const rank of [0, 1]) {
    const r = page.locator(`.fleet-ranks-table tr[data-rank="${rank}"]`);
    await expect(r.locator("td.state")).toHaveText("finished");
    await expect(r.locator("td.node")).not.toBeEmpty();
    expect(Number((await r.locator("td.num").nth(4).textContent())?.replace(/,/g, ""))).toBeGreaterThan(0);
    // The embedded collector serves no viewer to link to.
    await expect(r.locator("td.viewer a")).toHaveCount(0);
  }
  await expect(page.locator(`.fleet-finding[data-kind="rank-divergence"]`).first()).toBeVisible();
  await expect(page.locator("table.fleet-sites tbody tr").first()).toBeVisible();

  // A run's route has no meaning here: back to the fleet.
  await page.goto(`${server!.origin}/#/runs`);
  await expect(page.locator("body[data-view=fleet]")).toBeVisible();
  await expect(page).toHaveURL(/#\/fleet$/);
  await watch.check();
});

test("markup in job, node, finding and site strings is text, and only http(s) viewers are links", async ({ page }) => {
  const watch = await watchPage(page);
  const dialogs: string[] = [];
  page.on("dialog", (d) => {
    dialogs.push(d.message());
    void d.dismiss();
  });
  await page.goto(server!.url);
  const row = page.locator(".fleet-jobs-table tbody tr").filter({ hasText: XSS_JOB });
  await expect(row.locator("td.job")).toHaveText(XSS_JOB);
  await expect(row.locator("td.nodes")).toContainText(XSS_NODE);
  // Its one http viewer is a link, the javascript: and data: ones are not.
  await expect(row.locator("td.nodes a")).toHaveCount(1);
  await expect(row.locator("td.nodes a")).toHaveAttribute("href", "http://node-b.example:8080/");
  await expect(page.locator(".fleet-finding").filter({ hasText: XSS_SUMMARY }).locator(".finding-where")).toHaveText(`${XSS_FILE}:7`);
  await expect(page.locator(".kind-chip").filter({ hasText: XSS_KIND })).toHaveCount(1);
  await expect(page.locator("table.fleet-sites tbody tr").first().locator("td.site")).toHaveText(`${XSS_FILE}:7`);
  await expect(page.locator("table.fleet-sites tbody tr").first()).toContainText(`arg<script>window.__xss='arg'</script>`);
  await noScriptRan(page, dialogs);

  await row.locator("td.job a").click();
  await expect(page.locator("h1 code.job-name")).toHaveText(XSS_JOB);
  await expect(page.locator("#run-title")).toHaveText(`job ${XSS_JOB}`);
  await expect(page.locator(".fleet-ranks-table td.node").first()).toHaveText(XSS_NODE);
  const links = page.locator(".fleet-ranks-table td.viewer a");
  await expect(links).toHaveCount(1);
  await expect(links).toHaveAttribute("href", "http://node-b.example:8080/");
  await expect(links).toHaveAttribute("rel", "noopener noreferrer");
  await expect(page.locator(".fleet-ranks-table tr[data-rank='1'] td.viewer a")).toHaveCount(1);
  expect(await page.locator('a[href^="javascript:"], a[href^="data:"]').count()).toBe(0);
  await expect(page.locator(".fleet-finding").filter({ hasText: XSS_SUMMARY })).toBeVisible();
  await noScriptRan(page, dialogs);
  await watch.check();
});

test("the jobs refresh while one runs, and it shows ended once its agents finish", async ({ page }) => {
  const watch = await watchPage(page);
  insertRunningJob(false);
  await page.goto(server!.url);
  const row = page.locator(`.fleet-jobs-table tr[data-job="${RUNNING_JOB}"]`);
  await expect(row.locator("td.state")).toHaveText("running");
  await expect(page.locator(".fleet-status")).toContainText("1 running");
  insertRunningJob(true);
  // No reload: the page's own 2 s poll picks it up.
  await expect(row.locator("td.state")).toHaveText("ended", { timeout: 10_000 });
  await expect(page.locator(".fleet-status")).toHaveText("");
  await watch.check();
});
