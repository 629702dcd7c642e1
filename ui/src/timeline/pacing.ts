// When the timeline paints, and when a live view asks the collector again.
// FramePacer coalesces painting to one frame per animation frame, paints
// pushed casts at most every LIVE_PAINT_MS, and under heavy ingest (a pushed
// message of BUSY_LIVE_EVENTS or more) at most every BUSY_LIVE_PAINT_MS, with
// the answers that input did not ask for; input paints at once.
// LiveRefetchPacer refetches a live view at most every LIVE_REFETCH_MS, never
// two at once. Both exist because a page following a live run draws on the
// cores of the collector it watches (docs/performance.md).

import { logPush, stats } from "../stats";

// At most 1 refetch a second while following: pushed casts are drawn at
// once; the refetch only refreshes the density behind them, and each costs
// the collector a query and the page an answer to parse and a frame (two
// pages at 2 a second kept ingest on 2 cores further below none).
const LIVE_REFETCH_MS = 1000;
// At most 10 frames a second for pushed casts. A live run pushes up to 20
// messages a second per agent (10 under heavy ingest); left to
// requestAnimationFrame alone, a page following it draws a frame for most of
// them (every lane redrawn), on the cores of the collector it watches. Input
// still paints at once. Adds at most this much (and one animation frame) to a
// pushed cast's time to the screen.
const LIVE_PAINT_MS = 100;
// Under heavy ingest (one agent's pushed message of BUSY_LIVE_EVENTS or more,
// the collector's own threshold: ~50-100 k events/s per agent), the page
// draws at most 5 frames a second until a second after the last such message:
// pushed casts and the answers input did not ask for (requestDataPaint) wait
// for the next of them; input paints at once. The page then shows density bars, and
// each frame costs Chromium ~5 ms of CPU here, on the cores of the collector
// it watches (docs/performance.md, "A following page under heavy ingest").
// The live target's 30 k events/s never reaches it.
const BUSY_LIVE_EVENTS = 5_000;
const BUSY_LIVE_PAINT_MS = 200;
const BUSY_HOLD_MS = 1000;

/** Schedules the view's paint: at the next animation frame, or later for pushed casts and under heavy ingest. */
export class FramePacer {
  private rafId = 0;
  private busyUntil = 0; // performance.now() until which pushed casts paint at most every BUSY_LIVE_PAINT_MS
  private livePaintTimer = 0;
  private lastPaintAt = -Infinity;

  /** `paint` draws the frame (and calls painting() first); nothing is scheduled once `stopped()`. */
  constructor(private readonly paint: () => void, private readonly stopped: () => boolean) {}

  /** A pushed message of `events` events came at `now`: BUSY_LIVE_EVENTS or more starts or extends heavy ingest. */
  noteBatch(events: number, now: number): void {
    if (events >= BUSY_LIVE_EVENTS) {
      this.busyUntil = now + BUSY_HOLD_MS;
      logPush(stats.busyLog, now);
    }
  }

  /** Whether the run was under heavy ingest at `now` (performance.now()). */
  busy(now: number): boolean {
    return now < this.busyUntil;
  }

  requestPaint(): void {
    if (this.rafId || this.stopped()) return;
    this.rafId = requestAnimationFrame(() => {
      this.rafId = 0;
      this.paint();
    });
  }

  /**
   * A frame for data that came by itself (a live refetch's answer, the lanes
   * or numerics polled while live; anything but an answer input asked for):
   * at the next animation frame, but under heavy ingest at the pushed casts'
   * pace, so that it shares their frame instead of adding one. Input, and
   * the answers it asked for, paint at once.
   */
  requestDataPaint(): void {
    if (performance.now() < this.busyUntil) this.requestLivePaint();
    else this.requestPaint();
  }

  /**
   * A frame for pushed casts: at the next animation frame, or LIVE_PAINT_MS
   * (BUSY_LIVE_PAINT_MS under heavy ingest) after the last frame.
   */
  requestLivePaint(): void {
    if (this.livePaintTimer) return;
    const now = performance.now();
    const wait = this.lastPaintAt + (now < this.busyUntil ? BUSY_LIVE_PAINT_MS : LIVE_PAINT_MS) - now;
    if (wait <= 0) return this.requestPaint();
    this.livePaintTimer = window.setTimeout(() => {
      this.livePaintTimer = 0;
      this.requestPaint();
    }, wait);
  }

  /** Paints now, in place of the frame already asked for (a canvas just emptied by a resize). */
  paintNow(): void {
    cancelAnimationFrame(this.rafId);
    this.rafId = 0;
    this.paint();
  }

  /** A frame starts painting at `start`. */
  painting(start: number): void {
    this.lastPaintAt = start;
    window.clearTimeout(this.livePaintTimer); // this frame draws what it waited for
    this.livePaintTimer = 0;
  }

  stop(): void {
    cancelAnimationFrame(this.rafId);
    window.clearTimeout(this.livePaintTimer);
  }
}

/** Refetches a live view at most every LIVE_REFETCH_MS, never two at once. */
export class LiveRefetchPacer {
  private timer = 0;
  private lastFetchAt = 0;
  private dirty = false; // asked while a fetch was in flight: scheduled once the data settles

  /** `refetch` asks for the whole view again (a forced fetch, which calls fetched()); nothing runs once `stopped()`. */
  constructor(private readonly loading: () => boolean, private readonly refetch: () => void, private readonly stopped: () => boolean) {}

  /** A forced fetch started at `now` (performance.now()). */
  fetched(now: number): void {
    this.lastFetchAt = now;
  }

  schedule(): void {
    if (this.loading()) {
      this.dirty = true;
      return;
    }
    if (this.timer) return;
    const wait = Math.max(0, this.lastFetchAt + LIVE_REFETCH_MS - performance.now());
    this.timer = window.setTimeout(() => {
      this.timer = 0;
      if (this.stopped()) return;
      this.refetch();
    }, wait);
  }

  /** No fetch is in flight any more: one asked for meanwhile is scheduled now. */
  settled(): void {
    if (this.dirty) {
      this.dirty = false;
      this.schedule();
    }
  }

  stop(): void {
    window.clearTimeout(this.timer);
  }
}
