// Live (#/live): waits for a live run that is receiving events, then opens
// the newest one's timeline. Opened before a job starts, the page follows it
// from its first batch without anyone choosing the run (docs/viewer.md,
// "Following the next run").

import type { Run } from "../api";
import { h } from "../dom";
import { errorText } from "../notice";
import { hashFor } from "../router";
import { RunsPoll, runsPage } from "./runs-poll";

// The runs list is one small query; twice a second puts the job's first
// casts on screen within half a second of the run's first batch.
const POLL_MS = 500;

/**
 * The newest live run (by first seen) that is new since `before` (run id ->
 * last seen, the live runs when the page started waiting) or was seen again
 * since; null when none. A run whose job was killed stays live in the store
 * (its agents never sent their last batch) but is never seen again, so the
 * page does not open it.
 */
export function newestReceivingRun(runs: Run[], before: Map<string, string>): Run | null {
  let newest: Run | null = null;
  for (const r of runs) {
    if (!r.live || before.get(r.run_id) === r.last_seen_unix_ns) continue;
    if (newest === null || BigInt(r.first_seen_unix_ns) > BigInt(newest.first_seen_unix_ns)) newest = r;
  }
  return newest;
}

export class LiveRunView {
  readonly el: HTMLElement;
  private status: HTMLElement;
  private poll: RunsPoll;
  private before: Map<string, string> | null = null; // newestReceivingRun's, from the first answer

  constructor() {
    this.status = h("p", { class: "muted live-wait-status" }, "looking for a live run…");
    this.el = runsPage(
      "live-wait",
      "Waiting for a live run",
      "This page opens the timeline of the newest live run in this store as soon as one sends events: start a job under castscope with this collector (castscope run --collector ADDRESS -- python train.py).",
      this.status,
    );
    this.poll = new RunsPoll(POLL_MS, (runs) => this.answered(runs), (e) => {
      this.status.className = "error live-wait-status";
      this.status.textContent = `${errorText(e)}; trying again`;
      return true;
    });
  }

  /** Opens the run to follow once there is one; until then says why none is, and asks again. */
  private answered(runs: Run[]): boolean {
    // A run already live when the page opened counts once it is seen again (its next batch).
    if (this.before === null) {
      this.before = new Map(runs.filter((r) => r.live).map((r) => [r.run_id, r.last_seen_unix_ns]));
    } else {
      const run = newestReceivingRun(runs, this.before);
      if (run) {
        // No history entry: Back leads to where the page was opened from.
        location.replace(hashFor("timeline", run.run_id));
        return false;
      }
    }
    const silent = runs.filter((r) => r.live).length;
    this.status.className = "muted live-wait-status";
    this.status.textContent =
      runs.length === 0
        ? "No runs in this store yet."
        : silent === 0
          ? `No run is live (${runs.length} finished in this store).`
          : `${silent} run${silent === 1 ? " is" : "s are"} marked live but sent nothing since this page opened (a job killed before its end stays so); waiting for one that does.`;
    return true;
  }

  destroy(): void {
    this.poll.stop();
  }
}
