// The screenshots in docs/viewer.md, taken from the real UI over real jobs:
//   npm run build && npx playwright test -c playwright.screenshots.config.ts
// Not a test (CI does not run it): it writes docs/images/viewer-*.png.
import { defineConfig } from "@playwright/test";
import base from "./playwright.config";

export default defineConfig({
  ...base,
  testDir: "./docshots",
  testMatch: "*.shots.ts",
});
