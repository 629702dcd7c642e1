// Bundles src/ into dist/: index.html, assets/app.js, assets/app.css.
// No inline script or style anywhere: the server's CSP forbids them.
import * as esbuild from "esbuild";
import { execFileSync } from "node:child_process";
import { copyFileSync, mkdirSync, rmSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const dist = join(here, "dist");
const watch = process.argv.includes("--watch");

// The answers' types must be what the API's schema declares (api-types.mjs).
try {
  execFileSync(process.execPath, [join(here, "api-types.mjs"), "--check"], { stdio: "inherit" });
} catch {
  process.exit(1); // it said why
}

rmSync(dist, { recursive: true, force: true });
mkdirSync(join(dist, "assets"), { recursive: true });
copyFileSync(join(here, "src", "index.html"), join(dist, "index.html"));

const options = {
  entryPoints: { app: join(here, "src", "main.ts") },
  outdir: join(dist, "assets"),
  bundle: true,
  format: "iife",
  target: ["es2020"],
  minify: !watch,
  sourcemap: watch ? "inline" : false,
  legalComments: "none",
  logLevel: "info",
};

if (watch) {
  const ctx = await esbuild.context(options);
  await ctx.watch();
} else {
  await esbuild.build(options);
}
