// The detail panel: one event in full from /api/event, its fields in words
// (those that say nothing, such as an empty stack or the list index of an
// argument that is no list, left out), how stale a stale cache hit was, and
// the text of its source line.

import { type AgentId, api, type EventAnswer, isAbort } from "../api";
import { clear, h } from "../dom";
import { fmtBytes, fmtDuration, fmtShape } from "../format";
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
    const fields = ev as unknown as Record<string, unknown>;
    const stale = staleText(fields);
    for (const [k, v] of Object.entries(fields)) {
      if (k === "location" || (stale && (k === "source_version" || k === "cached_version"))) continue;
      const row = fieldRow(k, v);
      if (!row) continue;
      if (k === "cache" && stale) row[1] = stale;
      rows.appendChild(h("tr", null, h("th", null, row[0]), h("td", null, row[1])));
    }
    if (loc) {
      for (const [k, v] of Object.entries(loc)) {
        const row = k === "source" ? null : fieldRow(`location.${k}`, v);
        if (row) rows.appendChild(h("tr", null, h("th", null, row[0]), h("td", null, row[1])));
      }
    }
    this.body.appendChild(h("table", { class: "fields" }, rows));
  }

  destroy(): void {
    this.ctrl?.abort();
  }
}

const CACHE_WORDS: Record<string, string> = {
  miss: "miss: cast, and the copy cached",
  hit: "hit: the cached copy was used",
  stale_hit: "stale hit: the cached copy was used though its source had changed since",
  not_cacheable: "not cacheable",
};

/** A stale hit's line, with how many versions its copy is behind where the event has both versions; null otherwise. */
function staleText(ev: Record<string, unknown>): string | null {
  if (ev.cache !== "stale_hit") return null;
  const [src, cached] = [ev.source_version, ev.cached_version];
  if (typeof src !== "number" || typeof cached !== "number") return CACHE_WORDS.stale_hit;
  const behind = src - cached;
  return `stale hit: the cached copy is ${behind} version${behind === 1 ? "" : "s"} behind its source (source version ${src}, cached from version ${cached})`;
}

/** A field's row, [name, text]; null for one that says nothing: empty, or a list index of an argument that is no list. */
function fieldRow(k: string, v: unknown): [string, string] | null {
  if (v === null || v === undefined || v === "" || (Array.isArray(v) && v.length === 0)) return null;
  switch (k) {
    case "list_index":
      return typeof v === "number" && v < 0 ? null : ["list element", `element ${String(v)} of the list argument`];
    case "cache":
      return [k, CACHE_WORDS[String(v)] ?? String(v)];
    case "shape":
      return [k, fmtShape(v)];
    case "input_dtypes":
      return [k, Array.isArray(v) ? v.join(", ") : String(v)];
    case "location.stack":
      return ["call stack", Array.isArray(v) ? v.join("\n") : String(v)];
    case "location.also_consumed_at":
      return ["also consumed at", Array.isArray(v) ? v.join("\n") : String(v)];
    case "location.inside_disabled_autocast":
      return v === true ? ["autocast", "inside a region that disables autocast"] : null;
  }
  return [k, fieldText(k, v)];
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
