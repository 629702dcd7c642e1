// Live (#/live): waits for a live run, then opens the newest one's timeline.
// Opened before a job starts, the page follows it from its first batch
// without anyone choosing the run (docs/viewer.md, "Following the next run").

import { api, type Run } from "../api";
import { h } from "../dom";
import { errorText } from "../notice";
import { hashFor } from "../router";

// The runs list is one small query; twice a second puts the job's first
// casts on screen within half a second of the run's first batch.
const POLL_MS = 500;

/** The newest live run (by first seen), or null. */
export function newestLiveRun(runs: Run[]): Run | null {
  let newest: Run | null = null;
  for (const r of runs) if (r.live && (newest === null || BigInt(r.first_seen_unix_ns) > BigInt(newest.first_seen_unix_ns))) newest = r;
  return newest;
}

export class LiveRunView {
  readonly el: HTMLElement;
  private status: HTMLElement;
  private timer = 0;
  private destroyed = false;

  constructor() {
    this.status = h("p", { class: "muted live-wait-status" }, "looking for a live run…");
    this.el = h(
      "section",
      { class: "live-wait page" },
      h("h1", null, "Waiting for a live run"),
      h("p", { class: "note muted" }, "This page opens the timeline of the newest live run in this store as soon as there is one: start a job under castscope with this collector (castscope run --collector ADDRESS -- python train.py)."),
      this.status,
    );
    void this.poll();
  }

  private async poll(): Promise<void> {
    try {
      const { runs } = await api.runs();
      if (this.destroyed) return;
      const live = newestLiveRun(runs);
      if (live) {
        // No history entry: Back leads to where the page was opened from.
        location.replace(hashFor("timeline", live.run_id));
        return;
      }
      this.status.className = "muted live-wait-status";
      this.status.textContent = runs.length === 0 ? "No runs in this store yet." : `No run is live (${runs.length} finished in this store).`;
    } catch (e) {
      if (this.destroyed) return;
      this.status.className = "error live-wait-status";
      this.status.textContent = `${errorText(e)}; trying again`;
    }
    this.timer = window.setTimeout(() => void this.poll(), POLL_MS);
  }

  destroy(): void {
    this.destroyed = true;
    window.clearTimeout(this.timer);
  }
}
