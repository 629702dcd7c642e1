// Findings beside the timeline, grouped by severity; polled every 2 s while
// the run is live. A site jumps the timeline to its casts; a link opens it in
// the sites view.

import { api, type Finding, isAbort, type ReportSite } from "../api";
import { clear, h } from "../dom";
import { errorText } from "../notice";
import { hashFor } from "../router";

const SEVERITIES = ["critical", "error", "warning", "info"];
const POLL_MS = 2000;

export class FindingsPanel {
  readonly el: HTMLElement;
  private list: HTMLElement;
  private head: HTMLElement;
  private timer = 0;
  private ctrl: AbortController | null = null;
  private lastJson = "";
  private live = false;

  constructor(private readonly run: string, private readonly onJump: (site: ReportSite) => void) {
    this.head = h("span", { class: "muted" });
    this.list = h("div", { class: "findings-list" });
    this.el = h("section", { class: "findings", "aria-label": "findings" }, h("h2", null, "Findings ", this.head), this.list);
  }

  setLive(live: boolean): void {
    this.live = live;
    if (live && !this.timer) this.poll();
  }

  async refresh(): Promise<void> {
    this.ctrl?.abort();
    const ctrl = new AbortController();
    this.ctrl = ctrl;
    try {
      const { findings } = await api.findings(this.run, ctrl.signal);
      const json = JSON.stringify(findings);
      if (json !== this.lastJson) {
        this.lastJson = json;
        this.render(findings);
      }
    } catch (e) {
      if (isAbort(e)) return;
      this.head.textContent = `(unavailable: ${errorText(e)})`;
    }
  }

  private poll(): void {
    void this.refresh().finally(() => {
      if (this.live) this.timer = window.setTimeout(() => this.poll(), POLL_MS);
      else this.timer = 0;
    });
  }

  private render(findings: Finding[]): void {
    clear(this.list);
    this.head.textContent = findings.length ? `(${findings.length})` : "(none)";
    if (!findings.length) {
      this.list.appendChild(h("p", { class: "muted" }, "No findings for this run."));
      return;
    }
    const known = new Set(SEVERITIES);
    const groups = [...SEVERITIES, ...new Set(findings.map((f) => f.severity).filter((s) => !known.has(s)))];
    for (const sev of groups) {
      const fs = findings.filter((f) => f.severity === sev);
      if (!fs.length) continue;
      const group = h("div", { class: `sev-group sev-${cssName(sev)}` }, h("h3", null, `${sev} (${fs.length})`));
      for (const f of fs) group.appendChild(this.renderFinding(f));
      this.list.appendChild(group);
    }
  }

  private renderFinding(f: Finding): HTMLElement {
    // A finding whose details the store could not read comes as its head only.
    const full = "sites" in f ? f : undefined;
    const sites = h("ul", { class: "sites" });
    for (const s of full?.sites ?? []) {
      const where = `${s.file}:${s.line}`;
      const jump = h("button", { type: "button", class: "linklike site-jump", title: "show this site's casts on the timeline" }, where);
      jump.addEventListener("click", () => this.onJump(s));
      const what = [s.function, s.op, s.arg !== undefined && s.arg !== null && s.arg !== "" ? `arg ${s.arg}` : ""].filter(Boolean).join(" · ");
      sites.appendChild(
        h(
          "li",
          null,
          jump,
          what ? h("span", { class: "muted" }, ` ${what} `) : " ",
          h("a", { href: hashFor("sites", this.run, { q: where }), class: "site-link", title: "open in the sites view" }, "sites ↗"),
        ),
      );
    }
    const details = h("details", null, h("summary", null, "why and how to fix"));
    if (full?.explanation) details.appendChild(h("p", null, full.explanation));
    if (full?.fix) details.appendChild(h("p", null, h("strong", null, "Fix: "), full.fix));
    if (full?.evidence !== undefined) details.appendChild(h("pre", { class: "evidence" }, JSON.stringify(full.evidence, null, 2)));
    return h(
      "article",
      { class: "finding", "data-kind": f.kind, "data-severity": f.severity },
      h("div", { class: "finding-head" }, h("span", { class: `badge sev-${cssName(f.severity)}` }, f.severity), " ", h("code", null, f.kind)),
      h("p", { class: "summary" }, f.summary),
      sites,
      full?.explanation || full?.fix || full?.evidence !== undefined ? details : null,
    );
  }

  destroy(): void {
    this.live = false;
    this.ctrl?.abort();
    window.clearTimeout(this.timer);
  }
}

function cssName(s: string): string {
  return s.toLowerCase().replace(/[^a-z0-9-]/g, "");
}
