// The fleet's top casting sites: one row per site and cast kind (src, dst,
// outcome, mode), busiest first as the server sends them. Shared by the
// fleet page (across jobs) and a job's page.

import type { FleetSiteRow } from "../api";
import { clear, h } from "../dom";
import { fmtBytes, fmtCount } from "../format";

const HEADS: [string, boolean][] = [
  ["file:line", false],
  ["function", false],
  ["op", false],
  ["arg", false],
  ["cast", false],
  ["outcome", false],
  ["mode", false],
  ["decisions", true],
  ["bytes", true],
  ["hits", true],
  ["misses", true],
  ["stale", true],
  ["backward", true],
];

export function renderFleetSites(el: HTMLElement, sites: FleetSiteRow[], showJobs: boolean): void {
  clear(el);
  if (!sites.length) {
    el.appendChild(h("p", { class: "muted" }, "No casting sites in this window."));
    return;
  }
  const heads = showJobs ? [...HEADS, ["jobs", true] as [string, boolean]] : HEADS;
  const body = h("tbody");
  for (const s of sites) {
    const where = `${s.file}:${s.line}`;
    body.appendChild(
      h(
        "tr",
        { "data-site": where },
        h("td", { class: "site", title: where }, where),
        h("td", null, s.function),
        h("td", null, s.op),
        h("td", null, s.arg),
        h("td", { class: "pair" }, `${s.src} → ${s.dst}`),
        h("td", null, s.outcome),
        h("td", null, s.mode),
        h("td", { class: "num" }, fmtCount(s.count)),
        h("td", { class: "num" }, fmtBytes(s.bytes)),
        h("td", { class: "num" }, fmtCount(s.hits)),
        h("td", { class: "num" }, fmtCount(s.misses)),
        h("td", { class: s.stale_hits ? "num bad" : "num" }, fmtCount(s.stale_hits)),
        h("td", { class: "num" }, fmtCount(s.backward)),
        showJobs ? h("td", { class: "num" }, fmtCount(s.jobs)) : null,
      ),
    );
  }
  el.appendChild(
    h("div", { class: "table-wrap" }, h("table", { class: "grid fleet-sites" }, h("thead", null, h("tr", null, ...heads.map(([t, num]) => h("th", { class: num ? "num" : undefined }, t)))), body)),
  );
}
