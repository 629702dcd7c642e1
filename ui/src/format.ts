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
 *  the size of `ref` (the range's far end) so labels far from 0 stay short. */
export function fmtTick(t: number, step: number, ref = step): string {
  const units: [number, string][] = [[1e9, "s"], [1e6, "ms"], [1e3, "µs"], [1, "ns"]];
  const mag = Math.max(Math.abs(ref), step);
  for (const [div, unit] of units) {
    if (mag >= div || div === 1) {
      const decimals = Math.max(0, Math.min(9, Math.ceil(-Math.log10(step / div) - 1e-9)));
      return `${(t / div).toFixed(decimals)} ${unit}`;
    }
  }
  return String(t);
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
