// Entry point: the tabs and the hash router. Each view owns its DOM and its
// timers and is destroyed when the route leaves it. The fleet page
// (castscope-collector fleet view, api.ts isFleetServer) has no runs, so only
// the fleet's routes are shown there, and only there.

import "uplot/dist/uPlot.min.css";
import "./styles/app.css";
import "./stats";
import { isFleetServer } from "./api";
import { h } from "./dom";
import { clearNotice } from "./notice";
import { fleetHash, hashFor, parseHash, replaceHash, type Route } from "./router";
import { FleetView } from "./views/fleet";
import { FleetJobView } from "./views/fleet-job";
import { LiveRunView } from "./views/live-run";
import { RunPage } from "./views/run";
import { RunsView } from "./views/runs";
import { ModulesView } from "./views/modules";
import { SitesView } from "./views/sites";

interface View {
  el: HTMLElement;
  destroy(): void;
  /** The same view's hash changed (Back after a jump): apply its parameters. */
  update?(params: URLSearchParams): void;
}

let current: { view: View; key: string } | null = null;
let fleet = false;

const tab = (label: string, href: string, active: boolean, disabled = false, why = "open a run first") =>
  disabled
    ? h("span", { class: "tab disabled", title: why }, label)
    : h("a", { href, class: active ? "tab active" : "tab", "aria-current": active ? "page" : undefined }, label);

function renderTabs(route: Route): void {
  const tabs = document.getElementById("tabs");
  const title = document.getElementById("run-title");
  if (!tabs || !title) return;
  if (fleet) {
    tabs.replaceChildren(
      tab("Fleet", fleetHash(null), route.view === "fleet"),
      tab("Job", route.job === null ? "" : fleetHash(route.job), route.view === "fleet-job", route.job === null, "open a job first"),
    );
    title.textContent = route.job !== null ? `job ${route.job}` : "fleet";
    return;
  }
  tabs.replaceChildren(
    tab("Runs", hashFor("runs", null), route.view === "runs"),
    tab("Timeline", hashFor("timeline", route.run), route.view === "timeline", route.run === null),
    tab("Sites", hashFor("sites", route.run), route.view === "sites", route.run === null),
    tab("Modules", hashFor("modules", route.run), route.view === "modules", route.run === null),
  );
  title.textContent = route.run ? `run ${route.run}` : "";
}

/** The route as this server can show it: the fleet page has no runs, a run's collector no fleet. */
function currentRoute(): Route {
  const r = parseHash(location.hash);
  const fleetRoute = r.view === "fleet" || r.view === "fleet-job";
  if (fleet && !fleetRoute) {
    replaceHash(fleetHash(null));
    return parseHash(fleetHash(null));
  }
  if (!fleet && fleetRoute) return { view: "runs", run: null, job: null, params: r.params };
  return r;
}

function viewKey(r: Route): string {
  // The timeline keeps its range in the hash; only a change of view or run rebuilds.
  if (r.view === "sites") return `sites/${r.run}/${r.params.get("q") ?? ""}`;
  // The fleet's views keep their kind filter (and the fleet page its window) themselves.
  if (r.view === "fleet") return `fleet/${r.params.get("since") ?? ""}`;
  if (r.view === "fleet-job") return `fleet-job/${r.job}`;
  return `${r.view}/${r.run}`;
}

function route(): void {
  const r = currentRoute();
  renderTabs(r);
  const key = viewKey(r);
  if (current && current.key === key) {
    current.view.update?.(r.params);
    return;
  }
  current?.view.destroy();
  clearNotice();
  let view: View;
  if (r.view === "fleet") view = new FleetView(r.params);
  else if (r.view === "fleet-job" && r.job !== null) view = new FleetJobView(r.job, r.params.get("kind") ?? "");
  else if (r.view === "timeline" && r.run) view = new RunPage(r.run, r.params);
  else if (r.view === "sites" && r.run) view = new SitesView(r.run, r.params);
  else if (r.view === "modules" && r.run) view = new ModulesView(r.run);
  else if (r.view === "live") view = new LiveRunView();
  else view = new RunsView();
  current = { view, key };
  document.getElementById("app")?.replaceChildren(view.el);
  document.body.dataset.view = r.view;
}

const opened = parseHash(location.hash).view;
void isFleetServer(opened === "fleet" || opened === "fleet-job").then((isFleet) => {
  fleet = isFleet;
  if (fleet) document.title = "castscope fleet";
  window.addEventListener("hashchange", route);
  route();
});
