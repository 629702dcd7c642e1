// Modules: the run's precision map as a module tree (docs/viewer.md,
// "Modules"). Each nn.Module with casts shows the dtypes it was stored,
// computed, communicated and cast in, and the bytes each maker converted per
// optimizer step; its parameters are rows under it, its submodules nodes.
// Modules without casts of their own appear only as the path to those with.

import { api, type ModuleRow, type ModulesAnswer, type ParameterRow } from "../api";
import { clear, h } from "../dom";
import { fmtBytes } from "../format";
import { errorText } from "../notice";

interface TreeNode {
  name: string; // the last part of the qualified name ("q_proj"), or the root's "<Class>"
  path: string; // the qualified name
  row: ModuleRow | null; // null: a module with no casts of its own
  children: Map<string, TreeNode>;
  bytes: number; // its subtree's bytes converted (per step where steps are known)
}

type Cells = Pick<ModuleRow, "stored" | "computed" | "communicated" | "cast_to" | "bytes_by_maker" | "bytes_per_step_by_maker">;

function node(name: string, path: string): TreeNode {
  return { name, path, row: null, children: new Map(), bytes: 0 };
}

function bytesOf(cells: Cells): Record<string, number> {
  return cells.bytes_per_step_by_maker ?? cells.bytes_by_maker;
}

/** The map's modules as a tree: "<Root>.a.b" under its root; one root is the top, several sit under "(modules)". */
export function buildTree(answer: ModulesAnswer): TreeNode {
  const top = node("(modules)", "");
  for (const m of answer.modules) {
    let at = top;
    const parts = m.module.split(".");
    parts.forEach((part, i) => {
      const path = parts.slice(0, i + 1).join(".");
      let next = at.children.get(part);
      if (!next) {
        next = node(part, path);
        at.children.set(part, next);
      }
      at = next;
    });
    at.row = m;
  }
  const total = (n: TreeNode): number => {
    let sum = n.row ? Object.values(bytesOf(n.row)).reduce((a, b) => a + b, 0) : 0;
    for (const c of n.children.values()) sum += total(c);
    n.bytes = sum;
    return sum;
  };
  const root = top.children.size === 1 ? [...top.children.values()][0] : top;
  total(root);
  return root;
}

function chips(label: string, dtypes: string[]): HTMLElement | null {
  if (dtypes.length === 0) return null;
  return h("span", { class: `pm-cell pm-${label.replace(" ", "-")}` }, h("span", { class: "muted" }, `${label} `), dtypes.join(" / "));
}

function describe(cells: Cells, perStep: boolean): HTMLElement {
  const bytes = Object.entries(bytesOf(cells)).sort((a, b) => b[1] - a[1]);
  return h(
    "span",
    { class: "pm-cells" },
    chips("stored", cells.stored),
    chips("computed", cells.computed),
    chips("communicated", cells.communicated),
    chips("cast to", cells.cast_to),
    bytes.length > 0
      ? h("span", { class: "pm-cell pm-bytes" }, bytes.map(([maker, n]) => `${maker} ${fmtBytes(n)}${perStep ? "/step" : ""}`).join(", "))
      : null,
  );
}

function parameterRow(p: ParameterRow, perStep: boolean): HTMLElement {
  return h("li", { class: "pm-parameter", "data-parameter": p.name }, h("span", { class: "pm-name" }, `.${p.name}`), describe(p, perStep));
}

function render(n: TreeNode, perStep: boolean, depth: number): HTMLElement {
  const children = [...n.children.values()].sort((a, b) => a.name.localeCompare(b.name, undefined, { numeric: true }));
  const summary = h(
    "summary",
    null,
    h("span", { class: "pm-name", title: n.path || n.name }, n.name),
    n.row ? describe(n.row, perStep) : null,
    n.children.size > 0 && n.bytes > 0 ? h("span", { class: "muted pm-subtree" }, `subtree ${fmtBytes(n.bytes)}${perStep ? "/step" : ""}`) : null,
  );
  const body = h(
    "ul",
    null,
    ...(n.row?.parameters ?? []).map((p) => parameterRow(p, perStep)),
    ...children.map((c) => h("li", null, render(c, perStep, depth + 1))),
  );
  return h("details", { class: "pm-module", "data-module": n.path || n.name, open: depth < 3 }, summary, body);
}

export class ModulesView {
  readonly el: HTMLElement;
  private body: HTMLElement;

  constructor(private readonly run: string) {
    this.body = h("div", { class: "modules-tree" }, h("p", { class: "muted" }, "loading the precision map…"));
    this.el = h("section", { class: "modules page" }, h("h1", null, "Modules"), this.body);
    void this.load();
  }

  private async load(): Promise<void> {
    try {
      const answer = await api.modules(this.run);
      clear(this.body);
      if (!answer.available) {
        this.body.appendChild(h("p", { class: "muted" }, `No precision map: ${answer.why ?? "not available for this run"}.`));
        return;
      }
      if (answer.modules.length === 0) {
        this.body.appendChild(h("p", { class: "muted" }, "No cast happened inside an nn.Module call (attach from Python and call the model as a module)."));
        return;
      }
      const perStep = answer.optimizer_steps > 0;
      this.body.appendChild(
        h(
          "p",
          { class: "muted" },
          `Per nn.Module and parameter: the dtypes it was stored, computed, communicated and cast in, and the bytes each maker converted ${
            perStep ? `per optimizer step (${answer.optimizer_steps} steps)` : "over the run (no optimizer step seen)"
          }.`,
        ),
      );
      this.body.appendChild(render(buildTree(answer), perStep, 0));
    } catch (e) {
      clear(this.body);
      this.body.appendChild(h("p", { class: "error" }, errorText(e)));
    }
  }

  destroy(): void {}
}
