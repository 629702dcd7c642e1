// The run page's export buttons: the run as a file to save, fetched from
// /api/export (the report JSON, a Perfetto trace, a Chrome trace), and SARIF
// as the command that writes it: SARIF's paths are relative to the source
// tree, which the job's machine has and this page does not know.

import { h } from "../dom";
import { shellQuoted } from "../format";

const FORMATS: [format: string, label: string, title: string][] = [
  ["report", "Report JSON", "the JSON audit report: totals, sites, findings, precision map (docs/schema/report.schema.json)"],
  ["perfetto", "Perfetto trace", "open it in ui.perfetto.dev (docs/export.md)"],
  ["chrome", "Chrome trace", "open it in chrome://tracing or Perfetto (docs/export.md)"],
];

export function exportMenu(run: string): HTMLElement {
  const links = FORMATS.map(([format, label, title]) =>
    h("a", { class: "export-link", href: `/api/export?run=${encodeURIComponent(run)}&format=${format}`, download: "", title }, label),
  );
  const sarif = `castscope report ${shellQuoted(run)} --db DB --sarif findings.sarif --source-root SRC`;
  return h(
    "section",
    { class: "export-menu", "aria-label": "export" },
    h("h3", null, "Export"),
    h("div", { class: "export-links" }, links),
    h("div", { class: "export-sarif", title: "SARIF paths are relative to your source tree: run this where the code is (docs/sarif.md)" }, "SARIF: ", h("code", null, sarif)),
  );
}
