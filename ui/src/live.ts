// The live feed: /api/live as Server-Sent Events. `batch` carries the newest
// casts of each committed batch; `skipped` says the server dropped some pushes
// for this viewer (the events are stored; the page refetches).

import type { AgentId, Cast } from "./api";
import { stats } from "./stats";

export interface LiveBatch {
  run_id: string;
  agent_id: AgentId;
  t_max: number;
  events: number;
  casts: Cast[];
}

export interface LiveHandlers {
  batch(b: LiveBatch): void;
  skipped(events: number): void;
  state(s: "connecting" | "open" | "error" | "closed"): void;
}

export class LiveFeed {
  private es: EventSource | null = null;

  constructor(private readonly run: string, private readonly on: LiveHandlers) {}

  open(): void {
    if (this.es) return;
    this.on.state("connecting");
    const es = new EventSource(`/api/live?run=${encodeURIComponent(this.run)}`);
    this.es = es;
    es.addEventListener("open", () => {
      stats.liveOpens++;
      this.on.state("open");
    });
    es.addEventListener("error", () => {
      stats.liveErrors++;
      this.on.state(es.readyState === EventSource.CLOSED ? "closed" : "error");
    });
    es.addEventListener("batch", (ev) => {
      try {
        stats.lastBatchAt = performance.now();
        this.on.batch(JSON.parse((ev as MessageEvent<string>).data) as LiveBatch);
      } catch (e) {
        console.warn("castscope: bad live batch", e);
      }
    });
    es.addEventListener("skipped", (ev) => {
      try {
        const d = JSON.parse((ev as MessageEvent<string>).data) as { events: number };
        this.on.skipped(Number(d.events) || 0);
      } catch (e) {
        console.warn("castscope: bad skipped event", e);
      }
    });
  }

  close(): void {
    this.es?.close();
    this.es = null;
    this.on.state("closed");
  }
}
