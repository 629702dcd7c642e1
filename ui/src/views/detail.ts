// The detail panel: one event in full from /api/event, every field, and the
// text of its source line.

import { type AgentId, api, type EventAnswer, isAbort } from "../api";
import { clear, h } from "../dom";
import { fmtBytes, fmtDuration } from "../format";
import { errorText } from "../notice";
import type { NoteBlock } from "../timeline/notes";

export class DetailPanel {
  readonly el: HTMLElement;
  private body: HTMLElement;
  private ctrl: AbortController | null = null;

  constructor(private readonly run: string, onClose: () => void) {
    this.body = h("div", { class: "detail-body" });
    const close = h("button", { type: "button", class: "close", title: "close", "aria-label": "close details" }, "×");
    close.addEventListener("click", () => {
      this.el.hidden = true;
      onClose();
    });
    this.el = h("section", { class: "detail", "aria-label": "event details", hidden: true }, h("h2", null, "Event ", close), this.body);
  }

  async show(agent: AgentId, seq: number): Promise<void> {
    this.ctrl?.abort();
    const ctrl = new AbortController();
    this.ctrl = ctrl;
    this.el.hidden = false;
    clear(this.body);
    this.body.appendChild(h("p", { class: "muted" }, `loading agent ${agent} seq ${seq}…`));
    try {
      const ev = await api.event(this.run, agent, seq, ctrl.signal);
      if (ctrl.signal.aborted) return;
      this.render(ev);
    } catch (e) {
      if (isAbort(e)) return;
      clear(this.body);
      this.body.appendChild(h("p", { class: "error" }, errorText(e)));
    }
  }

  /** Text the timeline composed (numerics marks, a skipped step), each block with its fields; no request. */
  showNote(blocks: NoteBlock[]): void {
    this.ctrl?.abort();
    this.ctrl = null;
    this.el.hidden = false;
    clear(this.body);
    for (const b of blocks) {
      const rows = h("tbody");
      for (const [k, v] of b.fields) rows.appendChild(h("tr", null, h("th", null, k), h("td", null, fieldText(k, v))));
      const open = b.event;
      this.body.appendChild(
        h(
          "div",
          { class: "note-block" },
          h("p", { class: "note-title" }, b.title),
          b.lines.map((line) => h("p", { class: "note-line" }, line)),
          open ? h("button", { type: "button", class: "note-event", onclick: () => void this.show(open.agent, open.seq) }, `show ${open.label}`) : null,
          h("table", { class: "fields" }, rows),
        ),
      );
    }
  }

  private render(ev: EventAnswer): void {
    clear(this.body);
    const loc = "location" in ev ? ev.location : undefined;
    if (loc) {
      this.body.appendChild(
        h(
          "div",
          { class: "source-block" },
          h("div", { class: "source-where" }, `${loc.file}:${loc.line}`, loc.function ? h("span", { class: "muted" }, ` in ${loc.function}`) : null),
          loc.source !== null && loc.source !== undefined
            ? h("pre", { class: "source-line" }, h("span", { class: "lineno" }, `${loc.line} `), loc.source)
            : h("p", { class: "muted" }, "(the agent read no source text for this line)"),
        ),
      );
    }
    const rows = h("tbody");
    for (const [k, v] of Object.entries(ev)) {
      if (k === "location") continue;
      rows.appendChild(h("tr", null, h("th", null, k), h("td", null, fieldText(k, v))));
    }
    if (loc) for (const [k, v] of Object.entries(loc)) if (k !== "source") rows.appendChild(h("tr", null, h("th", null, `location.${k}`), h("td", null, fieldText(k, v))));
    this.body.appendChild(h("table", { class: "fields" }, rows));
  }

  destroy(): void {
    this.ctrl?.abort();
  }
}

function fieldText(k: string, v: unknown): string {
  if (v === null || v === undefined) return "—";
  if (typeof v === "number") {
    if (k === "dur") return `${v} ns (${fmtDuration(v)})`;
    if (k === "bytes") return `${v} (${fmtBytes(v)})`;
    if (k === "ts") return `${v} ns (${fmtDuration(v)})`;
    return String(v);
  }
  if (typeof v === "string") return v;
  return JSON.stringify(v);
}
