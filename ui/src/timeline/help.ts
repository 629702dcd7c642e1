// The timeline's keyboard help: an overlay listing what the mouse and keys
// do (input.ts), opened with ? or the toolbar's ? button, closed with Escape,
// ? again or its close button.

import { h } from "../dom";

const SHORTCUTS: [string, string][] = [
  ["wheel", "zoom in or out around the pointer"],
  ["sideways wheel", "pan"],
  ["drag", "pan"],
  ["+  or  =", "zoom in"],
  ["−  or  _", "zoom out (up to the whole run)"],
  ["←  →", "pan left, right"],
  ["0", "fit: the training (where the casts are)"],
  ["Shift+0", "the whole run"],
  ["/", "filter casts: op, file:line, float32->bfloat16, role:weight, maker:explicit…"],
  ["Enter  or  n", "next cast that matches the filter"],
  ["Shift+Enter  or  N", "previous matching cast"],
  ["hover", "what is under the pointer"],
  ["click", "details of a cast, op or kernel; the notes of a numerics mark"],
  ["Esc", "hide the tooltip, close this help"],
  ["?", "this help"],
];

export class KeyboardHelp {
  readonly el: HTMLElement;

  constructor() {
    const close = h("button", { type: "button", class: "close", "aria-label": "close keyboard help", onclick: () => this.close() }, "×");
    this.el = h(
      "div",
      { class: "kbd-help", role: "dialog", "aria-label": "keyboard shortcuts", hidden: true },
      h("h2", null, "Timeline keys and mouse ", close),
      h("table", null, h("tbody", null, SHORTCUTS.map(([key, what]) => h("tr", null, h("th", null, h("kbd", null, key)), h("td", null, what))))),
    );
  }

  get isOpen(): boolean {
    return !this.el.hidden;
  }

  open(): void {
    this.el.hidden = false;
  }

  close(): void {
    this.el.hidden = true;
  }

  toggle(): void {
    this.el.hidden = !this.el.hidden;
  }
}
