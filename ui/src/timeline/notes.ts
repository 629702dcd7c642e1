// What the detail panel shows when a numerics mark or a GradScaler skipped
// step is clicked on the timeline. These come with the timeline's own answer
// (/api/numerics), so the panel asks the server nothing: a NoteBlock is the
// mark's text (the same lines as its tooltip), every field it carries, and,
// for an op whose outputs went non-finite, the call to open from it.

import type { AgentId, NumericsMark, ScalerPoint, ScalerSeries } from "../api";
import { markLines, skipLines } from "./numerics";

/** What the detail panel shows for a numerics mark or a skipped step: text, no request. */
export interface NoteBlock {
  title: string;
  lines: string[];
  fields: [string, string | number | boolean | null][];
  /** An event to open from it (an op mark's first non-finite call). */
  event?: { agent: AgentId; seq: number; label: string };
}

export function markNote(m: NumericsMark): NoteBlock {
  const [title, ...lines] = markLines(m);
  const fields: NoteBlock["fields"] = [];
  for (const [k, v] of Object.entries(m)) {
    if (k === "location") continue;
    fields.push([k, v === null || typeof v === "object" ? JSON.stringify(v) : v]);
  }
  fields.push(["location", `${m.location.file}:${m.location.line}`], ["function", m.location.function]);
  const event = m.first_nonfinite_seq > 0 ? { agent: m.agent_id, seq: m.first_nonfinite_seq, label: `the first call that went non-finite (op seq ${m.first_nonfinite_seq})` } : undefined;
  return { title, lines, fields, event };
}

export function skipNote(s: ScalerSeries, p: ScalerPoint, before: ScalerPoint | undefined): NoteBlock {
  const [title, ...lines] = skipLines(s, p, before);
  const fields: NoteBlock["fields"] = [
    ["agent_id", s.agent_id],
    ["scale_before", before ? before.scale : null],
    ...Object.entries(p).map(([k, v]): [string, string | number | boolean] => [k, v]),
    ["location", `${s.location.file}:${s.location.line}`],
  ];
  return { title, lines, fields };
}
