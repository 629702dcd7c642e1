// Hit testing on the lanes canvas: what lies under a point of the last
// painted Frame (a loss mark on a process's header row, a skipped step, a
// numerics mark, the GradScaler row, a cast, an op or kernel span, a density
// bucket, a loss's tint over the lanes, in that order: small marks over the
// rest) and the lines the tooltip says about it. The answer's `target` (a
// Hover) is what a click opens; a loss, the density bucket and the scale
// line have none. Pure: it reads the frame, the layout and the viewport, nothing else.

import type { AgentId, Cast, NumericsMark, ScalerPoint, ScalerSeries } from "../api";
import { MODE_BADGE } from "../colors";
import { fmtBytes, fmtCount, fmtDuration, fmtShape } from "../format";
import { type Frame, tOf, type Viewport } from "./draw";
import type { Lane, Layout } from "./layout";
import { lossesAt, lossLines } from "./losses";
import { fmtScale, markLines, markProblems, scaleAt, skipLines } from "./numerics";

export type Hover =
  | { kind: "cast"; cast: Cast }
  | { kind: "op"; agent: AgentId; seq: number }
  | { kind: "kernel"; agent: AgentId; seq: number }
  | { kind: "numerics"; marks: NumericsMark[] }
  | { kind: "skip"; series: ScalerSeries; point: ScalerPoint; before: ScalerPoint | undefined };

/** The tooltip's lines for what is under a point, and what a click there opens (none for a bucket or the scale line). */
export interface Picked {
  text: string[];
  target: Hover | null;
}

/** What is under (x, y), canvas CSS px: a cast mark first, then spans, then a bucket. */
export function pick(frame: Frame, layout: Layout, vp: Viewport, x: number, y: number): Picked | null {
  // A process's header row holds nothing but its loss marks.
  const lost = lossesAt(frame.losses, x, y);
  const onHeader = lost.filter((m) => y < m.y1);
  if (onHeader.length) return { text: lossLines(onHeader), target: null };
  // Skipped steps and numerics marks first: small marks over the rest.
  for (const s of frame.skips) {
    if ((s.x - x) ** 2 + (s.y - y) ** 2 <= 8 * 8) {
      return { text: skipLines(s.row.series, s.point, s.before), target: { kind: "skip", series: s.row.series, point: s.point, before: s.before } };
    }
  }
  const marks = frame.numerics.filter((d) => x >= d.x0 - 1 && x <= d.x1 + 1 && y >= d.y0 - 1 && y <= d.y1 + 1).map((d) => d.item);
  if (marks.length) {
    const more = marks.length > 1 ? [`+ ${marks.length - 1} more numerics mark${marks.length > 2 ? "s" : ""} here (click for all)`] : [];
    return { text: [...markLines(marks[0]), ...marks.slice(1, 3).flatMap((m) => markProblems(m)), ...more], target: { kind: "numerics", marks } };
  }
  for (const row of layout.scalers) {
    if (y < row.y || y >= row.y + row.h) continue;
    const p = scaleAt(row.series, tOf(vp, x));
    if (!p) return null;
    const s = row.series;
    return {
      text: [
        `GradScaler scale ${fmtScale(p.scale)} (2^${Math.log2(p.scale).toFixed(Number.isInteger(Math.log2(p.scale)) ? 0 : 2)})`,
        `since update #${fmtCount(p.updates)} at ${fmtDuration(p.t)}`,
        `${fmtCount(s.skipped_total)} of ${fmtCount(s.updates_total)} steps skipped in this run`,
      ],
      target: null,
    };
  }
  let best: Frame["casts"][number] | null = null;
  let bestD = 8 * 8;
  for (const d of frame.casts) {
    const dd = (d.x - x) ** 2 + (d.y - y) ** 2;
    if (dd <= bestD) {
      bestD = dd;
      best = d;
    }
  }
  if (best) return { text: castLines(best.cast, best.live), target: { kind: "cast", cast: best.cast } };
  for (const s of frame.ops) {
    if (x >= s.x0 - 1 && x <= s.x1 + 1 && y >= s.y0 && y <= s.y1) {
      const o = s.item;
      return {
        text: [
          `op ${o.op}`,
          `policy ${o.policy} · outcome ${o.outcome}`,
          `mode ${o.mode} · ${o.phase}`,
          `inputs ${(o.input_dtypes ?? []).join(", ")} → ${o.output_dtype}`,
          `duration ${fmtDuration(o.dur)}`,
          loc(o.location),
        ],
        target: { kind: "op", agent: o.agent_id, seq: o.seq },
      };
    }
  }
  for (const s of frame.kernels) {
    if (x >= s.x0 - 1 && x <= s.x1 + 1 && y >= s.y0 && y <= s.y1) {
      const k = s.item;
      return {
        text: [
          `${k.activity} ${k.name}`,
          `duration ${fmtDuration(k.dur)} · device ${k.device} stream ${k.stream}`,
          `launched by ${k.launched_by} #${k.launch_seq}`,
          k.bytes ? `bytes ${fmtBytes(k.bytes)}` : "",
        ].filter(Boolean),
        target: { kind: "kernel", agent: k.agent_id, seq: k.seq },
      };
    }
  }
  const lane = laneAt(layout, y);
  if (lane) {
    for (const b of frame.buckets) {
      if (b.lane === lane && x >= b.x0 && x <= b.x1) {
        const k = b.bucket;
        const lines =
          lane.track.kind === "gpu"
            ? [`${fmtCount(k.kernels)} kernels, ${fmtDuration(k.kernel_ns)} busy`]
            : [
                `${fmtCount(k.decisions)} cast decisions, ${fmtCount(k.casts)} casts (${fmtBytes(k.bytes)})`,
                `to bf16 ${k.to_bfloat16} · to fp16 ${k.to_float16} · to fp32 ${k.to_float32}`,
                `cache: miss ${k.miss} · hit ${k.hit} · stale hit ${k.stale_hit}`,
                `${fmtCount(k.ops)} ops (${fmtDuration(k.op_ns)}) · backward ${k.backward}`,
                `modes ${(k.modes ?? []).join(", ")}`,
              ];
        return { text: [`${fmtDuration(k.t)} + ${fmtDuration(b.bucketNs)}`, ...lines], target: null };
      }
    }
  }
  // Nothing else here: the faint tint of a loss over the process's lanes.
  if (lost.length) return { text: lossLines(lost), target: null };
  return null;
}

function laneAt(layout: Layout, y: number): Lane | undefined {
  return layout.lanes.find((l) => y >= l.y && y < l.y + l.h);
}

function loc(l: { file: string; line: number } | null | undefined): string {
  return l && l.file ? `${l.file}:${l.line}` : "(no source location)";
}

function castLines(c: Cast, live: boolean): string[] {
  const mode = MODE_BADGE[c.mode] ? `${c.mode} (not eager)` : c.mode;
  return [
    `${c.op} · arg ${c.arg}${typeof c.list_index === "number" && c.list_index >= 0 ? `[${c.list_index}]` : ""}`,
    `policy ${c.policy} · outcome ${c.outcome}`,
    `${c.src} → ${c.dst}`,
    `shape ${fmtShape(c.shape)} · ${fmtBytes(c.bytes)}`,
    `role ${c.role} · cache ${c.cache.replace("_", " ")}`,
    `mode ${mode} · ${c.phase}`,
    loc(c.location),
    live ? "(live, not yet refetched)" : "",
  ].filter(Boolean);
}
