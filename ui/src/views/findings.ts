// Findings beside the timeline, grouped by severity; polled every 2 s while
// the run is live. A site jumps the timeline to its casts; a link opens it in
// the sites view.

import { ApiError, api, type Finding, isAbort, type ReportSite } from "../api";
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
  private stopped = false;
  private finalShown = false; // the list shown is a finished run's
  private wanted: string | null = null; // a severity to bring into view once rendered

  constructor(private readonly run: string, private readonly onJump: (site: ReportSite) => void) {
    this.head = h("span", { class: "muted" });
    this.list = h("div", { class: "findings-list" });
    this.el = h("section", { class: "findings", "aria-label": "findings" }, h("h2", null, "Findings ", this.head), this.list);
  }

  setLive(live: boolean): void {
    this.live = live;
    if (live && !this.timer) this.poll();
  }

  /** Brings a severity's group into view (the runs page links to it), now or once the findings are in. */
  reveal(severity: string): void {
    this.wanted = severity;
    this.showWanted();
  }

  private showWanted(): void {
    const group = this.wanted === null ? null : this.list.querySelector<HTMLElement>(`.sev-group.sev-${cssName(this.wanted)}`);
    if (!group) return;
    this.wanted = null;
    group.scrollIntoView({ block: "start" });
    group.querySelector<HTMLElement>("h3")?.focus({ preventScroll: true });
  }

  async refresh(): Promise<void> {
    if (this.stopped) return;
    this.ctrl?.abort();
    const ctrl = new AbortController();
    this.ctrl = ctrl;
    try {
      const { findings } = await api.findings(this.run, ctrl.signal);
      // A live run's list is "so far", a finished one's final: a change of either redraws.
      const json = `${this.live}${JSON.stringify(findings)}`;
      if (json !== this.lastJson) {
        this.lastJson = json;
        this.render(findings);
      }
    } catch (e) {
      if (isAbort(e) || this.stopped) return;
      // No answer at all while live: the run page checks whether its server is gone.
      if (this.live && !(e instanceof ApiError)) return;
      // The error replaces the list, so that it never sits above an outdated "no findings".
      this.lastJson = "";
      this.finalShown = false;
      this.head.textContent = "";
      this.list.replaceChildren(h("p", { class: "error" }, `Findings unavailable: ${errorText(e)}`));
    }
  }

  /** The server is gone (a job's own viewer stopped with it): no more asking, and the list says what it is. */
  serverGone(command: string): void {
    this.stopped = true;
    this.live = false;
    this.ctrl?.abort();
    window.clearTimeout(this.timer);
    if (this.finalShown) return;
    const shown = this.list.querySelector(".finding") !== null;
    this.head.textContent = shown ? "(while the job ran)" : "";
    const why = shown
      ? `These are the findings seen while the job ran; its viewer stopped before the run's final ones. ${command} shows them all.`
      : `The job's viewer stopped before the run's findings could be read: ${command} shows them.`;
    if (!shown) this.list.replaceChildren();
    this.list.prepend(h("p", { class: "muted findings-stopped" }, why));
  }

  private poll(): void {
    void this.refresh().finally(() => {
      if (this.live) this.timer = window.setTimeout(() => this.poll(), POLL_MS);
      else this.timer = 0;
    });
  }

  private render(findings: Finding[]): void {
    this.finalShown = !this.live;
    clear(this.list);
    this.head.textContent = findings.length ? `(${findings.length})` : "(none)";
    if (!findings.length) {
      this.list.appendChild(h("p", { class: "muted" }, this.live ? "No findings so far (the run is live)." : "No findings for this run."));
      return;
    }
    const known = new Set(SEVERITIES);
    const groups = [...SEVERITIES, ...new Set(findings.map((f) => f.severity).filter((s) => !known.has(s)))];
    for (const sev of groups) {
      const fs = findings.filter((f) => f.severity === sev);
      if (!fs.length) continue;
      const group = h("div", { class: `sev-group sev-${cssName(sev)}` }, h("h3", { tabindex: -1 }, `${sev} (${fs.length})`));
      for (const f of fs) group.appendChild(this.renderFinding(f));
      this.list.appendChild(group);
    }
    this.showWanted();
  }

  private renderFinding(f: Finding): HTMLElement {
    // A finding whose details the store could not read comes as its head only.
    const full = "sites" in f ? f : undefined;
    const sites = h("ul", { class: "sites" });
    for (const s of full?.sites ?? []) {
      const where = `${s.file}:${s.line}`;
      const jump = h("button", { type: "button", class: "linklike site-jump", title: "show this site's casts on the timeline" }, ...breakableAtSlashes(where));
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
      h("p", { class: "summary" }, ...breakableAtSlashes(f.summary)),
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

/** Text with a line-break opportunity after each "/" (a <wbr>): a long path wraps there, not mid-name. */
function breakableAtSlashes(path: string): (string | HTMLElement)[] {
  return path.split(/(?<=\/)/).flatMap((part, i) => (i ? [h("wbr"), part] : [part]));
}

function cssName(s: string): string {
  return s.toLowerCase().replace(/[^a-z0-9-]/g, "");
}
