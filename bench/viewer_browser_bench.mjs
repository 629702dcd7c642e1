// The viewer in a real headless browser (Debian's chromium through
// Playwright), against the real collector:
//
//   scale  a store filled through the collector's gRPC ingest with a
//          training-like run of --events events (castscope_ingest_bench fill:
//          2 ranks, forward and backward threads, ops microseconds apart, casts
//          on ops, a GPU kernel per op and cast), opened with
//          `castscope-collector view`; first timeline paint after navigation,
//          then --steps pan/zoom steps with the mouse wheel and the keyboard:
//          the collector's answer time per /api/timeline request (the
//          browser's resource timing) and per step (all lanes answered), and
//          the paint time.
//   live   `castscope-collector serve`, a real job under `castscope run
//          --collector` (bench/jobs/paced_mm.py at --rate events/s, so agent,
//          exporter, forwarder and collector are all in the number), a page
//          following the run: per cast pushed and painted, paintedAt minus
//          the time the cast happened (its CLOCK_MONOTONIC ts, converted to
//          wall-clock time; see clockOffsetNs()).
//   ingest castscope_ingest_bench fill --prebuild (the training-like run,
//          batches built before the clock starts) into a fresh store with no
//          page, then with two pages following its run live (alternated): the
//          pages opened at #/live before the fill starts (they open the run's
//          timeline when it goes live), as two pages already open are; with
//          --open-during-run, opened at the run's timeline once it has casts,
//          their opening (new renderers, scripts) inside the measured run. The
//          ingest rate's ratio (bench/viewer_bench.py does the same with the
//          synthetic throughput client and two SSE readers in Python), and
//          the browser's CPU seconds per second while both pages follow (its
//          processes, from both pages' first paint to the run's end).
//
//   node bench/viewer_browser_bench.mjs [--events 10000000] [--steps 60] [--opens 3]
//        [--live-seconds 20] [--rate 30000] [--ingest-events 6000000] [--ingest-repeats 3]
//        [--skip-scale] [--skip-live] [--skip-ingest] [--keep DIR] [--db STORE]
//        [--ingest-store-dir DIR] [--ui-dist DIR] [--collector BINARY] [--window-webui] [--tabs]
//        [--open-during-run]
//
// --keep DIR keeps the stores and logs in DIR; --db STORE opens the run "train"
// of an earlier fill instead of filling a new store. --ingest-store-dir puts
// the ingest stores there (/dev/shm: this VM's disk throttles writes, and its
// spread from run to run hides the browser's share); --ui-dist serves another
// build of the page and --collector runs another build's collector (old and
// new in one sitting). --window-webui keeps Chromium's per-window omnibox WebUI
// (see WINDOW_WEBUI_FEATURES), which runs before 2026-11-27 included. --tabs
// opens the ingest's two pages as tabs of one browser context (one window, as
// a person opens a second tab) instead of a context each (a window each). Not
// the same load: the first tab goes to the background when the second opens
// and paints about a third as often (its "paints" in the output), so the
// default, a context each, is what "two pages following" measures.
//
// Needs build/ (castscope-collector, castscope_ingest_bench), .venv (castscope
// run, torch) and ui/dist (cd ui && npm run build). Not run by scripts/test.sh.

import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import { createRequire } from "node:module";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";

const REPO = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(path.join(REPO, "ui", "package.json"));
const { chromium } = require("playwright-core");

let COLLECTOR = path.join(REPO, "build", "server", "castscope-collector"); // --collector: another build's, for old/new
const INGEST_BENCH = path.join(REPO, "build", "bench", "castscope_ingest_bench");
const CASTSCOPE = path.join(REPO, ".venv", "bin", "castscope");
const PYTHON = path.join(REPO, ".venv", "bin", "python");
let UI_DIST = path.join(REPO, "ui", "dist"); // --ui-dist: another build of the page, for old/new
const CHROMIUM = process.env.CASTSCOPE_CHROMIUM || "/usr/bin/chromium";
const CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-dev-shm-usage"];
const VIEWPORT = { width: 1440, height: 900 };

const STEADY_FROM = 0.4; // ingest: the steady rate is measured from this share of the run's events stored
const TARGETS = { firstPaintMs: 1000, answerP95Ms: 100, paintMs: 50, liveP99Ms: 250 };

function parseArgs(argv) {
  const args = { events: 10_000_000, steps: 60, opens: 3, liveSeconds: 20, rate: 30_000, skipScale: false, skipLive: false, skipIngest: false, ingestEvents: 6_000_000, ingestRepeats: 3, ingestStoreDir: null, keep: null, db: null };
  for (let i = 2; i < argv.length; i++) {
    const a = argv[i];
    const value = () => argv[++i];
    if (a === "--events") args.events = Number(value());
    else if (a === "--steps") args.steps = Number(value());
    else if (a === "--opens") args.opens = Number(value());
    else if (a === "--live-seconds") args.liveSeconds = Number(value());
    else if (a === "--rate") args.rate = Number(value());
    else if (a === "--skip-scale") args.skipScale = true;
    else if (a === "--skip-live") args.skipLive = true;
    else if (a === "--skip-ingest") args.skipIngest = true;
    else if (a === "--ingest-events") args.ingestEvents = Number(value());
    else if (a === "--ingest-repeats") args.ingestRepeats = Number(value());
    else if (a === "--ingest-store-dir") args.ingestStoreDir = value();
    else if (a === "--ui-dist") UI_DIST = path.resolve(value());
    else if (a === "--collector") COLLECTOR = path.resolve(value());
    else if (a === "--keep") args.keep = value();
    else if (a === "--db") args.db = value();
    else if (a === "--window-webui") WINDOW_WEBUI = true;
    else if (a === "--tabs") TABS = true;
    else if (a === "--open-during-run") OPEN_DURING_RUN = true;
    else throw new Error(`unknown argument ${a}`);
  }
  return args;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

function percentile(values, p) {
  if (!values.length) return NaN;
  const v = [...values].sort((a, b) => a - b);
  return v[Math.min(v.length - 1, Math.round((p / 100) * (v.length - 1)))];
}

const f1 = (x) => (Number.isFinite(x) ? x.toFixed(1) : "n/a");
const summary = (values) => `p50 ${f1(percentile(values, 50))} ms, p95 ${f1(percentile(values, 95))} ms, max ${f1(Math.max(...values))} ms (n=${values.length})`;

/** A castscope-collector process (serve or view) and its viewer URL. */
async function startCollector(subcommand, db, dir) {
  const url = path.join(dir, `${subcommand}.url`);
  const ready = path.join(dir, `${subcommand}.addr`);
  fs.rmSync(url, { force: true });
  fs.rmSync(ready, { force: true });
  const args = [subcommand, "--db", db, "--ui-dir", UI_DIST, "--http-listen", "127.0.0.1:0", "--viewer-file", url];
  if (subcommand === "serve") args.push("--listen", "127.0.0.1:0", "--ready-file", ready);
  const log = fs.openSync(path.join(dir, `${subcommand}.log`), "a");
  const proc = spawn(COLLECTOR, args, { stdio: ["ignore", log, log] });
  const deadline = Date.now() + 60_000;
  while (!fs.existsSync(url) || (subcommand === "serve" && !fs.existsSync(ready))) {
    if (proc.exitCode !== null) throw new Error(`castscope-collector ${subcommand} exited (${proc.exitCode}); see ${dir}`);
    if (Date.now() > deadline) throw new Error(`castscope-collector ${subcommand}: not ready after 60 s`);
    await sleep(20);
  }
  await sleep(50); // the URL file is written whole before the ready file; give view the same margin
  const printed = new URL(fs.readFileSync(url, "utf8").trim());
  const token = printed.searchParams.get("token");
  return {
    proc,
    origin: printed.origin,
    token,
    url: printed.href,
    address: subcommand === "serve" ? fs.readFileSync(ready, "utf8").trim() : null,
    async get(route) {
      const res = await fetch(`${printed.origin}${route}`, { headers: { Authorization: `Bearer ${token}` } });
      if (!res.ok) throw new Error(`GET ${route}: ${res.status} ${await res.text()}`);
      return res.json();
    },
    /** A counter of /metrics (Prometheus text), e.g. castscope_events_ingested_total. */
    async metric(name) {
      const res = await fetch(`${printed.origin}/metrics`, { headers: { Authorization: `Bearer ${token}` } });
      if (!res.ok) throw new Error(`GET /metrics: ${res.status}`);
      const line = (await res.text()).split("\n").find((l) => l.startsWith(`${name} `));
      return Number(line?.split(" ")[1]);
    },
    async stop() {
      if (proc.exitCode !== null) return;
      const exited = new Promise((r) => proc.once("exit", r));
      proc.kill("SIGTERM");
      await Promise.race([exited, sleep(120_000)]);
    },
  };
}

// Chromium 156 loads the omnibox popup's WebUI (chrome://omnibox-popup.top-chrome,
// Lit and a dozen modules) in a renderer of its own for every new window, and
// each Playwright context is a new window: ~0.9 CPU s per page opened here and
// a later first paint, none of it the viewer's (docs/performance.md, "What
// opening a page costs"), and a person opening the viewer in a tab pays it
// once per window, not per page. Off unless --window-webui.
const WINDOW_WEBUI_FEATURES = ["WebUIOmniboxPopup", "WebUIOmniboxFullPopup", "WebUIOmniboxAimPopup", "PreloadTopChromeWebUI"];
let WINDOW_WEBUI = false;
let TABS = false; // --tabs: the ingest's pages in one context
let OPEN_DURING_RUN = false; // --open-during-run: the ingest's pages opened once its run has casts, not before

/** The --disable-features argument of the browser process Playwright started below us, or null. */
function browserDisableFeaturesArg() {
  for (const pid of browserCpuByPid().keys()) {
    let argv;
    try {
      argv = fs.readFileSync(`/proc/${pid}/cmdline`, "utf8").split("\0");
    } catch {
      continue; // gone meanwhile
    }
    if (argv.some((a) => a.startsWith("--type="))) continue; // a child process, not the browser
    const found = argv.filter((a) => a.startsWith("--disable-features="));
    if (found.length) return found;
  }
  return null;
}

async function launch() {
  const options = { executablePath: CHROMIUM, headless: true, args: CHROMIUM_ARGS };
  if (WINDOW_WEBUI) return chromium.launch(options);
  // Chromium takes the last --disable-features only, so Playwright's own list
  // (read from a first launch) is given again with the window's WebUI added.
  const probe = await chromium.launch(options);
  const defaults = browserDisableFeaturesArg();
  await probe.close();
  if (!defaults || defaults.length !== 1) throw new Error(`Playwright's --disable-features not found once: ${defaults}`);
  const features = [...defaults[0].slice("--disable-features=".length).split(","), ...WINDOW_WEBUI_FEATURES];
  const browser = await chromium.launch({ ...options, ignoreDefaultArgs: defaults, args: [...CHROMIUM_ARGS, `--disable-features=${features.join(",")}`] });
  const now = browserDisableFeaturesArg();
  if (now?.length !== 1 || now[0] !== `--disable-features=${features.join(",")}`) throw new Error(`chromium started with ${now}, not the merged --disable-features`);
  return browser;
}

/** Page-side helpers: input times, resource timing kept, a settle wait. */
function benchInit() {
  const w = window;
  w.__bench = { lastInput: 0 };
  for (const type of ["wheel", "keydown"]) window.addEventListener(type, () => (w.__bench.lastInput = performance.now()), { capture: true });
  performance.setResourceTimingBufferSize(100000);
}

/** Waits (in the page) until no timeline request is in flight and a paint followed the last answer. */
async function settle(page) {
  return page.evaluate(async () => {
    const s = window.__castscopeStats;
    const cs = window.__castscope;
    const deadline = performance.now() + 20_000;
    for (;;) {
      await new Promise((r) => requestAnimationFrame(() => r()));
      await new Promise((r) => setTimeout(r, 0));
      const last = s.fetchLog[s.fetchLog.length - 1];
      const paint = s.paintLog[s.paintLog.length - 1];
      const answered = !last || last.aborted || (last.doneAt !== null && paint && paint.at >= last.doneAt);
      if (cs && !cs.loading() && answered && paint && paint.at >= window.__bench.lastInput) return true;
      if (performance.now() > deadline) return false;
    }
  });
}

// ---------------------------------------------------------------- scale

async function benchScale(args, dir) {
  const db = args.db ?? path.join(dir, "scale.db");
  if (!args.db) {
    console.log(`scale: filling ${db} with ~${(args.events / 1e6).toFixed(1)} M events through the collector's ingest`);
    const serve = await startCollector("serve", db, dir);
    let fillLine;
    try {
      fillLine = execFileSync(INGEST_BENCH, ["--collector", serve.address, "fill", "--events", String(args.events), "--agents", "2", "--run", "train"], { encoding: "utf8", timeout: 3_600_000 }).trim();
    } finally {
      await serve.stop();
    }
    console.log(`  ${fillLine}`);
  } else {
    console.log(`scale: ${db} (a store of an earlier fill, run "train")`);
  }
  console.log(`  store: ${(fs.statSync(db).size / 2 ** 30).toFixed(2)} GiB`);

  const view = await startCollector("view", db, dir);
  const browser = await launch();
  const results = { opens: [], steps: [] };
  try {
    const { runs } = await view.get("/api/runs");
    const run = runs.find((r) => r.run_id === "train");
    const stored = run.agents.reduce((n, a) => n + a.events_stored, 0);
    const tracks = await view.get(`/api/tracks?run=train`);
    const lanes = tracks.processes.reduce((n, p) => n + p.tracks.length, 0);
    console.log(`  run train: ${(stored / 1e6).toFixed(2)} M events stored, ${(tracks.t_max / 1e9).toFixed(1)} s long, ${lanes} lanes`);
    const pageUrl = `${view.url}#/run/train/timeline`;

    // First paint: a new browser context (no cache, no cookie) per open; the
    // first open is the collector's first request for this run.
    for (let i = 0; i < args.opens; i++) {
      const context = await browser.newContext({ viewport: VIEWPORT });
      const page = await context.newPage();
      await page.addInitScript(benchInit);
      await page.goto(pageUrl);
      await page.waitForFunction(() => window.__castscopeStats && window.__castscopeStats.firstFullPaintAt !== null, null, { timeout: 60_000 });
      const r = await page.evaluate(() => {
        const s = window.__castscopeStats;
        const res = performance.getEntriesByType("resource").filter((e) => e.name.includes("/api/"));
        const nav = performance.getEntriesByType("navigation")[0];
        const route = (name) => res.filter((e) => e.name.includes(name)).map((e) => e.responseEnd - e.startTime);
        return {
          firstPaint: s.firstPaintAt,
          firstFullPaint: s.firstFullPaintAt,
          domContentLoaded: nav ? nav.domContentLoadedEventEnd : null,
          runs: route("/api/runs"),
          tracks: route("/api/tracks"),
          timeline: route("/api/timeline"),
          firstPaintMs: s.paintLog.find((p) => p.lanesWithData === p.lanes)?.ms ?? null,
        };
      });
      results.opens.push(r);
      console.log(`  open ${i + 1}: first paint ${f1(r.firstPaint)} ms, every lane painted ${f1(r.firstFullPaint)} ms after navigation start ` +
        `(page loaded ${f1(r.domContentLoaded)} ms; /api/runs ${r.runs.map(f1).join("/")} ms, /api/tracks ${r.tracks.map(f1).join("/")} ms, ` +
        `/api/timeline ×${r.timeline.length} max ${f1(Math.max(...r.timeline))} ms; that paint took ${f1(r.firstPaintMs)} ms)`);
      if (i < args.opens - 1) await context.close();
      else results.page = page;
    }

    // Pan/zoom: wheel zooms around random points down to single events, key
    // and wheel pans, zooms back out, in a fixed pseudo-random order.
    const page = results.page;
    const canvas = page.locator("canvas.tl-lanes");
    await canvas.focus();
    const box = await canvas.boundingBox();
    let seed = 12345;
    const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
    const plan = [];
    while (plan.length < args.steps) {
      for (let i = 0; i < 14; i++) plan.push({ kind: "wheel-in", x: box.x + 200 + rnd() * (box.width - 220) });
      for (let i = 0; i < 4; i++) plan.push({ kind: rnd() < 0.5 ? "key-right" : "key-left" });
      for (let i = 0; i < 2; i++) plan.push({ kind: "wheel-pan", dx: (rnd() < 0.5 ? -1 : 1) * 400 });
      for (let i = 0; i < 7; i++) plan.push({ kind: "wheel-out", x: box.x + 200 + rnd() * (box.width - 220) });
      for (let i = 0; i < 5; i++) plan.push({ kind: "key-out" });
      plan.push({ kind: "key-fit" });
    }
    plan.length = args.steps;
    for (const step of plan) {
      const before = await page.evaluate(() => {
        performance.clearResourceTimings();
        return { fetches: window.__castscopeStats.fetchLog.length, paints: window.__castscopeStats.paintLog.length };
      });
      if (step.kind.startsWith("wheel")) {
        await page.mouse.move(step.kind === "wheel-pan" ? box.x + box.width / 2 : step.x, box.y + 40);
        if (step.kind === "wheel-in") await page.mouse.wheel(0, -400);
        else if (step.kind === "wheel-out") await page.mouse.wheel(0, 600);
        else await page.mouse.wheel(step.dx, 0);
      } else {
        await page.keyboard.press({ "key-right": "ArrowRight", "key-left": "ArrowLeft", "key-out": "-", "key-fit": "0" }[step.kind]);
      }
      const settled = await settle(page);
      const r = await page.evaluate((b) => {
        const s = window.__castscopeStats;
        const input = window.__bench.lastInput;
        const fetches = s.fetchLog.slice(b.fetches).filter((f) => f.startedAt >= input - 1);
        const paints = s.paintLog.slice(b.paints).filter((p) => p.at >= input);
        const done = fetches.filter((f) => !f.aborted && f.doneAt !== null);
        const lastDone = done.length ? Math.max(...done.map((f) => f.doneAt)) : null;
        const requests = performance.getEntriesByType("resource").filter((e) => e.name.includes("/api/timeline"));
        const range = window.__castscope.getRange();
        const afterData = lastDone === null ? paints : paints.filter((p) => p.at >= lastDone);
        return {
          fetched: done.length > 0,
          aborted: fetches.filter((f) => f.aborted).length,
          kinds: [...new Set(done.flatMap((f) => f.kinds))],
          // per request: issued to answered, as the browser saw it (queueing included)
          requestMs: requests.map((e) => e.responseEnd - e.startTime),
          // per request: request sent to first byte (the collector's own time plus loopback)
          ttfbMs: requests.map((e) => e.responseStart - e.requestStart),
          bytes: requests.map((e) => e.decodedBodySize),
          wireBytes: requests.map((e) => e.encodedBodySize),
          // all lanes: from the step's requests to the last lane's JSON parsed
          stepAnswerMs: done.length ? Math.max(...done.map((f) => f.doneAt - f.startedAt)) : null,
          paintMs: afterData.length ? afterData[0].ms : null,
          maxPaintMs: paints.length ? Math.max(...paints.map((p) => p.ms)) : null,
          dataToPaintMs: lastDone !== null && afterData.length ? afterData[0].at - lastDone : null,
          inputToPaintMs: paints.length ? paints[paints.length - 1].at - input : null,
          span: range.t1 - range.t0,
        };
      }, before);
      r.kind = step.kind;
      r.settled = settled;
      results.steps.push(r);
    }
    const steps = results.steps;
    const fetched = steps.filter((s) => s.fetched);
    const requestMs = fetched.flatMap((s) => s.requestMs);
    const ttfbMs = fetched.flatMap((s) => s.ttfbMs);
    const stepAnswer = fetched.map((s) => s.stepAnswerMs);
    const paintMs = steps.filter((s) => s.maxPaintMs !== null).map((s) => s.maxPaintMs);
    const dataToPaint = fetched.filter((s) => s.dataToPaintMs !== null).map((s) => s.dataToPaintMs);
    const inputToPaint = steps.filter((s) => s.inputToPaintMs !== null).map((s) => s.inputToPaintMs);
    const kinds = new Set(fetched.flatMap((s) => s.kinds));
    const spans = steps.map((s) => s.span);
    console.log(`  pan/zoom: ${steps.length} steps (${steps.filter((s) => !s.settled).length} did not settle in 20 s), ` +
      `spans ${(Math.min(...spans) / 1e6).toFixed(3)} ms to ${(Math.max(...spans) / 1e9).toFixed(1)} s; ` +
      `${fetched.length} asked the collector (${[...kinds].join(" and ")}), ${steps.length - fetched.length} painted from data at hand, ` +
      `${steps.reduce((n, s) => n + s.aborted, 0)} requests aborted by a newer one`);
    console.log(`    /api/timeline per request, issued to answered: ${summary(requestMs)}; p95/target ${(percentile(requestMs, 95) / TARGETS.answerP95Ms).toFixed(2)}`);
    console.log(`    /api/timeline per request, sent to first byte: ${summary(ttfbMs)}`);
    console.log(`    per step, all lanes answered and parsed:       ${summary(stepAnswer)}; p95/target ${(percentile(stepAnswer, 95) / TARGETS.answerP95Ms).toFixed(2)}`);
    for (const kind of ["buckets", "events"]) {
      const of = fetched.filter((s) => (kind === "events" ? s.kinds.includes("events") : !s.kinds.includes("events")));
      if (!of.length) continue;
      const mb = (v) => (v / 2 ** 20).toFixed(2);
      const bytes = of.flatMap((s) => s.bytes), wire = of.flatMap((s) => s.wireBytes);
      console.log(`      steps with ${kind === "events" ? "some lanes in single events" : "buckets only"} (${of.length}): per request ${summary(of.flatMap((s) => s.requestMs))}; ` +
        `per step p50 ${f1(percentile(of.map((s) => s.stepAnswerMs), 50))} ms, p95 ${f1(percentile(of.map((s) => s.stepAnswerMs), 95))} ms; ` +
        `JSON per request p50 ${mb(percentile(bytes, 50))} MiB, max ${mb(Math.max(...bytes))} MiB (gzip on the wire p50 ${mb(percentile(wire, 50))} MiB)`);
    }
    console.log(`    paint (canvas drawing), per step, slowest:     ${summary(paintMs)}; p95/target ${(percentile(paintMs, 95) / TARGETS.paintMs).toFixed(2)}`);
    console.log(`    answer parsed to painted:                      ${summary(dataToPaint)}`);
    console.log(`    input to last paint:                           ${summary(inputToPaint)}`);
    const first = results.opens.map((o) => o.firstFullPaint);
    console.log(`  first paint of every lane after navigation: ${first.map(f1).join(", ")} ms; worst/target ${(Math.max(...first) / TARGETS.firstPaintMs).toFixed(2)}`);
  } finally {
    await browser.close();
    await view.stop();
  }
  return results;
}

// ---------------------------------------------------------------- live

/** CLOCK_REALTIME - CLOCK_MONOTONIC in ns, from the closest of many back-to-back reads. */
function clockOffsetNs() {
  const out = execFileSync("python3", ["-c", `
import time
best = None
for _ in range(2000):
    a = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    r = time.clock_gettime_ns(time.CLOCK_REALTIME)
    b = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    if best is None or b - a < best[0]:
        best = (b - a, r - (a + b) // 2)
print(best[1], best[0])
`], { encoding: "utf8" }).trim().split(/\s+/);
  return { offset: BigInt(out[0]), uncertainty: Number(out[1]) };
}

async function benchLive(args, dir) {
  const db = path.join(dir, "live.db");
  const serve = await startCollector("serve", db, dir);
  const browser = await launch();
  const runId = `live-${Date.now()}`;
  const jobSeconds = args.liveSeconds + 15;
  let job;
  try {
    console.log(`live: bench/jobs/paced_mm.py at ${args.rate} events/s for ${jobSeconds} s under castscope run --collector ${serve.address}`);
    const jobLog = fs.openSync(path.join(dir, "job.log"), "a");
    job = spawn(CASTSCOPE, ["run", "--collector", serve.address, "--run-id", runId, "--no-jsonl", "--out", path.join(dir, "job"), "--",
      PYTHON, path.join(REPO, "bench", "jobs", "paced_mm.py"), String(jobSeconds), String(args.rate)], { cwd: REPO, stdio: ["ignore", jobLog, jobLog] });
    const deadline = Date.now() + 120_000;
    for (;;) {
      const { runs } = await serve.get("/api/runs");
      const run = runs.find((r) => r.run_id === runId);
      if (run && run.agents.some((a) => a.casts > 0)) break;
      if (job.exitCode !== null) throw new Error(`the job exited (${job.exitCode}) before its run had casts; see ${dir}/job.log`);
      if (Date.now() > deadline) throw new Error("no casts from the job after 120 s");
      await sleep(200);
    }
    const context = await browser.newContext({ viewport: VIEWPORT });
    const page = await context.newPage();
    await page.goto(`${serve.url}#/run/${encodeURIComponent(runId)}/timeline`);
    await page.waitForFunction(() => window.__castscopeStats && window.__castscopeStats.livePaints.length > 0, null, { timeout: 30_000 });
    const warmup = Date.now() + 2000;
    // The page keeps its newest 5000 live paints: read them every second.
    const painted = new Map();
    const end = Date.now() + args.liveSeconds * 1000;
    while (Date.now() < end) {
      await sleep(1000);
      for (const p of await page.evaluate(() => window.__castscopeStats.livePaints)) painted.set(`${p.agent_id}:${p.seq}`, p);
    }
    const { offset, uncertainty } = clockOffsetNs();
    const page_ = await page.evaluate(() => {
      const s = window.__castscopeStats;
      // paintedAt is performance.timeOrigin + performance.now(); how far that is from Date.now():
      const skews = [];
      for (let i = 0; i < 200; i++) skews.push(performance.timeOrigin + performance.now() - Date.now());
      skews.sort((a, b) => a - b);
      return { livePaints: s.livePaints, originNs: s.originNs, skew: skews[100], liveBatches: s.liveBatches, liveCasts: s.liveCasts, skipped: s.skipped, liveOpens: s.liveOpens, fetches: s.fetches, paints: s.paints, maxPaintMs: s.maxPaintMs };
    });
    const { runs } = await serve.get("/api/runs");
    const run = runs.find((r) => r.run_id === runId);
    const origin = BigInt(page_.originNs);
    const latencies = [];
    for (const p of [...painted.values(), ...page_.livePaints]) {
      if (painted.has(`${p.agent_id}:${p.seq}`) && painted.get(`${p.agent_id}:${p.seq}`) !== p) continue;
      if (p.paintedAt < warmup) continue;
      // ts: ns since the run's origin, a CLOCK_MONOTONIC time; to wall-clock ms.
      const happenedMs = Number(origin + BigInt(Math.round(p.ts)) + offset) / 1e6;
      latencies.push(p.paintedAt - page_.skew - happenedMs);
    }
    console.log(`  page: ${page_.liveBatches} live messages, ${page_.liveCasts} casts pushed, ${page_.skipped} events skipped, ${page_.liveOpens} stream opens, ` +
      `${page_.fetches} refetches, ${page_.paints} paints (slowest ${f1(page_.maxPaintMs)} ms); run so far: ${run.agents.reduce((n, a) => n + a.casts, 0)} casts, ` +
      `${run.agents.reduce((n, a) => n + a.ops, 0)} ops`);
    console.log(`  clocks: CLOCK_REALTIME - CLOCK_MONOTONIC read within ${uncertainty} ns; the page's timeOrigin + now() is ${f1(page_.skew)} ms from Date.now()`);
    console.log(`  cast happened -> painted in the page (${latencies.length} casts after a 2 s warm-up): ${summary(latencies)}, ` +
      `p99 ${f1(percentile(latencies, 99))} ms; p99/target ${(percentile(latencies, 99) / TARGETS.liveP99Ms).toFixed(2)}`);
    await context.close();
    return { latencies };
  } finally {
    await browser.close();
    if (job && job.exitCode === null) {
      const exited = new Promise((r) => job.once("exit", r));
      job.kill("SIGINT");
      await Promise.race([exited, sleep(60_000)]);
    }
    await serve.stop();
  }
}

// ---------------------------------------------------------------- ingest

/**
 * A /proc stat file read: its name (comm), the fields after it (fields[0] is
 * the state, fields[1] the parent) and CPU seconds (user + system, USER_HZ
 * 100); null once the process or thread is gone.
 */
function readStat(file) {
  try {
    const stat = fs.readFileSync(file, "utf8");
    const fields = stat.slice(stat.lastIndexOf(")") + 2).split(" ");
    return { name: stat.slice(stat.indexOf("(") + 1, stat.lastIndexOf(")")), fields, seconds: (Number(fields[11]) + Number(fields[12])) / 100,
      reapedSeconds: (Number(fields[13]) + Number(fields[14])) / 100 };
  } catch {
    return null;
  }
}

/**
 * CPU seconds of each process below this one: pid -> seconds; `withReaped`
 * adds those of its children that exited and were waited for (the renderer of
 * a closed or replaced page).
 */
function browserCpuByPid(withReaped = false) {
  const parent = new Map();
  const seconds = new Map();
  for (const pid of fs.readdirSync("/proc")) {
    if (!/^\d+$/.test(pid)) continue;
    const stat = readStat(`/proc/${pid}/stat`);
    if (!stat) continue; // gone meanwhile
    parent.set(Number(pid), Number(stat.fields[1]));
    seconds.set(Number(pid), stat.seconds + (withReaped ? stat.reapedSeconds : 0));
  }
  const below = (pid) => {
    for (let p = parent.get(pid); p !== undefined && p > 1; p = parent.get(p)) if (p === process.pid) return true;
    return false;
  };
  // The browser is ours (launched by Playwright), so every process below us
  // but the collector and the ingest bench: those are excluded by the caller.
  return new Map([...seconds].filter(([pid]) => below(pid)));
}

/** The machine's busy CPU seconds so far (all but idle and iowait). */
function machineBusyCpu() {
  const f = fs.readFileSync("/proc/stat", "utf8").split("\n")[0].trim().split(/\s+/).slice(1).map(Number);
  const all = f.slice(0, 8).reduce((a, b) => a + b, 0);
  return (all - f[3] - f[4]) / 100;
}

/** CPU seconds (user + system) of process `pid`, its ended threads included; null once it has exited. */
function processCpu(pid) {
  return readStat(`/proc/${pid}/stat`)?.seconds ?? null;
}

/** CPU seconds (user + system) of each thread of `pid`, summed by thread name: name -> seconds. */
function threadCpuByName(pid) {
  const seconds = new Map();
  let tids = [];
  try {
    tids = fs.readdirSync(`/proc/${pid}/task`);
  } catch {
    return seconds; // exited
  }
  for (const tid of tids) {
    const stat = readStat(`/proc/${pid}/task/${tid}/stat`);
    if (stat) seconds.set(stat.name, (seconds.get(stat.name) ?? 0) + stat.seconds); // else gone meanwhile
  }
  return seconds;
}

/**
 * CPU seconds of the threads of every process in `pids` (a browserCpuByPid()
 * map) but those in `notBrowser`, summed by "process type/thread name".
 */
function browserThreadCpu(pids, notBrowser) {
  const seconds = new Map();
  for (const pid of pids.keys()) {
    if (notBrowser.has(pid)) continue;
    let type = "browser";
    try {
      type = /--type=([a-z-]+)/.exec(fs.readFileSync(`/proc/${pid}/cmdline`, "utf8"))?.[1] ?? "browser";
    } catch {
      continue;
    }
    for (const [name, s] of threadCpuByName(pid)) seconds.set(`${type}/${name}`, (seconds.get(`${type}/${name}`) ?? 0) + s);
  }
  return seconds;
}

/** CPU per name between two samples (threadCpuByName(), browserThreadCpu()), per second of `seconds`, largest first. */
function threadCpuBetween(before, after, seconds) {
  const rows = [];
  for (const [name, s] of after) {
    const used = (s - (before.get(name) ?? 0)) / seconds;
    if (used >= 0.005) rows.push(`${name} ${used.toFixed(2)}`);
  }
  return rows.sort((a, b) => Number(b.split(" ").pop()) - Number(a.split(" ").pop())).join(", ");
}

/** CPU seconds the browser's processes used between two browserCpuByPid() samples (those alive at both). */
function browserCpuBetween(before, after, notBrowser) {
  let sum = 0;
  for (const [pid, s] of after) if (before.has(pid) && !notBrowser.has(pid)) sum += s - before.get(pid);
  return sum;
}

/**
 * castscope_ingest_bench fill --prebuild (a 2-rank training-like run, batches
 * built before the clock starts) into a fresh collector, with `pages` real
 * pages following the run live from its first batch.
 */
async function ingestOnce(browser, dir, storeDir, keep, events, pages, index) {
  const db = path.join(storeDir, `ingest-${index}-${pages}.db`);
  const serve = await startCollector("serve", db, dir);
  const contexts = [];
  const opened = []; // the pages, in the order opened
  try {
    let cpuAtOpen = browserCpuByPid(true); // --open-during-run: taken again when the pages open
    const openPage = async (hash) => {
      if (!TABS || contexts.length === 0) contexts.push(await browser.newContext({ viewport: VIEWPORT }));
      const page = await contexts[contexts.length - 1].newPage();
      opened.push(page);
      await page.goto(`${serve.url}${hash}`);
      return page;
    };
    // Two pages already open: waiting at #/live for the run to go live.
    if (!OPEN_DURING_RUN) {
      for (let i = 0; i < pages; i++) await (await openPage("#/live")).locator(".live-wait-status", { hasText: "No runs in this store yet." }).waitFor({ timeout: 60_000 });
    }
    const out = [];
    const cpuAtFill = browserCpuByPid(true);
    const fillStart = Date.now();
    const bench = spawn(INGEST_BENCH, ["--collector", serve.address, "fill", "--prebuild", "--events", String(events), "--agents", "2", "--run", "ingest"], { stdio: ["ignore", "pipe", "inherit"] });
    bench.stdout.on("data", (b) => out.push(b.toString()));
    const exited = new Promise((r) => bench.once("exit", r));
    while (OPEN_DURING_RUN && pages > 0 && bench.exitCode === null) {
      const { runs } = await serve.get("/api/runs");
      const run = runs.find((r) => r.agents.some((a) => a.casts > 0));
      if (run) {
        cpuAtOpen = browserCpuByPid(true);
        for (let i = 0; i < pages; i++) await openPage(`#/run/${encodeURIComponent(run.run_id)}/timeline`);
        break;
      }
      await sleep(100);
    }
    // Following from both pages' first paint: the browser's CPU from there to
    // the run's end (null when the run ended first).
    for (const p of opened) await p.waitForFunction(() => window.__castscopeStats?.paints > 0, null, { timeout: 60_000 }).catch(() => {});
    const measured = pages > 0 && opened.length === pages && bench.exitCode === null;
    const notBrowser = new Set([serve.proc.pid, bench.pid]);
    const cpuFrom = browserCpuByPid();
    // The pages' switch from #/live to the run, to both painting it: the browser's CPU from the fill's start.
    let switchCpu = 0;
    for (const [pid, s] of browserCpuByPid(true)) if (!notBrowser.has(pid)) switchCpu += s - (cpuAtFill.get(pid) ?? 0);
    const switchSeconds = (Date.now() - fillStart) / 1000;
    const browserThreadsFrom = browserThreadCpu(cpuFrom, notBrowser);
    const collectorFrom = threadCpuByName(serve.proc.pid);
    const clientFrom = processCpu(bench.pid);
    const machineFrom = machineBusyCpu();
    const following = Date.now();
    // The steady part of the run: from STEADY_FROM of its events stored (and
    // the pages following) to its end, so that opening the pages (new
    // renderer processes, the first answers: a second of CPU or more) is not
    // counted against a 4-second run. The same window with no page.
    let steady = null;
    while (bench.exitCode === null) {
      const stored = await serve.metric("castscope_events_ingested_total");
      if (stored >= STEADY_FROM * events) {
        steady = { at: Date.now(), stored };
        break;
      }
      await sleep(50);
    }
    const collectorLast = { sample: collectorFrom, at: following };
    // The collector's threads are sampled until the bench exits (a thread that ends takes its count with it).
    const sampler = setInterval(() => Object.assign(collectorLast, { sample: threadCpuByName(serve.proc.pid), client: processCpu(bench.pid) ?? collectorLast.client, machine: machineBusyCpu(), at: Date.now() }), 200);
    await exited;
    const endedAt = Date.now();
    clearInterval(sampler);
    const sampled = Math.max(0.001, (collectorLast.at - following) / 1000);
    const clientCpu = ((collectorLast.client ?? clientFrom ?? 0) - (clientFrom ?? 0)) / sampled;
    const machineBusy = collectorLast.machine !== undefined ? (collectorLast.machine - machineFrom) / sampled : NaN;
    const collectorCpu = `${threadCpuBetween(collectorFrom, collectorLast.sample, sampled)}; the ingest client ${clientCpu.toFixed(2)}; the machine ${machineBusy.toFixed(2)} of ${os.cpus().length} cores busy`;
    const cpuTo = browserCpuByPid();
    // Opening included: processes started since (the pages' renderers) count from zero.
    let browserRunCpu = 0;
    for (const [pid, s] of browserCpuByPid(true)) if (!notBrowser.has(pid)) browserRunCpu += s - (cpuAtOpen.get(pid) ?? 0);
    const browserCpu = measured ? browserCpuBetween(cpuFrom, cpuTo, notBrowser) / ((Date.now() - following) / 1000) : null;
    const browserThreads = measured ? threadCpuBetween(browserThreadsFrom, browserThreadCpu(cpuTo, notBrowser), (Date.now() - following) / 1000) : "";
    const stats = [];
    for (const p of opened) stats.push(await p.evaluate(() => ({ live: window.__castscopeStats.liveBatches, fetches: window.__castscopeStats.fetches, paints: window.__castscopeStats.paints })));
    const text = out.join("");
    const rate = Number(/([0-9.]+) events\/s/.exec(text)?.[1]);
    const storedAll = Number(/ (\d+) events stored/.exec(text)?.[1]);
    const storedAtEnd = await serve.metric("castscope_events_ingested_total");
    if (storedAtEnd !== storedAll) console.log(`    (the collector counted ${storedAtEnd} events ingested, the fill ${storedAll})`);
    const steadyRate = steady ? (storedAll - steady.stored) / ((endedAt - steady.at) / 1000) : NaN;
    return { rate, steadyRate, stats, browserCpu, browserRunCpu, collectorCpu, browserThreads, switchCpu: measured && !OPEN_DURING_RUN ? { cpu: switchCpu, seconds: switchSeconds } : null };
  } finally {
    for (const c of contexts) await c.close();
    await serve.stop();
    // Each store is ~50 bytes an event: on /dev/shm that is memory, so gone at once unless kept.
    if (!keep) for (const suffix of ["", "-wal", "-shm"]) fs.rmSync(`${db}${suffix}`, { force: true });
  }
}

async function benchIngest(args, dir) {
  const browser = await launch();
  const rates = { 0: [], 2: [] };
  const steadyRates = { 0: [], 2: [] };
  const storeDir = args.ingestStoreDir ? fs.mkdtempSync(path.join(args.ingestStoreDir, "castscope-ingest-")) : dir;
  try {
    console.log(`ingest: castscope_ingest_bench fill --prebuild, ${(args.ingestEvents / 1e6).toFixed(1)} M events of 2 ranks into a fresh store, no page / two pages following the run (${TABS ? "tabs of one context" : "a context each"}, ${OPEN_DURING_RUN ? "opened once the run has casts" : "open at #/live before the fill starts"}), alternated ${args.ingestRepeats}x`);
    for (let r = 0; r < args.ingestRepeats; r++) {
      for (const pages of [0, 2]) {
        const { rate, steadyRate, stats, browserCpu, browserRunCpu, collectorCpu, browserThreads, switchCpu } = await ingestOnce(browser, dir, storeDir, args.keep !== null, args.ingestEvents, pages, r);
        rates[pages].push(rate);
        steadyRates[pages].push(steadyRate);
        const cpu = (browserCpu === null ? "" : `; the browser ${browserCpu.toFixed(2)} CPU s/s while following`) +
          (pages > 0 ? `; the browser ${browserRunCpu.toFixed(2)} CPU s over the run, the pages' opening included` : "") +
          (switchCpu ? `; the pages' switch to the run ${switchCpu.cpu.toFixed(2)} CPU s in its first ${switchCpu.seconds.toFixed(2)} s` : "");
        console.log(`  ${pages} pages: ${(rate / 1e6).toFixed(3)} M events/s, steady ${(steadyRate / 1e6).toFixed(3)}${stats.length ? ` (pages got ${stats.map((s) => `${s.live} live messages, ${s.fetches} refetches, ${s.paints} paints`).join("; ")}${cpu})` : ""}`);
        console.log(`    the collector's CPU s/s by thread: ${collectorCpu}`);
        if (browserThreads) console.log(`    the browser's CPU s/s by thread name: ${browserThreads}`);
      }
    }
  } finally {
    await browser.close();
    if (storeDir !== dir && !args.keep) fs.rmSync(storeDir, { recursive: true, force: true });
  }
  const median = (v) => percentile(v, 50);
  console.log(`  median: no page ${(median(rates[0]) / 1e6).toFixed(3)} M/s, two pages ${(median(rates[2]) / 1e6).toFixed(3)} M/s: ratio ${(median(rates[2]) / median(rates[0])).toFixed(3)} (the whole run${OPEN_DURING_RUN ? ", the pages' opening included" : ", the pages' switch to the run included"})`);
  console.log(`  steady (from ${STEADY_FROM * 100}% of the events stored, the pages following): no page ${(median(steadyRates[0]) / 1e6).toFixed(3)} M/s, two pages ${(median(steadyRates[2]) / 1e6).toFixed(3)} M/s: ratio ${(median(steadyRates[2]) / median(steadyRates[0])).toFixed(3)} (target >= 0.80)`);
}

async function main() {
  const args = parseArgs(process.argv);
  for (const [what, file] of [["collector", COLLECTOR], ["ingest bench", INGEST_BENCH], ["castscope", CASTSCOPE], ["ui", path.join(UI_DIST, "index.html")], ["chromium", CHROMIUM]])
    if (!fs.existsSync(file)) throw new Error(`${what}: ${file} missing (scripts/setup.sh --tests; cd ui && npm run build)`);
  const dir = args.keep ? (fs.mkdirSync(args.keep, { recursive: true }), args.keep) : fs.mkdtempSync(path.join(os.tmpdir(), "castscope-viewer-browser-"));
  console.log(`${new Date().toISOString()} ${os.cpus().length} cores, load ${os.loadavg().map((l) => l.toFixed(2)).join(" ")}; chromium ${execFileSync(CHROMIUM, ["--version"], { encoding: "utf8" }).trim()}${WINDOW_WEBUI ? ", its per-window WebUI kept" : ", its per-window WebUI off"}`);
  try {
    if (!args.skipScale) await benchScale(args, dir);
    if (!args.skipLive) await benchLive(args, dir);
    if (!args.skipIngest) await benchIngest(args, dir);
  } finally {
    console.log(`load after: ${os.loadavg().map((l) => l.toFixed(2)).join(" ")}`);
    if (!args.keep) fs.rmSync(dir, { recursive: true, force: true });
  }
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
