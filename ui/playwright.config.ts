// Browser tests against the real castscope server: each spec starts
// `castscope run --serve` or `castscope view` from the repository root
// (CASTSCOPE_REPO, default: the parent of ui/) and drives Debian's chromium
// (CASTSCOPE_CHROMIUM, default /usr/bin/chromium); no browser is downloaded.
import { defineConfig } from "@playwright/test";

export default defineConfig({
  testDir: "./tests",
  testMatch: "*.spec.ts",
  workers: 1,
  fullyParallel: false,
  retries: 0,
  timeout: 240_000,
  expect: { timeout: 20_000 },
  reporter: "list",
  outputDir: "test-results",
  use: {
    viewport: { width: 1440, height: 900 },
    actionTimeout: 15_000,
    navigationTimeout: 30_000,
    trace: "off",
    screenshot: "only-on-failure",
    launchOptions: {
      executablePath: process.env.CASTSCOPE_CHROMIUM || "/usr/bin/chromium",
      args: ["--no-sandbox", "--disable-dev-shm-usage"],
    },
  },
});
