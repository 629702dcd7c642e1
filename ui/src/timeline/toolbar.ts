// The bar above the timeline: zoom, pan, fit (the training) and whole-run
// buttons (each with its key in the title), the "follow live" checkbox, a
// button to clear the highlighted site, one for the keyboard help, the
// filter's search box with its count of matches, the view's status text and
// the legend of marks, colours and the density view's bars and strips. It
// holds no state: the buttons call the view (ToolbarActions), and the view
// sets the checkbox, the count and the status text it is handed back.

import { h } from "../dom";
import "../styles/timeline.css";

export interface ToolbarActions {
  zoomBy(factor: number): void;
  panBy(fraction: number): void;
  fit(): void;
  wholeRun(): void;
  setFilter(text: string): void;
  /** `dir` -1: the previous match. */
  nextMatch(dir: 1 | -1): void;
  setFollow(on: boolean): void;
  clearHighlights(): void;
  showHelp(): void;
}

export interface Toolbar {
  el: HTMLElement;
  /** The "follow live" checkbox, which the view keeps in step with its follow state. */
  followBox: HTMLInputElement;
  /** Where the view writes its status ("live · following", "loading…", ...). */
  statusEl: HTMLElement;
  /** The filter's text box (/ focuses it). */
  searchBox: HTMLInputElement;
  /** Where the view writes how many casts in view match. */
  searchCount: HTMLElement;
}

export function timelineToolbar(a: ToolbarActions): Toolbar {
  const followBox = h("input", { type: "checkbox", id: "follow" });
  followBox.addEventListener("change", () => a.setFollow(followBox.checked));
  const statusEl = h("span", { class: "tl-status" });
  const searchBox = h("input", {
    type: "search",
    class: "tl-search",
    placeholder: "filter: op, file:line, float32->bf16, role:weight…",
    "aria-label": "filter casts",
    title: "terms all casts drawn in full must match: an op, file:line, a dtype pair (float32->bfloat16), role:, maker:, cache:, mode:, module: … (/ to focus, Enter or n: next match, Shift+Enter or N: previous, Esc: leave)",
    spellcheck: false,
    autocomplete: "off",
  });
  searchBox.addEventListener("input", () => a.setFilter(searchBox.value));
  searchBox.addEventListener("keydown", (e) => {
    if (e.key === "Enter") {
      e.preventDefault();
      a.setFilter(searchBox.value);
      a.nextMatch(e.shiftKey ? -1 : 1);
    } else if (e.key === "Escape") {
      searchBox.blur();
    }
  });
  const searchCount = h("span", { class: "tl-search-count", "aria-live": "polite" });
  const btn = (label: string, title: string, fn: () => void) =>
    h("button", { type: "button", title, onclick: () => fn() }, label);
  const el = h(
    "div",
    { class: "toolbar" },
    btn("−", "zoom out (-)", () => a.zoomBy(2)),
    btn("+", "zoom in (+)", () => a.zoomBy(0.5)),
    btn("◀", "pan left (←)", () => a.panBy(-0.25)),
    btn("▶", "pan right (→)", () => a.panBy(0.25)),
    btn("Fit", "frame the training: where the casts are (0)", () => a.fit()),
    btn("Whole run", "the whole process, its start and end included (Shift+0)", () => a.wholeRun()),
    h("label", { class: "follow", title: "keep the newest events in view" }, followBox, " follow live"),
    btn("Clear highlight", "clear highlighted site", () => a.clearHighlights()),
    btn("?", "keyboard shortcuts (?)", () => a.showHelp()),
    h("span", { class: "tl-search-group" }, searchBox, btn("Prev", "previous matching cast (Shift+Enter, N)", () => a.nextMatch(-1)), btn("Next", "next matching cast (Enter, n)", () => a.nextMatch(1)), searchCount),
    statusEl,
    legend(),
  );
  return { el, followBox, statusEl, searchBox, searchCount };
}

function legend(): HTMLElement {
  // Small static swatches drawn with canvas-free DOM: the colours are CSS classes.
  const item = (cls: string, label: string, title?: string) =>
    h("span", { class: "lg-item", title }, h("span", { class: `lg ${cls}` }), label);
  return h(
    "span",
    { class: "legend" },
    item("lg-bf16", "→bf16"),
    item("lg-fp16", "→fp16"),
    item("lg-fp32", "→fp32"),
    item("lg-skip", "not cast"),
    item("lg-tri", "weight"),
    item("lg-sq", "input"),
    item("lg-circ", "activation"),
    item("lg-miss", "miss"),
    item("lg-hit", "hit"),
    item("lg-stale", "stale hit", "a cast-cache hit whose source changed after its copy was cached"),
    item("lg-halo", "highlighted site", "the casts of the site picked in the findings or sites view"),
    h(
      "span",
      { class: "lg-item", title: "S script, T traced, TR trace recording, ST script while tracing, CT compiling, C compiled" },
      h("span", { class: "lg-badges" }, h("b", { class: "lg-badge-s" }, "S"), h("b", { class: "lg-badge-t" }, "T")),
      "op not run eagerly",
    ),
    item("lg-back", "backward"),
    item("lg-skipped", "step skipped"),
    item("lg-numerics", "inf/NaN, overflow"),
    item("lg-underflow", "underflow"),
    item("lg-loss", "events lost", "a process's events the agent dropped (its ring full, or a thread without a ring) or batches lost in transport: a hatched band on its header row where they were lost (hover for how many)"),
    h(
      "span",
      { class: "lg-group", title: "zoomed out, a lane shows its casts counted per time bucket instead of one mark each" },
      "density view:",
      item("lg-bar", "bar height: √ cast decisions in bucket", "the tallest bar is the busiest bucket in and around the view (ops where a bucket has no cast decision; on a GPU lane, kernel time); its colour is the bucket's most common target dtype"),
      item("lg-stale-strip", "stale hits in bucket"),
      item("lg-mode-strip", "not eager in bucket", "coloured as the mode's badge"),
    ),
  );
}
