// The viewer's HTTP surface from outside the page: the token on every route,
// the Host check, path traversal, CORS, CSP and the cookie's flags. Runs
// against `castscope view` over a real job's database.

import { expect, request, test } from "@playwright/test";
import { rawGet, runToEnd, type Server, view } from "./castscope";

let server: Server;

test.describe.configure({ mode: "serial" });

test.beforeAll(async () => {
  server = await view(runToEnd("stale_train.py"));
});

test.afterAll(async () => {
  await server?.stop();
});

const ROUTES = ["/", "/index.html", "/assets/app.js", "/api/runs", "/api/live"];

test("every route without the token answers 401", async () => {
  const ctx = await request.newContext({ baseURL: server.origin });
  for (const route of ROUTES) {
    const res = await ctx.get(route, { maxRedirects: 0 });
    expect(res.status(), route).toBe(401);
    expect(res.headers()["access-control-allow-origin"], route).toBeUndefined();
  }
  // a wrong token is no better
  for (const route of ROUTES) {
    const res = await ctx.get(route, { maxRedirects: 0, headers: { Authorization: "Bearer not-the-token" } });
    expect(res.status(), route).toBe(401);
  }
  await ctx.dispose();
});

test("a wrong Host header is refused", async () => {
  for (const host of ["evil.example", `evil.example:${new URL(server.origin).port}`, "127.0.0.1.nip.io"]) {
    const res = await rawGet(server.origin, "/api/runs", { Host: host, Authorization: `Bearer ${server.token}` });
    expect([400, 403], host).toContain(res.status);
  }
  const ok = await rawGet(server.origin, "/api/runs", { Authorization: `Bearer ${server.token}` });
  expect(ok.status).toBe(200);
});

test("path traversal never reaches a file outside the UI", async () => {
  const attempts = [
    "/assets/../../etc/passwd",
    "/%2e%2e/%2e%2e/etc/passwd",
    "/assets/..%2f..%2fCMakeLists.txt",
    "/assets/..%2F..%2F..%2F..%2Fetc%2Fpasswd",
    "/..%2f..%2f..%2fetc/passwd",
    "/assets/%2e%2e/%2e%2e/CMakeLists.txt",
    "//etc/passwd",
    "/assets/app.js%00.html",
  ];
  for (const p of attempts) {
    const res = await rawGet(server.origin, p, { Authorization: `Bearer ${server.token}` });
    expect([400, 404], p).toContain(res.status);
    expect(res.body, p).not.toMatch(/root:x?:0:0|cmake_minimum_required|project\(/i);
  }
});

test("no CORS headers, CSP on every answer, and the cookie is HttpOnly and SameSite=Strict", async () => {
  const ctx = await request.newContext({ baseURL: server.origin });
  const login = await ctx.get(`/?token=${server.token}`, { maxRedirects: 0 });
  expect([302, 303, 307]).toContain(login.status());
  const cookie = login.headersArray().filter((h) => h.name.toLowerCase() === "set-cookie").map((h) => h.value).join("\n");
  expect(cookie).toMatch(/HttpOnly/i);
  expect(cookie).toMatch(/SameSite=Strict/i);

  // the cookie alone now opens every route
  for (const route of ["/", "/index.html", "/assets/app.js", "/assets/app.css", "/api/runs"]) {
    const res = await ctx.get(route, { headers: { Origin: "http://evil.example" } });
    expect(res.status(), route).toBe(200);
    const headers = res.headers();
    expect(headers["access-control-allow-origin"], route).toBeUndefined();
    expect(headers["access-control-allow-credentials"], route).toBeUndefined();
    if (!route.startsWith("/api/")) {
      const csp = headers["content-security-policy"] ?? "";
      expect(csp, route).toContain("default-src 'self'");
      expect(csp, route).toContain("script-src 'self'");
      expect(csp, route).not.toContain("unsafe-inline");
    }
  }
  // a preflight gets no CORS grant either
  const pre = await ctx.fetch("/api/runs", { method: "OPTIONS", headers: { Origin: "http://evil.example", "Access-Control-Request-Method": "GET" } });
  expect(pre.headers()["access-control-allow-origin"]).toBeUndefined();
  await ctx.dispose();
});
