// Writes src/api-types.ts, the page's types of the collector's answers, from
// docs/schema/viewer-api.schema.json: the API is declared once, in the schema,
// which tests/integration/test_viewer_http.py checks real answers against.
// `node api-types.mjs --check` (build.mjs runs it) fails when the committed
// file is not what the schema gives, so the types cannot drift from it.
//
// A generator for the keywords that schema uses, not a general one (a package
// such as json-schema-to-typescript brings a formatter and a $ref resolver,
// dozens of packages, for this): a keyword it does not know stops it, rather
// than being left out of the types unnoticed.
import { readFileSync, writeFileSync } from "node:fs";
import { dirname, join } from "node:path";
import { fileURLToPath } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const schemaDir = join(here, "..", "docs", "schema");
const target = join(here, "src", "api-types.ts");

// Keywords that say nothing a TypeScript type can (bounds, patterns) or that
// the structure below already follows.
const IGNORED = new Set(["$schema", "$id", "title", "description", "$defs", "minimum", "maximum", "pattern",
  "minLength", "minItems", "uniqueItems", "default", "unevaluatedProperties"]);
const HANDLED = new Set(["type", "properties", "required", "additionalProperties", "items", "enum", "const", "$ref",
  "oneOf", "anyOf"]);

function load(name) {
  return JSON.parse(readFileSync(join(schemaDir, name), "utf8"));
}

export function generate() {
  const viewer = load("viewer-api.schema.json");
  const report = load("report.schema.json");
  // Another schema's definitions, by its $id: named after it ("Report" + the
  // definition) and written after the viewer's own.
  const external = new Map([[new URL(report.$id).pathname.split("/").pop(), { schema: report, prefix: "Report" }]]);
  const pending = [];
  const emitted = new Set();

  const pascal = (name) => name.replace(/(^|_)([a-z])/g, (_, __, c) => c.toUpperCase());
  const comment = (text, indent) => (text ? `${indent}/** ${text.replace(/\*\//g, "*\\/")} */\n` : "");

  function refName(ref, base) {
    const [file, pointer] = ref.split("#");
    const match = /^\/\$defs\/([A-Za-z0-9_]+)$/.exec(pointer ?? "");
    if (!match) throw new Error(`api-types: unsupported $ref ${ref}`);
    const owner = file ? external.get(file) : base;
    if (!owner) throw new Error(`api-types: $ref to an unknown schema: ${ref}`);
    if (owner.prefix === "") return match[1];
    const name = owner.prefix + pascal(match[1]);
    if (!emitted.has(name)) {
      emitted.add(name);
      pending.push({ name, def: owner.schema.$defs[match[1]], owner });
    }
    return name;
  }

  function type(def, owner, indent) {
    for (const key of Object.keys(def))
      if (!IGNORED.has(key) && !HANDLED.has(key)) throw new Error(`api-types: keyword ${key} is not supported`);
    const parts = [];
    if (def.$ref) parts.push(refName(def.$ref, owner));
    if (def.const !== undefined) parts.push(JSON.stringify(def.const));
    if (def.enum) parts.push(def.enum.map((v) => JSON.stringify(v)).join(" | "));
    for (const key of ["oneOf", "anyOf"])
      if (def[key]) parts.push(def[key].map((member) => type(member, owner, indent)).join(" | "));
    const types = def.type === undefined ? [] : [def.type].flat();
    if (types.length) parts.push(types.map((t) => typeOf(t, def, owner, indent)).join(" | "));
    else if (def.properties) parts.push(objectOf(def, owner, indent));
    if (parts.length === 0) return "unknown";
    return parts.length === 1 ? parts[0] : parts.map((p) => (p.includes(" | ") ? `(${p})` : p)).join(" & ");
  }

  function typeOf(name, def, owner, indent) {
    switch (name) {
      case "string":
        return "string";
      case "integer":
      case "number":
        return "number";
      case "boolean":
        return "boolean";
      case "null":
        return "null";
      case "array": {
        const item = def.items ? type(def.items, owner, indent) : "unknown";
        return /[ &|]/.test(item) ? `(${item})[]` : `${item}[]`;
      }
      case "object":
        return objectOf(def, owner, indent);
      default:
        throw new Error(`api-types: type ${name} is not supported`);
    }
  }

  function objectOf(def, owner, indent) {
    if (!def.properties) {
      const values = typeof def.additionalProperties === "object" ? type(def.additionalProperties, owner, indent) : "unknown";
      return `Record<string, ${values}>`;
    }
    const required = new Set(def.required ?? []);
    const inner = indent + "  ";
    const lines = Object.entries(def.properties).map(
      ([key, property]) =>
        comment(property.description, inner) + `${inner}${key}${required.has(key) ? "" : "?"}: ${type(property, owner, inner)};\n`,
    );
    return `{\n${lines.join("")}${indent}}`;
  }

  function declaration(name, def, owner) {
    const body = type(def, owner, "");
    const plainObject = def.type === "object" && def.properties && !def.$ref;
    return comment(def.description, "") + (plainObject ? `export interface ${name} ${body}\n` : `export type ${name} = ${body};\n`);
  }

  const own = { schema: viewer, prefix: "" };
  const out = [
    "// Generated by ui/api-types.mjs from docs/schema/viewer-api.schema.json (and the report\n" +
      "// schema it refers to): do not edit; change the schema and run `npm run api-types`.\n",
  ];
  for (const [name, def] of Object.entries(viewer.$defs)) out.push(declaration(name, def, own));
  while (pending.length) {
    const { name, def, owner } = pending.shift();
    out.push(declaration(name, def, owner));
  }
  return out.join("\n");
}

if (process.argv[1] === fileURLToPath(import.meta.url)) {
  const text = generate();
  if (process.argv.includes("--check")) {
    let committed = "";
    try {
      committed = readFileSync(target, "utf8");
    } catch {
      /* missing: not up to date */
    }
    if (committed !== text) {
      console.error("ui/src/api-types.ts is not what docs/schema/viewer-api.schema.json gives: run `npm run api-types` in ui/");
      process.exit(1);
    }
  } else {
    writeFileSync(target, text);
  }
}
