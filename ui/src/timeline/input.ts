// The timeline's mouse and keyboard input: the wheel zooms around the
// pointer (or pans, when it scrolls sideways), a drag pans, +/- zoom, arrows
// pan, 0 frames the training (Shift+0 the whole run), / goes to the filter,
// n to the next matching cast (N the previous), ? opens the keyboard help and Escape hides the
// tooltip and the help; hovering shows the
// tooltip for what is under the pointer, a click (a press without a drag)
// selects an event or opens a numerics mark's notes. It keeps only the drag
// in progress: the range, zoom and selection are the view's (InputTarget).

import type { AgentId } from "../api";
import { GUTTER } from "./layout";
import { markNote, type NoteBlock, skipNote } from "./notes";
import type { KeyboardHelp } from "./help";
import type { Picked } from "./pick";
import type { Tooltip } from "./tooltip";

/** What input drives: the view's range, what is under a point, and what a click opens. */
export interface InputTarget {
  /** The lanes canvas's width, CSS px, the gutter included. */
  width(): number;
  range(): { t0: number; t1: number };
  zoomBy(factor: number, atX?: number): void;
  panBy(fraction: number): void;
  setRange(t0: number, t1: number): void;
  fit(): void;
  wholeRun(): void;
  focusSearch(): void;
  /** `dir` -1: the previous match. */
  nextMatch(dir: 1 | -1): void;
  /** What is under (x, y), canvas CSS px. */
  pick(x: number, y: number): Picked | null;
  /** Marks an event selected on the timeline. */
  select(sel: { agent: AgentId; seq: number }): void;
  /** Opens an event in the detail panel (TimelineCallbacks.select). */
  open(agent: AgentId, seq: number, kind: string): void;
  /** Shows a numerics mark's or skipped step's notes (TimelineCallbacks.note). */
  note(blocks: NoteBlock[]): void;
}

export class TimelineInput {
  private drag: { x: number; t0: number; t1: number; moved: boolean } | null = null;

  /** Binds the wheel on both canvases, the pointer on the lanes and the keys on the document (until detach()). */
  constructor(
    private readonly canvas: HTMLCanvasElement,
    private readonly axis: HTMLCanvasElement,
    private readonly tooltip: Tooltip,
    private readonly help: KeyboardHelp,
    private readonly target: InputTarget,
  ) {
    this.bindInput();
  }

  detach(): void {
    document.removeEventListener("keydown", this.onKey);
  }

  private localX(e: MouseEvent): { x: number; y: number } {
    const r = this.canvas.getBoundingClientRect();
    return { x: e.clientX - r.left, y: e.clientY - r.top };
  }

  private bindInput(): void {
    const c = this.canvas;
    c.addEventListener(
      "wheel",
      (e) => {
        e.preventDefault();
        const { x } = this.localX(e);
        if (Math.abs(e.deltaX) > Math.abs(e.deltaY)) {
          this.target.panBy(e.deltaX / Math.max(1, this.target.width() - GUTTER));
          return;
        }
        const unit = e.deltaMode === 1 ? 33 : e.deltaMode === 2 ? 400 : 1;
        this.target.zoomBy(Math.exp(e.deltaY * unit * 0.0015), Math.max(x, GUTTER));
      },
      { passive: false },
    );
    this.axis.addEventListener(
      "wheel",
      (e) => {
        e.preventDefault();
        const r = this.axis.getBoundingClientRect();
        this.target.zoomBy(Math.exp(e.deltaY * 0.0015), Math.max(e.clientX - r.left, GUTTER));
      },
      { passive: false },
    );
    c.addEventListener("pointerdown", (e) => {
      if (e.button !== 0) return;
      const { t0, t1 } = this.target.range();
      this.drag = { x: e.clientX, t0, t1, moved: false };
      c.setPointerCapture(e.pointerId);
    });
    c.addEventListener("pointermove", (e) => {
      const d = this.drag;
      if (d) {
        const dx = e.clientX - d.x;
        if (Math.abs(dx) > 3) d.moved = true;
        if (d.moved) {
          const dt = (dx / Math.max(1, this.target.width() - GUTTER)) * (d.t1 - d.t0);
          this.tooltip.hide();
          c.classList.add("dragging");
          this.target.setRange(d.t0 - dt, d.t1 - dt);
          return;
        }
      }
      this.hover(e);
    });
    c.addEventListener("pointerup", (e) => {
      const d = this.drag;
      this.drag = null;
      c.classList.remove("dragging");
      if (d && !d.moved) this.click(e);
    });
    c.addEventListener("pointerleave", () => this.tooltip.hide());
    document.addEventListener("keydown", this.onKey);
  }

  private onKey = (e: KeyboardEvent): void => {
    const t = e.target as HTMLElement | null;
    if (t && (t.tagName === "INPUT" || t.tagName === "TEXTAREA" || t.tagName === "SELECT" || t.isContentEditable)) return;
    if (e.ctrlKey || e.metaKey || e.altKey) return;
    // Shift+0 by the key's place: its character differs between keyboard layouts.
    if (e.code === "Digit0" && e.shiftKey) {
      this.target.wholeRun();
      e.preventDefault();
      return;
    }
    switch (e.key) {
      case "+":
      case "=":
        this.target.zoomBy(0.5);
        break;
      case "-":
      case "_":
        this.target.zoomBy(2);
        break;
      case "ArrowLeft":
        this.target.panBy(-0.2);
        break;
      case "ArrowRight":
        this.target.panBy(0.2);
        break;
      case "0":
        this.target.fit();
        break;
      case "/":
        this.target.focusSearch();
        break;
      case "n":
        this.target.nextMatch(1);
        break;
      case "N":
        this.target.nextMatch(-1);
        break;
      case "Escape":
        this.tooltip.hide();
        this.help.close();
        break;
      case "?":
        this.help.toggle();
        break;
      default:
        return;
    }
    e.preventDefault();
  };

  private hover(e: PointerEvent): void {
    const { x, y } = this.localX(e);
    const p = x > GUTTER ? this.target.pick(x, y) : null;
    if (!p) {
      this.tooltip.hide();
      this.canvas.classList.remove("pointing");
      return;
    }
    this.canvas.classList.toggle("pointing", p.target !== null);
    this.tooltip.show(p.text, e.clientX, e.clientY);
  }

  private click(e: PointerEvent): void {
    const { x, y } = this.localX(e);
    const p = x > GUTTER ? this.target.pick(x, y) : null;
    if (!p || !p.target) return;
    const t = p.target;
    if (t.kind === "cast") {
      this.target.select({ agent: t.cast.agent_id, seq: t.cast.seq });
      this.target.open(t.cast.agent_id, t.cast.seq, "cast");
    } else if (t.kind === "numerics") {
      this.target.note(t.marks.map(markNote));
    } else if (t.kind === "skip") {
      this.target.note([skipNote(t.series, t.point, t.before)]);
    } else {
      this.target.select({ agent: t.agent, seq: t.seq });
      this.target.open(t.agent, t.seq, t.kind);
    }
  }
}
