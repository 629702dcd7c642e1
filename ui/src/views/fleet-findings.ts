// The fleet's findings, by kind: a count per kind (each a filter), then the
// findings of each kind with their job, file:line and ranks. A rank-divergence
// says what each side's ranks cast at the line. Shared by the fleet page and
// a job's page; every string in it came from an agent and goes in as text.

import type { FleetFinding, FleetSide } from "../api";
import { clear, h } from "../dom";
import { fmtCount, fmtRanks } from "../format";
import { fleetHash } from "../router";

const SEVERITY_ORDER = ["critical", "error", "warning", "info"];

export interface FindingsOptions {
  /** Each finding names and links its job (the fleet page; not a job's own page). */
  showJob: boolean;
  /** The kind shown alone; "" all. */
  kind: string;
  /** A kind's count was clicked ("" for all): the caller keeps the choice. */
  onKind(kind: string): void;
}

export function renderFleetFindings(el: HTMLElement, findings: FleetFinding[], o: FindingsOptions): void {
  clear(el);
  if (!findings.length) {
    el.appendChild(h("p", { class: "muted" }, "No findings."));
    return;
  }
  const byKind = new Map<string, FleetFinding[]>();
  for (const f of findings) {
    const fs = byKind.get(f.kind);
    if (fs) fs.push(f);
    else byKind.set(f.kind, [f]);
  }
  const kinds = [...byKind.keys()].sort((a, b) => byKind.get(b)!.length - byKind.get(a)!.length || a.localeCompare(b));
  const kind = byKind.has(o.kind) ? o.kind : "";

  const chip = (k: string, n: number, label: string) => {
    const b = h("button", { type: "button", class: `kind-chip ${k === kind ? "active" : ""}`, "aria-pressed": String(k === kind), "data-kind": k }, label, " ", h("span", { class: "count" }, fmtCount(n)));
    b.addEventListener("click", () => o.onKind(k === kind ? "" : k));
    return b;
  };
  el.appendChild(
    h("div", { class: "kind-counts", role: "group", "aria-label": "findings per kind" }, chip("", findings.length, "all"), ...kinds.map((k) => chip(k, byKind.get(k)!.length, k))),
  );
  for (const k of kinds) {
    if (kind && k !== kind) continue;
    const fs = [...byKind.get(k)!].sort((a, b) => severityRank(a.severity) - severityRank(b.severity));
    el.appendChild(h("section", { class: "kind-group", "data-kind": k }, h("h3", { class: "kind-head" }, h("code", null, k), ` (${fs.length})`), ...fs.map((f) => finding(f, o.showJob))));
  }
}

function severityRank(s: string): number {
  const i = SEVERITY_ORDER.indexOf(s);
  return i < 0 ? SEVERITY_ORDER.length : i;
}

function finding(f: FleetFinding, showJob: boolean): HTMLElement {
  const where = f.file ? `${f.file}:${f.line}` : "";
  const ranks = f.ranks.filter((r) => r >= 0);
  return h(
    "article",
    { class: `finding fleet-finding sev-${cssName(f.severity)}`, "data-kind": f.kind, "data-severity": f.severity, "data-job": f.job },
    h(
      "div",
      { class: "finding-head" },
      h("span", { class: `badge sev-${cssName(f.severity)}` }, f.severity),
      " ",
      showJob ? h("a", { href: fleetHash(f.job), class: "finding-job", title: "open this job" }, f.job) : null,
      showJob ? " " : null,
      where ? h("code", { class: "finding-where" }, where) : null,
      ranks.length ? h("span", { class: "finding-ranks muted" }, ` ranks ${fmtRanks(ranks)}`) : null,
    ),
    f.summary ? h("p", { class: "summary" }, f.summary) : null,
    f.sides && f.sides.length > 1 ? sidesList(f.sides) : null,
  );
}

/** Each side that differs from the first (the job's lowest rank's), against it. */
function sidesList(sides: FleetSide[]): HTMLElement {
  const [base, ...others] = sides;
  return h(
    "ul",
    { class: "sides" },
    ...others.map((side) =>
      h("li", { class: "side" }, h("strong", null, `ranks ${fmtRanks(side.ranks)}`), `: ${castsText(side)}`, h("span", { class: "muted" }, " vs "), h("strong", null, `ranks ${fmtRanks(base.ranks)}`), `: ${castsText(base)}`),
    ),
  );
}

function castsText(side: FleetSide): string {
  if (!side.casts.length) return "no casts";
  return side.casts.map((c) => `${c.src}→${c.dst}${c.mode && c.mode !== "eager" ? ` (${c.mode})` : ""} ×${fmtCount(c.count)}`).join(", ");
}

function cssName(s: string): string {
  return s.toLowerCase().replace(/[^a-z0-9-]/g, "");
}
