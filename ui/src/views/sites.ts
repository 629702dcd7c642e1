// Sites: one row per source site (file:line, op, arg), its counts, and the
// dtype pairs it produced in each mode side by side. Rows whose modes
// disagree (`mismatch`) are marked, and the differing cells highlighted.

import { api, type SiteRow } from "../api";
import { clear, h } from "../dom";
import { fmtBytes, fmtCount } from "../format";
import { errorText } from "../notice";
import { hashFor, replaceHash } from "../router";

const MODE_ORDER = ["eager", "script", "trace_recording", "traced", "script_while_tracing", "compiling", "compiled"];

type SortKey = "site" | "function" | "op" | "arg" | "total" | "bytes" | "hits" | "stale_hits" | "mismatch" | `mode:${string}`;

export class SitesView {
  readonly el: HTMLElement;
  private rows: SiteRow[] = [];
  private modes: string[] = [];
  private sort: { key: SortKey; desc: boolean } = { key: "total", desc: true };
  private filter: HTMLInputElement;
  private onlyMismatch: HTMLInputElement;
  private table: HTMLElement;
  private count: HTMLElement;

  constructor(private readonly run: string, query: string) {
    this.filter = h("input", { type: "search", placeholder: "filter: file, line, function, op, dtype…", class: "filter", "aria-label": "filter sites" });
    this.filter.value = query;
    this.filter.addEventListener("input", () => {
      replaceHash(hashFor("sites", this.run, { q: this.filter.value }));
      this.render();
    });
    this.onlyMismatch = h("input", { type: "checkbox" });
    this.onlyMismatch.addEventListener("change", () => this.render());
    this.count = h("span", { class: "muted" });
    this.table = h("div", { class: "sites-table" }, h("p", { class: "muted" }, "loading sites…"));
    this.el = h(
      "section",
      { class: "sites page" },
      h("h1", null, "Sites"),
      h("div", { class: "toolbar" }, this.filter, h("label", null, this.onlyMismatch, " only mode differences"), this.count),
      this.table,
    );
    void this.load();
  }

  private async load(): Promise<void> {
    try {
      const { sites } = await api.sites(this.run);
      this.rows = sites;
      const seen = new Set<string>();
      for (const s of sites) for (const m of Object.keys(s.by_mode ?? {})) seen.add(m);
      this.modes = [...MODE_ORDER.filter((m) => seen.has(m)), ...[...seen].filter((m) => !MODE_ORDER.includes(m)).sort()];
      this.render();
    } catch (e) {
      clear(this.table);
      this.table.appendChild(h("p", { class: "error" }, errorText(e)));
    }
  }

  private value(s: SiteRow, key: SortKey): string | number {
    switch (key) {
      case "site":
        return `${s.file}\u0000${String(s.line).padStart(8, "0")}`;
      case "function":
        return s.function ?? "";
      case "op":
        return s.op ?? "";
      case "arg":
        return String(s.arg ?? "");
      case "mismatch":
        return s.mismatch ? 1 : 0;
      case "total":
      case "bytes":
      case "hits":
      case "stale_hits":
        return s[key] ?? 0;
      default: {
        const m = s.by_mode?.[key.slice(5)];
        return m ? Object.values(m).reduce((a, b) => a + b, 0) : 0;
      }
    }
  }

  private render(): void {
    const q = this.filter.value.trim().toLowerCase();
    const rows = this.rows.filter((s) => {
      if (this.onlyMismatch.checked && !s.mismatch) return false;
      if (!q) return true;
      const hay = [`${s.file}:${s.line}`, s.function, s.op, String(s.arg), JSON.stringify(s.by_mode ?? {})].join(" ").toLowerCase();
      return q.split(/\s+/).every((w) => hay.includes(w));
    });
    const { key, desc } = this.sort;
    rows.sort((a, b) => {
      const va = this.value(a, key);
      const vb = this.value(b, key);
      const c = typeof va === "number" && typeof vb === "number" ? va - vb : String(va).localeCompare(String(vb));
      return desc ? -c : c;
    });
    this.count.textContent = `${rows.length} of ${this.rows.length} sites`;

    const th = (label: string, k: SortKey, cls = "") => {
      const active = this.sort.key === k;
      const el = h("th", { class: `sortable ${cls} ${active ? "sorted" : ""}`, "data-sort": k, "aria-sort": active ? (desc ? "descending" : "ascending") : "none", tabindex: 0 }, label, active ? (desc ? " ▼" : " ▲") : "");
      const go = () => {
        this.sort = { key: k, desc: this.sort.key === k ? !this.sort.desc : k !== "site" && k !== "function" && k !== "op" && k !== "arg" };
        this.render();
      };
      el.addEventListener("click", go);
      el.addEventListener("keydown", (e) => {
        if (e.key === "Enter" || e.key === " ") {
          e.preventDefault();
          go();
        }
      });
      return el;
    };
    const head = h(
      "tr",
      null,
      th("file:line", "site"),
      th("function", "function"),
      th("op", "op"),
      th("arg", "arg"),
      th("total", "total", "num"),
      th("bytes", "bytes", "num"),
      th("hits", "hits", "num"),
      th("stale", "stale_hits", "num"),
      ...this.modes.map((m) => th(m, `mode:${m}`, "mode")),
      th("modes differ", "mismatch"),
    );
    const body = h("tbody");
    for (const s of rows) {
      const pairsByMode = this.modes.map((m) => Object.keys(s.by_mode?.[m] ?? {}).sort().join("|"));
      const present = pairsByMode.filter((p) => p !== "");
      const counts = new Map<string, number>();
      for (const p of present) counts.set(p, (counts.get(p) ?? 0) + 1);
      let majority = "";
      let best = 0;
      for (const [p, n] of counts) if (n > best) (majority = p), (best = n);
      // No single majority (e.g. eager against script): every mode's cell differs.
      if ([...counts.values()].filter((n) => n === best).length > 1) majority = "\u0000";
      const cells = this.modes.map((m, i) => {
        const pairs = s.by_mode?.[m];
        if (!pairs || !Object.keys(pairs).length) return h("td", { class: "mode empty" }, "—");
        const differs = s.mismatch && pairsByMode[i] !== majority;
        return h(
          "td",
          { class: `mode ${s.mismatch ? "mismatch" : ""} ${differs ? "differs" : ""}`, "data-mode": m },
          ...Object.entries(pairs).map(([pair, n]) => h("div", { class: "pair" }, `${pair.replace("->", " → ")} `, h("span", { class: "muted" }, `×${fmtCount(n)}`))),
        );
      });
      body.appendChild(
        h(
          "tr",
          { class: s.mismatch ? "row-mismatch" : "", "data-site": `${s.file}:${s.line}` },
          h("td", { class: "site", title: `${s.file}:${s.line}` }, `${s.file}:${s.line}`),
          h("td", null, s.function ?? ""),
          h("td", null, s.op ?? ""),
          h("td", null, String(s.arg ?? "")),
          h("td", { class: "num" }, fmtCount(s.total ?? 0)),
          h("td", { class: "num" }, fmtBytes(s.bytes ?? 0)),
          h("td", { class: "num" }, fmtCount(s.hits ?? 0)),
          h("td", { class: s.stale_hits ? "num bad" : "num" }, fmtCount(s.stale_hits ?? 0)),
          ...cells,
          h("td", { class: s.mismatch ? "bad" : "muted" }, s.mismatch ? "yes" : "no"),
        ),
      );
    }
    clear(this.table);
    this.table.appendChild(h("table", { class: "grid" }, h("thead", null, head), body));
    if (!rows.length) this.table.appendChild(h("p", { class: "muted" }, this.rows.length ? "No site matches the filter." : "No sites in this run."));
  }

  destroy(): void {
    /* nothing pending */
  }
}
