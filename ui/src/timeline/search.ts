// The timeline's filter: a line of terms, all of which a single cast must
// match to be drawn in full (the others are drawn pale). A term is
//   float32->bfloat16   a dtype pair (either side may be left out: ->bf16)
//   train.py:42         a file (any part of its path) and line
//   key:value           one field: op, file, line, arg, role, maker, cache,
//                       mode, phase, policy, outcome, module, param, src, dst
//   word                any part of the op, file, arg, role, maker, cache,
//                       mode, module or parameter
// Case does not matter; bf16, fp16, fp32 and fp64 name their dtypes;
// maker:explicit is any maker the job's own code is (user, or a library). The
// terms are only compared with the casts' fields, never put into the page
// as markup.

import type { Cast, SiteRow } from "../api";

const DTYPE_ALIAS: Record<string, string> = { bf16: "bfloat16", fp16: "float16", half: "float16", fp32: "float32", fp64: "float64" };
const dtype = (s: string) => DTYPE_ALIAS[s] ?? s;

/** The cast's maker as the report's conversions_by_maker names it (CastFields.maker). */
function makerOf(c: Cast): string {
  return c.maker;
}

// Makers by name; any other is the job's own code asking (.to(), .float()), named "user" or after its library.
const NAMED_MAKERS = new Set(["autocast", "autocast_backward", "autograd", "torchao", "fsdp", "transformer_engine"]);

type Field = (c: Cast) => string | number | undefined;
const FIELDS: Record<string, Field> = {
  op: (c) => c.op,
  file: (c) => c.location?.file,
  line: (c) => c.location?.line,
  arg: (c) => c.arg,
  role: (c) => c.role,
  maker: makerOf,
  cache: (c) => c.cache,
  mode: (c) => c.mode,
  phase: (c) => c.phase,
  policy: (c) => c.policy,
  outcome: (c) => c.outcome,
  module: (c) => c.module,
  param: (c) => c.parameter,
  parameter: (c) => c.parameter,
  src: (c) => c.src,
  dst: (c) => c.dst,
};
const WORD_FIELDS = ["op", "file", "arg", "role", "maker", "cache", "mode", "module", "param"].map((k) => FIELDS[k]);

interface Term {
  cast(c: Cast): boolean;
  /** Whether a sites row can hold a matching cast (true where the row does not say: role, maker, ...). */
  site(r: SiteRow): boolean;
}

export interface CastFilter {
  text: string;
  test(c: Cast): boolean;
  site(r: SiteRow): boolean;
}

const has = (v: string | number | undefined, want: string) => v !== undefined && String(v).toLowerCase().includes(want);

function pairTerm(src: string, dst: string): Term {
  const ok = (s: string, d: string) => (!src || s === src) && (!dst || d === dst);
  return {
    cast: (c) => ok(c.src, c.dst),
    // by_mode's keys: "src->dst", or "src (outcome)" where nothing was converted.
    site: (r) => Object.values(r.by_mode).some((pairs) => Object.keys(pairs).some((k) => {
      const m = /^(\S+?)->(\S+)$/.exec(k);
      return m ? ok(m[1], m[2]) : ok(k.split(" ")[0], k.split(" ")[0]);
    })),
  };
}

function term(t: string): Term {
  const arrow = /^(\w*)(?:->|→)(\w*)$/.exec(t);
  if (arrow) return pairTerm(dtype(arrow[1]), dtype(arrow[2]));
  const colon = t.lastIndexOf(":");
  if (colon > 0) {
    const [key, value] = [t.slice(0, colon), t.slice(colon + 1)];
    const field = FIELDS[key];
    if (field && value) {
      const want = key === "src" || key === "dst" ? dtype(value) : value;
      const exact = key === "line";
      const explicit = key === "maker" && want === "explicit";
      const cast = (c: Cast) => (explicit ? !NAMED_MAKERS.has(makerOf(c)) : exact ? String(field(c)) === want : has(field(c), want));
      const row: Record<string, (r: SiteRow) => boolean> = {
        op: (r) => has(r.op, want),
        file: (r) => has(r.file, want),
        line: (r) => String(r.line) === want,
        arg: (r) => has(r.arg, want),
      };
      return { cast, site: row[key] ?? (() => true) };
    }
    if (/^\d+$/.test(value)) {
      // file:line
      const file = key;
      return {
        cast: (c) => has(c.location?.file, file) && c.location?.line === Number(value),
        site: (r) => has(r.file, file) && r.line === Number(value),
      };
    }
  }
  return {
    cast: (c) => WORD_FIELDS.some((f) => has(f(c), t)),
    site: () => true, // the word may name a role, maker, ... that rows do not carry
  };
}

/** The filter `text` says; null for an empty one. */
export function parseFilter(text: string): CastFilter | null {
  const terms = text.trim().toLowerCase().split(/\s+/).filter(Boolean).map(term);
  if (terms.length === 0) return null;
  return {
    text: text.trim(),
    test: (c) => terms.every((t) => t.cast(c)),
    site: (r) => terms.every((t) => t.site(r)),
  };
}
