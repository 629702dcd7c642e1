// Entry point: the tabs and the hash router. Each view owns its DOM and its
// timers and is destroyed when the route leaves it.

import "uplot/dist/uPlot.min.css";
import "./styles/app.css";
import "./stats";
import { h } from "./dom";
import { clearNotice } from "./notice";
import { hashFor, parseHash, type Route } from "./router";
import { RunPage } from "./views/run";
import { RunsView } from "./views/runs";
import { SitesView } from "./views/sites";

interface View {
  el: HTMLElement;
  destroy(): void;
}

let current: { view: View; key: string } | null = null;

function renderTabs(route: Route): void {
  const tabs = document.getElementById("tabs");
  const title = document.getElementById("run-title");
  if (!tabs || !title) return;
  const tab = (label: string, href: string, active: boolean, disabled = false) =>
    disabled
      ? h("span", { class: "tab disabled", title: "open a run first" }, label)
      : h("a", { href, class: active ? "tab active" : "tab", "aria-current": active ? "page" : undefined }, label);
  tabs.replaceChildren(
    tab("Runs", hashFor("runs", null), route.view === "runs"),
    tab("Timeline", hashFor("timeline", route.run), route.view === "timeline", route.run === null),
    tab("Sites", hashFor("sites", route.run), route.view === "sites", route.run === null),
  );
  title.textContent = route.run ? `run ${route.run}` : "";
}

function route(): void {
  const r = parseHash(location.hash);
  renderTabs(r);
  // The timeline keeps its range in the hash; only a change of view or run rebuilds.
  const key = r.view === "sites" ? `sites/${r.run}/${r.params.get("q") ?? ""}` : `${r.view}/${r.run}`;
  if (current && current.key === key) return;
  current?.view.destroy();
  clearNotice();
  let view: View;
  if (r.view === "timeline" && r.run) view = new RunPage(r.run, r.params);
  else if (r.view === "sites" && r.run) view = new SitesView(r.run, r.params.get("q") ?? "");
  else view = new RunsView();
  current = { view, key };
  document.getElementById("app")?.replaceChildren(view.el);
  document.body.dataset.view = r.view;
}

window.addEventListener("hashchange", route);
route();
