// One colour per target dtype (pairs share their target's hue, the source
// shifts its lightness), one shape per role, one stroke per cache outcome.

export const DTYPE_COLOR: Record<string, string> = {
  bfloat16: "#1f77b4",
  float16: "#d97706",
  float32: "#2ca02c",
  float64: "#8c564b",
  other: "#7f7f7f",
};

const PAIR_COLOR: Record<string, string> = {
  "float32->bfloat16": "#1f77b4",
  "float16->bfloat16": "#5aa9e6",
  "float64->bfloat16": "#0b4f8a",
  "float32->float16": "#d97706",
  "bfloat16->float16": "#f2b25c",
  "float64->float16": "#9a4f00",
  "bfloat16->float32": "#2ca02c",
  "float16->float32": "#7ccf6b",
  "float64->float32": "#16651a",
  "float32->float64": "#8c564b",
  "bfloat16->float64": "#b07b6e",
  "float16->float64": "#5e3a30",
};

/** Colour of a cast by its dtype pair; decisions that converted nothing are grey. */
export function pairColor(src: string, dst: string, outcome?: string): string {
  if (outcome && outcome !== "cast") return "#9ca3af";
  return PAIR_COLOR[`${src}->${dst}`] ?? DTYPE_COLOR[dst] ?? DTYPE_COLOR.other;
}

// Magenta: apart from the red of numerics problems (inf/NaN, overflow), which sit at the same place of a lane.
export const STALE_COLOR = "#d946ef";
export const HIGHLIGHT_COLOR = "rgba(245, 158, 11, 0.45)";
export const BACKWARD_SHADE = "rgba(124, 58, 237, 0.10)";
export const OP_FORWARD = "#cbd5e1";
export const OP_BACKWARD = "#c4b5fd";

export const MODE_BADGE: Record<string, { text: string; color: string }> = {
  script: { text: "S", color: "#0f766e" },
  traced: { text: "T", color: "#9333ea" },
  trace_recording: { text: "TR", color: "#be185d" },
  script_while_tracing: { text: "ST", color: "#b45309" },
  // torch.compile: decisions made while a graph was traced (compile time),
  // and runs of the compiled graphs.
  compiling: { text: "CT", color: "#1e3a8a" },
  compiled: { text: "C", color: "#2563eb" },
};

export function kernelColor(activity: string, launchedBy: string): string {
  if (activity === "memcpy") return "#0891b2";
  if (activity === "memset") return "#65a30d";
  return launchedBy === "cast" ? "#ea580c" : "#475569";
}

export type Role = "weight" | "input" | "activation" | string;

/** Adds the mark for `role` at (x, y) with half-size r to `path`. */
export function addMark(path: Path2D, role: Role, x: number, y: number, r: number): void {
  if (role === "weight") {
    path.moveTo(x, y - r);
    path.lineTo(x + r, y + r * 0.8);
    path.lineTo(x - r, y + r * 0.8);
    path.closePath();
  } else if (role === "input") {
    path.rect(x - r * 0.85, y - r * 0.85, r * 1.7, r * 1.7);
  } else if (role === "activation") {
    path.moveTo(x + r, y);
    path.arc(x, y, r, 0, Math.PI * 2);
  } else {
    // unknown role: a diamond
    path.moveTo(x, y - r);
    path.lineTo(x + r, y);
    path.lineTo(x, y + r);
    path.lineTo(x - r, y);
    path.closePath();
  }
}
