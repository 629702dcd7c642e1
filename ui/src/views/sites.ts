// Sites: one row per source site (file:line, op, arg), its counts, and the
// dtype pairs it produced in each mode side by side. Rows whose modes
// disagree (`mismatch`) are marked, and the differing cells highlighted.
// Each row leads to its casts on the timeline; the filter, sort and the row
// left from live in the hash (#/run/<id>/sites?q=&sort=&dir=&only=&at=), so
// Back returns to the view as it was.

import { api, type SiteRow } from "../api";
import { clear, h } from "../dom";
import { fmtBytes, fmtCount } from "../format";
import { errorText } from "../notice";
import { hashFor, replaceHash } from "../router";

const MODE_ORDER = ["eager", "script", "trace_recording", "traced", "script_while_tracing", "compiling", "compiled"];
const MAX_PATH_CHARS = 48; // a shown path longer than this keeps its last two parts

/** Where a row's casts are: its site on the timeline (run.ts jumps there and highlights them). */
function timelineHash(run: string, s: SiteRow): string {
  return hashFor("timeline", run, { site: `${s.file}:${s.line}`, op: s.op, arg: String(s.arg ?? "") });
}

/** The folder all of `files` share ("" when none but "/"): the shown paths leave it out. */
function commonFolder(files: string[]): string {
  let prefix = files.length ? files[0].slice(0, files[0].lastIndexOf("/") + 1) : "";
  for (const f of files) {
    while (prefix && !f.startsWith(prefix)) {
      // One folder up: "/a/b/" -> "/a/" -> "/" -> "".
      const cut = prefix.length > 1 ? prefix.lastIndexOf("/", prefix.length - 2) : -1;
      prefix = cut < 0 ? "" : prefix.slice(0, cut + 1);
    }
  }
  return prefix === "/" ? "" : prefix;
}

/** A path as shown: without the common folder, and past MAX_PATH_CHARS its last two parts only. */
function shortPath(file: string, common: string): string {
  const rest = common && file.startsWith(common) ? file.slice(common.length) : file;
  if (rest.length <= MAX_PATH_CHARS) return rest;
  const parts = rest.split("/");
  return parts.length > 2 ? `…/${parts.slice(-2).join("/")}` : rest;
}

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
  private common = "";
  private at: string; // the row (file:line) to bring back into view: the one left for the timeline
  /** file:line -> the findings raised there (kind, severity, and the op and argument when the finding names them), most severe first. */
  private findingsAt = new Map<string, { kind: string; severity: string; op: string; arg: string }[]>();

  constructor(private readonly run: string, params: URLSearchParams) {
    this.filter = h("input", { type: "search", placeholder: "filter: file, line, function, op, dtype…", class: "filter", "aria-label": "filter sites" });
    this.filter.value = params.get("q") ?? "";
    this.filter.addEventListener("input", () => {
      this.writeHash();
      this.render();
    });
    this.onlyMismatch = h("input", { type: "checkbox" });
    this.onlyMismatch.checked = params.get("only") === "mismatch";
    this.onlyMismatch.addEventListener("change", () => {
      this.writeHash();
      this.render();
    });
    const sort = params.get("sort");
    if (sort) this.sort = { key: sort as SortKey, desc: params.get("dir") !== "asc" };
    this.at = params.get("at") ?? "";
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

  /** The findings raised at a row's line, each a badge leading to them in the run's findings panel. */
  private findingBadges(s: SiteRow): HTMLElement | null {
    // A finding names its sites' op and argument where it has them: only those rows of the line.
    const kinds = new Map<string, string>();
    for (const f of this.findingsAt.get(`${s.file}:${s.line}`) ?? [])
      if ((!f.op || f.op === s.op) && (!f.arg || f.arg === String(s.arg ?? ""))) kinds.set(f.kind, f.severity);
    const here = [...kinds].map(([kind, severity]) => ({ kind, severity }));
    if (!here.length) return null;
    return h(
      "span",
      { class: "site-findings" },
      here.map((f) =>
        h("a", { class: `badge sev-${f.severity}`, href: hashFor("timeline", this.run, { findings: f.severity }), title: `${f.severity} finding at this line: ${f.kind}; open the run's findings` }, f.kind),
      ),
    );
  }

  private async load(): Promise<void> {
    try {
      const [{ sites }, findings] = await Promise.all([api.sites(this.run), api.findings(this.run).catch(() => null)]);
      this.rows = sites;
      this.findingsAt.clear();
      for (const f of findings?.findings ?? []) {
        if (!("sites" in f)) continue; // a finding whose details could not be read: no sites to mark
        for (const site of f.sites) {
          const key = `${site.file}:${site.line}`;
          const here = this.findingsAt.get(key) ?? [];
          if (!here.some((x) => x.kind === f.kind && x.op === site.op && x.arg === site.arg))
            here.push({ kind: f.kind, severity: f.severity, op: site.op, arg: site.arg });
          this.findingsAt.set(key, here);
        }
      }
      const seen = new Set<string>();
      for (const s of sites) for (const m of Object.keys(s.by_mode ?? {})) seen.add(m);
      this.modes = [...MODE_ORDER.filter((m) => seen.has(m)), ...[...seen].filter((m) => !MODE_ORDER.includes(m)).sort()];
      this.common = commonFolder(sites.map((s) => s.file));
      this.render();
      this.bringBack();
    } catch (e) {
      clear(this.table);
      this.table.appendChild(h("p", { class: "error" }, errorText(e)));
    }
  }

  /** The view's state in the hash, without a history entry. */
  private writeHash(): void {
    const sorted = this.sort.key !== "total" || !this.sort.desc;
    replaceHash(
      hashFor("sites", this.run, {
        q: this.filter.value,
        sort: sorted ? this.sort.key : undefined,
        dir: sorted ? (this.sort.desc ? "desc" : "asc") : undefined,
        only: this.onlyMismatch.checked ? "mismatch" : undefined,
        at: this.at,
      }),
    );
  }

  /** Leaving for a row's casts: the row goes in this entry's hash, so Back scrolls to it. */
  private leaveFor(s: SiteRow): void {
    this.at = `${s.file}:${s.line}`;
    this.writeHash();
  }

  /** Back from the timeline: the row left from, in view and marked. */
  private bringBack(): void {
    if (!this.at) return;
    const row = [...this.table.querySelectorAll<HTMLElement>("tbody tr")].find((r) => r.dataset.site === this.at);
    if (!row) return;
    row.classList.add("row-at");
    row.scrollIntoView({ block: "center" });
    row.querySelector<HTMLElement>("a.site-open")?.focus({ preventScroll: true });
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
        this.writeHash();
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
      const href = timelineHash(this.run, s);
      const open = h("a", { href, class: "site-open", title: `${s.file}:${s.line}: show its casts on the timeline` }, `${shortPath(s.file, this.common)}:${s.line}`);
      open.addEventListener("click", () => this.leaveFor(s));
      const tr = h(
        "tr",
        { class: `site-row ${s.mismatch ? "row-mismatch" : ""}`, "data-site": `${s.file}:${s.line}` },
        h("td", { class: "site" }, open, this.findingBadges(s)),
        h("td", null, s.function ?? ""),
        h("td", null, s.op ?? ""),
        h("td", null, String(s.arg ?? "")),
        h("td", { class: "num" }, fmtCount(s.total ?? 0)),
        h("td", { class: "num" }, fmtBytes(s.bytes ?? 0)),
        h("td", { class: "num" }, fmtCount(s.hits ?? 0)),
        h("td", { class: s.stale_hits ? "num bad" : "num" }, fmtCount(s.stale_hits ?? 0)),
        ...cells,
        h("td", { class: s.mismatch ? "bad" : "muted" }, s.mismatch ? "yes" : "no"),
      );
      // The whole row leads there (the link itself, for the keyboard and a new tab, is the file:line).
      tr.addEventListener("click", (e) => {
        if (e.target instanceof Element && e.target.closest("a, button, input")) return;
        if (window.getSelection()?.toString()) return; // selecting text is no click
        this.leaveFor(s);
        location.hash = href;
      });
      body.appendChild(tr);
    }
    clear(this.table);
    this.table.appendChild(h("table", { class: "grid" }, h("thead", null, head), body));
    if (!rows.length) this.table.appendChild(h("p", { class: "muted" }, this.rows.length ? "No site matches the filter." : "No sites in this run."));
  }

  destroy(): void {
    /* nothing pending */
  }
}
