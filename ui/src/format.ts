// Human-readable times, sizes and rates.

export function fmtDuration(ns: number): string {
  const a = Math.abs(ns);
  if (a >= 60e9) {
    const m = Math.floor(a / 60e9);
    const s = (a - m * 60e9) / 1e9;
    return `${ns < 0 ? "-" : ""}${m} min ${s.toFixed(1)} s`;
  }
  if (a >= 1e9) return `${trim(ns / 1e9)} s`;
  if (a >= 1e6) return `${trim(ns / 1e6)} ms`;
  if (a >= 1e3) return `${trim(ns / 1e3)} µs`;
  return `${Math.round(ns)} ns`;
}

function trim(v: number): string {
  const a = Math.abs(v);
  const digits = a >= 100 ? 0 : a >= 10 ? 1 : 2;
  return v.toFixed(digits).replace(/\.0+$|(\.\d*?)0+$/, "$1");
}

/** Axis label for tick t (ns) when ticks are `step` ns apart; the unit follows
 *  the size of `ref` (the range's far end) so labels far from 0 stay short.
 *  As many decimals as the step needs, so every label is its tick's value
 *  (975.25 ms with 0.25 ms ticks, not 975.3). */
export function fmtTick(t: number, step: number, ref = step): string {
  return scaledTick(t, step, ref, TIME_UNITS, " ", false);
}

const TIME_UNITS: [number, string][] = [[1e9, "s"], [1e6, "ms"], [1e3, "µs"], [1, "ns"]];
const COUNT_UNITS: [number, string][] = [[1e9, "G"], [1e6, "M"], [1e3, "k"], [1, ""]];
const BYTE_UNITS: [number, string][] = [[1024 ** 4, "TiB"], [1024 ** 3, "GiB"], [1024 ** 2, "MiB"], [1024, "KiB"], [1, "B"]];

/** A count axis's label (15k, 2.5M) for ticks `step` apart, exact as fmtTick's. */
export function fmtCountTick(v: number, step: number, ref = step): string {
  return scaledTick(v, step, ref, COUNT_UNITS, "", true);
}

/** A bytes axis's label (1.25 MiB) for ticks `step` apart, exact as fmtTick's. */
export function fmtBytesTick(v: number, step: number, ref = step): string {
  return scaledTick(v, step, ref, BYTE_UNITS, " ", true);
}

/**
 * `v` in the largest of `units` that `ref` (or `step`) reaches, with the
 * decimals `step` needs; `plainZero`: zero in the smallest unit ("0", "0 B"
 * rather than "0k", "0 MiB"), for value axes.
 */
function scaledTick(v: number, step: number, ref: number, units: [number, string][], sep: string, plainZero: boolean): string {
  const mag = Math.max(Math.abs(ref), Math.abs(step));
  const zero = plainZero && v === 0;
  const [div, unit] = zero ? units[units.length - 1] : (units.find(([d]) => mag >= d) ?? units[units.length - 1]);
  const text = (v / div).toFixed(zero ? 0 : decimalsOf(Math.abs(step) / div)).replace(/^-(?=[0.]+$)/, ""); // no "-0.00"
  return `${text}${unit ? sep + unit : ""}`;
}

/** The fewest decimals (at most 9) that write `x` exactly: 0.25 → 2, 5 → 0. */
export function decimalsOf(x: number): number {
  if (x === 0 || !Number.isFinite(x)) return 0;
  for (let d = 0; d < 9; d++) {
    const scaled = Math.abs(x) * 10 ** d;
    if (Math.abs(scaled - Math.round(scaled)) <= 1e-6 * scaled) return d;
  }
  return 9;
}

export function fmtBytes(b: number): string {
  if (!Number.isFinite(b)) return String(b);
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = b;
  let i = 0;
  while (Math.abs(v) >= 1024 && i < units.length - 1) {
    v /= 1024;
    i++;
  }
  return i === 0 ? `${Math.round(v)} B` : `${v.toFixed(v >= 100 ? 0 : 1)} ${units[i]}`;
}

export function fmtCount(n: number): string {
  return Number.isFinite(n) ? n.toLocaleString("en-US") : String(n);
}

/** Unix nanoseconds, a decimal string as the API sends them, as a UTC time. */
export function fmtUnixNs(ns: string): string {
  const ms = /^\d+$/.test(ns) ? Number(BigInt(ns) / 1000000n) : 0;
  if (!ms) return "—";
  return new Date(ms).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

export function fmtShape(shape: unknown): string {
  if (Array.isArray(shape)) return `[${shape.join(", ")}]`;
  return shape === undefined || shape === null ? "" : String(shape);
}

/** The next nice step after `step` (a niceStep): 1 → 2 → 5 → 10 (× 10^k). */
export function nextNiceStep(step: number): number {
  const p = Math.pow(10, Math.floor(Math.log10(step) + 1e-9));
  const m = Math.round(step / p);
  return (m < 2 ? 2 : m < 5 ? 5 : 10) * p;
}

/** Nice tick step (1, 2, 5 × 10^k) so about `count` ticks cover `span`. */
export function niceStep(span: number, count: number): number {
  const raw = span / Math.max(1, count);
  const p = Math.pow(10, Math.floor(Math.log10(raw)));
  const m = raw / p;
  return (m < 1.5 ? 1 : m < 3.5 ? 2 : m < 7.5 ? 5 : 10) * p;
}

/** Unix seconds as a UTC time. */
export function fmtUnixS(s: number): string {
  if (!Number.isFinite(s) || s <= 0) return "—";
  return new Date(s * 1000).toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
}

/** Ranks as the fleet's summaries write them: [0, 1]. */
export function fmtRanks(ranks: number[]): string {
  return `[${ranks.join(", ")}]`;
}

/** `text` as one word for a POSIX shell: as it is when it needs no quoting, else in single quotes. */
export function shellQuoted(text: string): string {
  return /^[A-Za-z0-9._:/@%+=,-]+$/.test(text) ? text : `'${text.replace(/'/g, "'\\''")}'`;
}
