// What the two pages over the runs list share, Runs (#/) and Live (#/live):
// their frame and their poll of /api/runs.

import { api, type Run } from "../api";
import { h } from "../dom";

/** A page over the runs list: its heading, a note on what it shows, then its body. */
export function runsPage(cls: string, title: string, note: string, body: HTMLElement): HTMLElement {
  return h("section", { class: `${cls} page` }, h("h1", null, title), h("p", { class: "note muted" }, note), body);
}

/**
 * Asks for the runs list at once, then again `ms` after each answer for as
 * long as `onRuns` (or, when the request or `onRuns` failed, `onError`)
 * returns true. After stop(), no answer is passed on and none is asked for.
 */
export class RunsPoll {
  private timer = 0;
  private stopped = false;

  constructor(
    private readonly ms: number,
    private readonly onRuns: (runs: Run[]) => boolean,
    private readonly onError: (e: unknown) => boolean,
  ) {
    void this.poll();
  }

  private async poll(): Promise<void> {
    let again: boolean;
    try {
      const { runs } = await api.runs();
      if (this.stopped) return;
      again = this.onRuns(runs);
    } catch (e) {
      if (this.stopped) return;
      again = this.onError(e);
    }
    if (again && !this.stopped) this.timer = window.setTimeout(() => void this.poll(), this.ms);
  }

  stop(): void {
    this.stopped = true;
    window.clearTimeout(this.timer);
  }
}
