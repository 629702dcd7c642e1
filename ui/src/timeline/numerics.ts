// Numerics on the timeline (/api/numerics): the words for GradScaler's
// skipped steps and for numerics problems (a cast that overflowed,
// underflowed or met NaN; an op whose outputs went inf/NaN from finite
// inputs). Every string here came from the agent: callers put these lines in
// as text (dom.ts h(), textContent, canvas fillText), never as markup.

import type { NumericsMark, ScalerPoint, ScalerSeries } from "../api";
import { fmtCount, fmtDuration } from "../format";

/** "256", "0.5", "65536", "2^-20": a scale as a person reads it. */
export function fmtScale(scale: number): string {
  if (!(scale > 0)) return String(scale);
  const log = Math.log2(scale);
  if (Number.isInteger(log) && (log > 20 || log < -10)) return `2^${log}`;
  return Number.isInteger(scale) ? String(scale) : String(Number(scale.toPrecision(4)));
}

function where(m: { location: { file: string; line: number } }): string {
  return m.location.file ? `${m.location.file}:${m.location.line}` : "<no source location>";
}

/** The mark's colour: overflow, NaN and non-finite outputs red, underflow alone amber (the server's `worst`). */
export function markColor(m: NumericsMark): string {
  return m.worst === "underflow" ? "#d97706" : "#dc2626";
}

/** One line per problem of the mark, the worst first: the server says them (numerics_problems.h). */
export function markProblems(m: NumericsMark): string[] {
  return m.problems;
}

/** The mark's text: its problems, then the window it was counted in. */
export function markLines(m: NumericsMark): string[] {
  const checked = m.kind === "cast" ? `${fmtCount(m.tensors)} casts checked` : `${fmtCount(m.tensors)} calls checked`;
  const largest = m.max_abs_log2 === null ? "no finite nonzero value" : `largest |x| 2^${m.max_abs_log2}`;
  return [
    ...markProblems(m),
    `window ${fmtDuration(m.t0)} – ${fmtDuration(m.t1)} (${fmtDuration(m.t1 - m.t0)}), ${checked}, ${largest}`,
    `${m.phase} · ${m.mode} · ${m.device} · from optimizer step ${fmtCount(m.iteration)}`,
  ];
}

/** "step skipped: scale 256 -> 128"; `before`: the series' point before it (none: the first update). */
export function skipTitle(p: ScalerPoint, before: ScalerPoint | undefined): string {
  return `step skipped: scale ${before ? fmtScale(before.scale) : "?"} -> ${fmtScale(p.scale)}`;
}

export function skipLines(s: ScalerSeries, p: ScalerPoint, before: ScalerPoint | undefined): string[] {
  return [
    skipTitle(p, before),
    `GradScaler.update() #${fmtCount(p.updates)} (optimizer step ${fmtCount(p.iteration)}) at ${fmtDuration(p.t)}`,
    "inf or NaN gradients: optimizer.step() was skipped and the scale backed off",
    `update() at ${where(s)}`,
    `${fmtCount(s.skipped_total)} of ${fmtCount(s.updates_total)} steps skipped in this run`,
  ];
}

/** The scale in effect at `t` on this series' step line, with the point that set it. */
export function scaleAt(s: ScalerSeries, t: number): ScalerPoint | undefined {
  let found: ScalerPoint | undefined;
  for (const p of s.points) {
    if (p.t > t) break;
    found = p;
  }
  return found;
}
