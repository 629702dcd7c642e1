// The timeline's hover tooltip: a box of text lines (the first a title) put
// beside the pointer and kept inside the window, flipped to the pointer's
// other side where it would overflow. What the lines say is pick.ts's; when
// it shows and hides is the input's (input.ts).

import { h } from "../dom";

export class Tooltip {
  readonly el: HTMLElement = h("div", { class: "tooltip", role: "tooltip", hidden: true });

  /** Shows `lines` beside the pointer at (clientX, clientY). */
  show(lines: string[], clientX: number, clientY: number): void {
    const tt = this.el;
    tt.replaceChildren(...lines.map((line, i) => h("div", { class: i === 0 ? "tt-title" : "tt-line" }, line)));
    tt.hidden = false;
    const pad = 14;
    const w = tt.offsetWidth;
    const hh = tt.offsetHeight;
    let left = clientX + pad;
    let top = clientY + pad;
    if (left + w > window.innerWidth - 4) left = clientX - pad - w;
    if (top + hh > window.innerHeight - 4) top = clientY - pad - hh;
    tt.style.left = `${Math.max(4, left)}px`;
    tt.style.top = `${Math.max(4, top)}px`;
  }

  hide(): void {
    this.el.hidden = true;
  }
}
