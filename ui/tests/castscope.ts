// Starting the real castscope processes for the browser tests, and reading
// what they print. Nothing here fakes the server: the specs drive the
// collector's HTTP service over a real job's events (or, for the fleet page,
// `castscope-collector fleet view` over a real PostgreSQL).

import { type ChildProcess, execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import http from "node:http";
import os from "node:os";
import path from "node:path";
import { expect, type Page } from "@playwright/test";
import type { VisibleCast } from "../src/timeline/visible";

/** The repository root whose .venv holds castscope (the parent of ui/ by default). */
export const REPO = path.resolve(process.env.CASTSCOPE_REPO || path.join(__dirname, "..", ".."));
export const UI_DIST = path.resolve(process.env.CASTSCOPE_UI_DIR || path.join(__dirname, "..", "dist"));
export const JOBS = path.join(__dirname, "jobs");
export const CASTSCOPE = path.join(REPO, ".venv", "bin", "castscope");
export const PYTHON = path.join(REPO, ".venv", "bin", "python");
export const COLLECTOR = path.resolve(process.env.CASTSCOPE_COLLECTOR_BIN || path.join(REPO, "build", "server", "castscope-collector"));
const URL_LINE = /castscope: viewer at (http:\/\/[^/\s]+)\/\?token=([^\s#]+)(#\S*)?/;

export interface Server {
  origin: string; // http://127.0.0.1:PORT
  token: string;
  url: string; // the printed URL, token included
  proc: ChildProcess;
  output(): string;
  stop(): Promise<void>;
}

function helpOf(sub: string): string {
  try {
    return execFileSync(CASTSCOPE, [sub, "--help"], { cwd: REPO, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] });
  } catch (e) {
    return String((e as { stdout?: string }).stdout ?? "");
  }
}

/** `--ui-dir DIST` where the subcommand takes it, so this checkout's UI is served. */
function uiDirArgs(sub: string): string[] {
  if (!fs.existsSync(path.join(UI_DIST, "index.html"))) throw new Error(`${UI_DIST}/index.html missing: run npm run build first`);
  return helpOf(sub).includes("--ui-dir") ? ["--ui-dir", UI_DIST] : [];
}

const madeTempDirs: string[] = [];
// Removed when the worker exits, so runs of the suite leave nothing under /tmp.
process.on("exit", () => {
  for (const dir of madeTempDirs) {
    try {
      fs.rmSync(dir, { recursive: true, force: true, maxRetries: 3 });
    } catch {
      /* a server still writing there: leave it, and go on with the rest */
    }
  }
});

export function tempDir(prefix: string): string {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `castscope-ui-${prefix}-`));
  madeTempDirs.push(dir);
  return dir;
}

/** Starts `castscope ARGS`, resolves once it prints the viewer's URL. */
export function startCastscope(args: string[], timeoutMs = 180_000): Promise<Server> {
  if (!fs.existsSync(CASTSCOPE)) throw new Error(`${CASTSCOPE} missing: set CASTSCOPE_REPO to a built checkout`);
  return startServer(CASTSCOPE, args, timeoutMs);
}

/** Starts `castscope-collector ARGS` (e.g. `fleet view`), resolves once it prints the viewer's URL. */
export function startCollector(args: string[], timeoutMs = 60_000): Promise<Server> {
  if (!fs.existsSync(COLLECTOR)) throw new Error(`${COLLECTOR} missing: build the server or set CASTSCOPE_COLLECTOR_BIN`);
  return startServer(COLLECTOR, args, timeoutMs);
}

/** Whether `castscope-collector SUBCOMMAND... --help` names `option` (a command the server may not have yet). */
export function collectorHas(subcommand: string[], option: string): boolean {
  if (!fs.existsSync(COLLECTOR)) return false;
  try {
    return execFileSync(COLLECTOR, [...subcommand, "--help"], { cwd: REPO, encoding: "utf8", stdio: ["ignore", "pipe", "pipe"] }).includes(option);
  } catch {
    return false;
  }
}

function startServer(program: string, args: string[], timeoutMs: number): Promise<Server> {
  const name = path.basename(program);
  // Its own process group, so stopping it reaches the collector it starts too.
  const proc = spawn(program, args, { cwd: REPO, stdio: ["ignore", "pipe", "pipe"], detached: true });
  let out = "";
  return new Promise((resolve, reject) => {
    const timer = setTimeout(() => {
      proc.kill("SIGKILL");
      reject(new Error(`${name} ${args.join(" ")}: no viewer URL after ${timeoutMs} ms; output:\n${out}`));
    }, timeoutMs);
    const onData = (b: Buffer) => {
      out += b.toString();
      const m = URL_LINE.exec(out);
      if (m && timer) {
        clearTimeout(timer);
        const server: Server = {
          origin: m[1],
          token: m[2],
          url: `${m[1]}/?token=${m[2]}${m[3] ?? ""}`, // the fleet view's with its #/fleet
          proc,
          output: () => out,
          stop: () => stopProcess(proc),
        };
        resolve(server);
      }
    };
    proc.stdout!.on("data", onData);
    proc.stderr!.on("data", onData);
    proc.on("exit", (code, sig) => {
      clearTimeout(timer);
      reject(new Error(`${name} ${args.join(" ")} exited (${code ?? sig}) before printing the viewer URL; output:\n${out}`));
    });
  });
}

/** SIGINT to the process group we started (castscope and its collector), SIGKILL after 20 s. */
export function stopProcess(proc: ChildProcess): Promise<void> {
  const signalGroup = (sig: NodeJS.Signals) => {
    try {
      if (proc.pid) process.kill(-proc.pid, sig);
    } catch {
      /* the group is gone */
    }
  };
  if (proc.exitCode !== null || proc.signalCode !== null) {
    signalGroup("SIGINT");
    return Promise.resolve();
  }
  return new Promise((resolve) => {
    const kill = setTimeout(() => signalGroup("SIGKILL"), 20_000);
    proc.once("exit", () => {
      clearTimeout(kill);
      signalGroup("SIGINT"); // anything of the group still running after castscope itself
      resolve();
    });
    signalGroup("SIGINT");
  });
}

/** Where `castscope run`'s embedded collector will find this checkout's UI. */
function runServesThisUi(): boolean {
  if (helpOf("run").includes("--ui-dir")) return true;
  const own = path.join(REPO, "ui", "dist");
  return fs.existsSync(path.join(own, "index.html")) && fs.realpathSync(own) === fs.realpathSync(UI_DIST);
}

/**
 * `castscope run --out DIR --serve -- python JOB`: the job runs, the viewer
 * stays up. When that command cannot be pointed at this checkout's UI (no
 * `run --ui-dir`, and REPO/ui/dist is not this UI: a server checkout apart from
 * the UI's), the same job goes to `castscope serve --ui-dir DIST` through
 * `castscope run --collector`, and a warning says so.
 */
export async function runJob(job: string, out = tempDir(path.basename(job, ".py")), runFlags: string[] = []): Promise<Server & { out: string }> {
  if (runServesThisUi()) {
    const args = ["run", "--out", out, "--serve", ...runFlags, ...uiDirArgs("run"), "--", PYTHON, path.join(JOBS, job)];
    return { ...(await startCastscope(args)), out };
  }
  console.warn(`castscope run cannot serve ${UI_DIST} (it has no --ui-dir and ${REPO}/ui/dist is missing or another UI): using castscope serve --ui-dir and run --collector`);
  const daemon = await serveStore(out);
  const job_ = jobAgainst(daemon.address, job, path.join(out, "job"), runFlags);
  return {
    ...daemon,
    out,
    output: () => `${daemon.output()}\n--- job ---\n${job_.output()}`,
    stop: async () => {
      await job_.stop();
      await daemon.stop();
    },
  };
}

/** `castscope serve` on a new store in OUT (its viewer this checkout's UI), and the gRPC address agents reach it at. */
export async function serveStore(out: string): Promise<Server & { address: string }> {
  const ready = path.join(out, "collector.addr");
  const daemon = await startCastscope(["serve", "--db", path.join(out, "castscope.db"), "--listen", "127.0.0.1:0", "--ready-file", ready, "--ui-dir", UI_DIST]);
  for (let i = 0; i < 100 && !fs.existsSync(ready); i++) await new Promise((r) => setTimeout(r, 100));
  return { ...daemon, address: fs.readFileSync(ready, "utf8").trim() };
}

export interface Started {
  /** Its stdout and stderr so far (a failure to start included). */
  output(): string;
  running(): boolean;
  /** SIGINT to its process group, SIGKILL after 20 s. */
  stop(): Promise<void>;
  /** SIGKILL to its whole process group; resolves once its output is complete. */
  kill(): Promise<void>;
}

/** `program ARGS` started in a process group of its own (not awaited). */
export function startProgram(program: string, args: string[]): Started {
  const proc = spawn(program, args, { cwd: REPO, stdio: ["ignore", "pipe", "pipe"], detached: true });
  let text = "";
  proc.stdout!.on("data", (b: Buffer) => (text += b.toString()));
  proc.stderr!.on("data", (b: Buffer) => (text += b.toString()));
  let closed = false;
  const done = new Promise<void>((resolve) => {
    proc.once("close", () => resolve());
    proc.once("error", (e) => {
      text += String(e);
      resolve();
    });
  }).then(() => {
    closed = true;
  });
  return {
    output: () => text,
    running: () => proc.exitCode === null && proc.signalCode === null && !closed,
    stop: () => stopProcess(proc),
    kill: async () => {
      try {
        if (proc.pid) process.kill(-proc.pid, "SIGKILL");
      } catch {
        /* the group is gone */
      }
      await done;
    },
  };
}

/**
 * `castscope run --collector ADDRESS --out OUT -- python JOB`, started (not
 * awaited): its output, a stop (SIGINT) and a kill (SIGKILL to its whole
 * process group: the job ends without its last batch, as one killed by the OOM killer).
 */
export function jobAgainst(address: string, job: string, out: string, runFlags: string[] = []): Started {
  return startProgram(CASTSCOPE, ["run", "--collector", address, "--out", out, ...runFlags, "--", PYTHON, path.join(JOBS, job)]);
}

/** `castscope view DIR|DB`. */
export function view(dirOrDb: string): Promise<Server> {
  return startCastscope(["view", dirOrDb, ...uiDirArgs("view")]);
}

/** Runs a job to its end without serving (`castscope run --out DIR`); returns DIR. */
export function runToEnd(job: string): string {
  const out = tempDir(path.basename(job, ".py"));
  execFileSync(CASTSCOPE, ["run", "--out", out, "--", PYTHON, path.join(JOBS, job)], { cwd: REPO, stdio: ["ignore", "pipe", "pipe"], timeout: 240_000 });
  return out;
}

export interface ApiRun {
  run_id: string;
  live: boolean;
  last_seen_unix_ns: string;
  agents: { agent_id: number; casts: number; finished: boolean }[];
}

/** GET an API route with the bearer token, from node (not the page). */
export async function apiGet<T>(s: Server, route: string): Promise<T> {
  const res = await fetch(`${s.origin}${route}`, { headers: { Authorization: `Bearer ${s.token}` } });
  if (!res.ok) throw new Error(`GET ${route}: ${res.status} ${await res.text()}`);
  return (await res.json()) as T;
}

/** Waits until the store holds one run; with `finished`, until it is no longer live. */
export async function waitForRun(s: Server, opts: { finished?: boolean; minCasts?: number; timeoutMs?: number } = {}): Promise<ApiRun> {
  const deadline = Date.now() + (opts.timeoutMs ?? 180_000);
  let last = "";
  while (Date.now() < deadline) {
    try {
      const { runs } = await apiGet<{ runs: ApiRun[] }>(s, "/api/runs");
      last = JSON.stringify(runs).slice(0, 500);
      const run = runs[0];
      const casts = run ? run.agents.reduce((n, a) => n + (a.casts ?? 0), 0) : 0;
      if (run && casts >= (opts.minCasts ?? 1) && (!opts.finished || !run.live)) return run;
    } catch (e) {
      last = String(e);
    }
    await new Promise((r) => setTimeout(r, 300));
  }
  throw new Error(`no ${opts.finished ? "finished " : ""}run with casts in time; last /api/runs: ${last}\n${s.output()}`);
}

/** A raw HTTP GET whose path and headers are sent exactly as given (no URL normalisation). */
export function rawGet(origin: string, rawPath: string, headers: Record<string, string> = {}): Promise<{ status: number; headers: http.IncomingHttpHeaders; body: string }> {
  const u = new URL(origin);
  return new Promise((resolve, reject) => {
    const req = http.request({ host: u.hostname, port: u.port, path: rawPath, method: "GET", headers: { Host: u.host, ...headers } }, (res) => {
      let body = "";
      res.setEncoding("utf8");
      res.on("data", (c) => (body += c));
      res.on("end", () => resolve({ status: res.statusCode ?? 0, headers: res.headers, body }));
    });
    req.on("error", reject);
    req.setTimeout(15_000, () => req.destroy(new Error(`GET ${rawPath}: timed out`)));
    req.end();
  });
}

/**
 * The errors of `answer` against docs/schema/viewer-api.schema.json's
 * $defs/`definition` (none: it conforms), checked by the same validator as
 * tests/integration/test_viewer_http.py (Python's jsonschema, from the .venv).
 */
export function schemaErrors(definition: string, answer: unknown): string[] {
  const script = `
import json, pathlib, sys
import jsonschema, referencing
schemas = [json.loads((pathlib.Path(sys.argv[1]) / "docs" / "schema" / n).read_text())
           for n in ("viewer-api.schema.json", "report.schema.json")]
registry = referencing.Registry().with_resources((s["$id"], referencing.Resource.from_contents(s)) for s in schemas)
validator = jsonschema.Draft202012Validator({"$ref": schemas[0]["$id"] + "#/$defs/" + sys.argv[2]}, registry=registry)
for e in validator.iter_errors(json.load(sys.stdin)):
    print("/".join(map(str, e.absolute_path)) + ": " + e.message[:300])
`;
  const out = execFileSync(PYTHON, ["-c", script, REPO, definition], { input: JSON.stringify(answer), encoding: "utf8", timeout: 60_000 });
  return out.split("\n").filter(Boolean);
}

/** Records CSP violations and page errors; `check()` fails the test if any happened. */
export async function watchPage(page: Page): Promise<{ check(): Promise<void> }> {
  const errors: string[] = [];
  page.on("pageerror", (e) => errors.push(`pageerror: ${e.message}`));
  page.on("console", (m) => {
    if (m.type() === "error" && /Content Security Policy|Refused to/.test(m.text())) errors.push(`console: ${m.text()}`);
  });
  await page.addInitScript(() => {
    const w = window as unknown as { __cspViolations: string[] };
    w.__cspViolations = [];
    document.addEventListener("securitypolicyviolation", (e) => w.__cspViolations.push(`${e.violatedDirective} ${e.blockedURI}`));
  });
  return {
    async check() {
      const v = await page.evaluate(() => (window as unknown as { __cspViolations?: string[] }).__cspViolations ?? []).catch(() => []);
      expect([...errors, ...v]).toEqual([]);
    },
  };
}

// The page's own type: the test reads what the timeline draws.
export type { VisibleCast } from "../src/timeline/visible";

export async function visibleCasts(page: Page): Promise<VisibleCast[]> {
  return page.evaluate(() => (window as unknown as { __castscope?: { visibleCasts(): VisibleCast[] } }).__castscope?.visibleCasts() ?? []);
}

/** Waits until the timeline has loaded and drawn at least `min` single casts. */
export async function waitForCasts(page: Page, min = 1): Promise<VisibleCast[]> {
  let casts: VisibleCast[] = [];
  await expect
    .poll(
      async () => {
        casts = await visibleCasts(page);
        return casts.length;
      },
      { timeout: 60_000 },
    )
    .toBeGreaterThanOrEqual(min);
  return casts;
}

/** The line's text in one of the test jobs, as the agent would have read it. */
export function jobLine(file: string, line: number): string {
  return fs.readFileSync(file, "utf8").split("\n")[line - 1] ?? "";
}
