"""Audit reports: the JSON report of a run comes from the collector
(`castscope-collector report`, analyzers included); this module formats it
for people and compares two runs site by site."""
from __future__ import annotations

import json
import pathlib
import subprocess

from ._native import collector_binary


class ReportError(RuntimeError):
    pass


def load_report(db: str | pathlib.Path, run_id: str, rank: int | None = None, show_progress: bool = False) -> dict:
    """The audit report of `run_id` in the database `db`; with `rank`, of that
    rank's processes alone. `show_progress`: the collector writes to this
    process's stderr (a terminal: its progress line, and its own error
    message, which the ReportError then refers to)."""
    return PendingReport(db, run_id, rank, show_progress).result()


class PendingReport:
    """A report being built by `castscope-collector report` in the
    background (the database may still be open in a running collector: it
    reads what is committed)."""

    def __init__(self, db: str | pathlib.Path, run_id: str, rank: int | None = None, show_progress: bool = False):
        command = [str(collector_binary()), "report", "--db", str(db), "--run", run_id]
        if rank is not None:
            command += ["--rank", str(rank)]
        self._process = subprocess.Popen(command, stdout=subprocess.PIPE,
                                         stderr=None if show_progress else subprocess.PIPE, text=True)

    def result(self) -> dict:
        """The report; raises ReportError with the collector's message."""
        try:
            stdout, stderr = self._process.communicate(timeout=600)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.communicate()
            raise ReportError("castscope-collector report took more than 600 s") from None
        if self._process.returncode != 0:
            raise ReportError((stderr or "").strip() or
                              f"castscope-collector report exited with {self._process.returncode} (its message is "
                              f"above)")
        return json.loads(stdout)


def _site_text(site: dict) -> str:
    return f"{site['file']}:{site['line']} {site['op']}({site['arg']})"


def _agent_versions(run: dict) -> str:
    """The agents' castscope releases ("?" for agents too old to say)."""
    versions = sorted({a.get("castscope_version") or "?" for a in run["agents"]})
    return f"agent {', '.join(versions)}" if versions else "no agent"


def format_report(report: dict, top: int = 15) -> str:
    """A readable summary of a report for the terminal."""
    run, totals = report["run"], report["totals"]
    cache = totals["cache"]
    lines = [f"castscope report: run {run['run_id']} ({len(run['agents'])} process(es), "
             f"torch {', '.join(run['torch_versions']) or '?'}, devices {', '.join(run['devices']) or 'none'}, "
             f"policy {', '.join(run['policy_hashes']) or '?'})",
             f"  castscope {_agent_versions(run)}, collector {report.get('collector_version') or '?'}",
             f"  {totals['ops']} autocast ops ({totals['op_errors']} raised), {totals['casts']} cast decisions, "
             f"{totals['conversions']} conversions moving {totals['bytes_cast']} bytes",
             f"  cast cache: {cache['misses']} misses, {cache['hits']} hits, {cache['stale_hits']} stale hits "
             f"({cache.get('served_casts', 0)} casts served, {cache.get('bytes_served', 0)} bytes not converted again); "
             f"dropped events: {totals['events_dropped']}"]
    by_maker = totals.get("conversions_by_maker") or {}
    if set(by_maker) - {"autocast"}:  # reports before makers have none
        lines.append("  conversions by maker: " + ", ".join(
            f"{maker} {n}" for maker, n in sorted(by_maker.items(), key=lambda item: (-item[1], item[0]))))
    if totals.get("relabelled"):
        lines.append(f"  relabelled: {totals['relabelled']} autocast casts of float8 tensors took a new dtype label, "
                     "no data converted (not conversions)")
    float8 = [row for row in report.get("conversions", []) if row.get("float8")]
    if float8:
        lines.append(f"  float8 conversions with a known scale: {sum(row['float8']['conversions'] for row in float8)} "
                     f"({sum(row['float8']['zero_amax_conversions'] for row in float8)} with a zero amax)")
    if run.get("aggregate"):
        lines.append("  aggregate mode: counters only, no per-event records (docs/aggregate.md); not available in "
                     "aggregate mode: " + (", ".join(f["id"] for f in report.get("findings_not_available", [])) or "none"))
    compiled = totals.get("compile") or {}
    if compiled.get("decisions") or compiled.get("graph_runs"):
        lines.append(f"  torch.compile: {compiled.get('decisions', 0)} decisions while compiling (not counted), "
                     f"{compiled.get('graph_runs', 0)} compiled graph runs")
    accounting = totals.get("accounting")
    if accounting and not accounting["complete"]:
        why = []
        if accounting["unfinished_processes"]:
            why.append(f"{accounting['unfinished_processes']} process(es) did not finish (killed?), so their last "
                       f"counts never came")
        if accounting["events_unaccounted"]:
            why.append(f"{accounting['events_unaccounted']} recorded events are neither stored nor counted as dropped "
                       f"(still in a spool folder?)")
        if accounting["missing_batches"]:
            why.append(f"{accounting['missing_batches']} batches missing")
        lines.append(f"  INCOMPLETE: {accounting['events_stored']} of {accounting['events_recorded']} recorded events "
                     f"stored; " + "; ".join(why))
    overlay_errors = [(a["pid"], e) for a in run["agents"] for e in a.get("overlay_errors", [])]
    if overlay_errors:
        lines.append(f"  OVERLAY ERRORS: {len(overlay_errors)} module or function overlay entries skipped:")
        lines += [f"    pid {pid}: {error}" for pid, error in overlay_errors]
    if totals["casts_by_dtype_pair"]:
        pairs = ", ".join(f"{pair} {n}" for pair, n in sorted(totals["casts_by_dtype_pair"].items(),
                                                               key=lambda kv: -kv[1]))
        lines.append(f"  conversions by dtype: {pairs}")
    converting = [row for row in report["sites"] if row["outcome"] == "cast"]
    if converting:
        lines.append("  busiest casting sites (conversions, + served from the cast cache):")
        for row in sorted(converting, key=lambda r: -r["count"])[:top]:
            served = row["count"] - row.get("conversions", row["count"])
            lines.append(f"    {row.get('conversions', row['count']):>8}{f' +{served}' if served else '':<8}"
                         f"{_site_text(row['site'])}  {row['role']} {row['src_dtype']} -> "
                         f"{row['dst_dtype']} [{row['mode']}]")
    states = sorted({a["gpu_timing"] for a in run["agents"] if a.get("gpu_timing")})
    if states:
        lines.append(f"  GPU timing: {'; '.join(states)}")
    gpu = report.get("gpu") or {}
    if gpu.get("sites"):
        lines.append(f"  GPU time: casts {gpu['cast_ns'] / 1e6:.3f} ms, autocast ops {gpu['compute_ns'] / 1e6:.3f} ms "
                     f"({gpu['cast_share']:.0%} in casts), outside autocast ops {gpu['unattributed_ns'] / 1e6:.3f} ms")
        for row in gpu["sites"][:top]:
            lines.append(f"    {row['cast_ns'] / 1e6:>9.3f} ms casting {row['compute_ns'] / 1e6:>9.3f} ms computing "
                         f"({row['cast_share']:.0%})  {_site_text(row['site'])}")
    findings = report["findings"]
    lines.append(f"  findings: {len(findings)}" + ("" if findings else " (nothing to report)"))
    for finding in sorted(findings, key=lambda f: ["critical", "error", "warning", "info"].index(f["severity"])):
        where = f" at {_site_text(finding['sites'][0])}" if finding["sites"] else ""
        ranks = finding.get("ranks") or []
        on = f" (rank{'s' if len(ranks) > 1 else ''} {', '.join(map(str, ranks))})" if ranks else ""
        lines.append(f"    [{finding['severity']}] {finding['kind']}{where}{on}: {finding['summary']}")
        lines.append(f"        fix: {finding['fix']}")
    return "\n".join(lines)


def _behaviour_by_site(report: dict, casts_only: bool) -> dict:
    """(file, line, op, arg) -> sorted list of what happened there."""
    out: dict = {}
    for row in report["sites"]:
        if casts_only and row["outcome"] != "cast":
            continue
        site = row["site"]
        key = (site["file"], site["line"], site["op"], site["arg"])
        out.setdefault(key, set()).add((row["policy"], row["src_dtype"], row["dst_dtype"], row["outcome"]))
    return {key: sorted(value) for key, value in out.items()}


def diff_reports(a: dict, b: dict, casts_only: bool = False) -> list[dict]:
    """Sites where run A and run B cast differently, or only one of them cast.
    `casts_only`: compare conversions alone (an eager run against a compiled
    one, whose graphs hold only the casts, not the decisions that kept a dtype)."""
    behaviour_a, behaviour_b = _behaviour_by_site(a, casts_only), _behaviour_by_site(b, casts_only)
    differences = []
    for key in sorted(set(behaviour_a) | set(behaviour_b), key=lambda k: (k[0], k[1], k[2], k[3])):
        in_a, in_b = behaviour_a.get(key, []), behaviour_b.get(key, [])
        if in_a == in_b:
            continue
        file, line, op, arg = key
        differences.append({"site": {"file": file, "line": line, "op": op, "arg": arg},
                            "a": [dict(zip(("policy", "src_dtype", "dst_dtype", "outcome"), t)) for t in in_a],
                            "b": [dict(zip(("policy", "src_dtype", "dst_dtype", "outcome"), t)) for t in in_b]})
    return differences


def _compiled(report: dict) -> bool:
    """Whether a run ran torch.compile'd graphs (docs/events.md)."""
    return (any(row["mode"] == "compiled" for row in report["sites"]) or
            bool((report["totals"].get("compile") or {}).get("graph_runs")))


def _phases(row: dict) -> list[str]:
    backward = row.get("backward", 0)
    return (["backward"] if backward >= row["count"] else ["forward", "backward"]) if backward else ["forward"]


def _conversions_by_phase(report: dict) -> dict:
    """(file, line, op, arg, phase) -> sorted "src->dst" pairs cast there, whatever the mode."""
    out: dict = {}
    for row in report["sites"]:
        if row["outcome"] != "cast":
            continue
        site = row["site"]
        for phase in _phases(row):
            out.setdefault((site["file"], site["line"], site["op"], site["arg"], phase), set()).add(
                f"{row['src_dtype']}->{row['dst_dtype']}")
    return {key: sorted(value) for key, value in out.items()}


def diff_eager_compiled(a: dict, b: dict) -> dict | None:
    """Between an eager run and a torch.compile'd run of the same code: the
    sites (file, line, op, arg, phase) whose cast dtype pairs differ, or that
    cast in one run only. The mode itself (eager, compiled) is no difference:
    the same cast at the same line in both runs is the same site. None unless
    exactly one of the runs ran compiled graphs."""
    if _compiled(a) == _compiled(b):
        return None
    eager, compiled = (a, b) if _compiled(b) else (b, a)
    in_eager, in_compiled = _conversions_by_phase(eager), _conversions_by_phase(compiled)
    sites = []
    for key in sorted(set(in_eager) | set(in_compiled)):
        if in_eager.get(key, []) == in_compiled.get(key, []):
            continue
        file, line, op, arg, phase = key
        sites.append({"site": {"file": file, "line": line, "op": op, "arg": arg, "phase": phase},
                      "eager": in_eager.get(key, []), "compiled": in_compiled.get(key, [])})
    return {"eager_run": "a" if eager is a else "b", "sites": sites}


def format_diff(run_a: str, run_b: str, differences: list[dict], eager_compiled: dict | None = None) -> str:
    differs = bool(eager_compiled and eager_compiled["sites"])
    if not differences and not differs:
        return f"castscope diff: runs {run_a} and {run_b} cast the same way at every site"

    def describe(behaviour: list[dict]) -> str:
        if not behaviour:
            return "no autocast call (autocast off there, or the code did not run)"
        return "; ".join(f"{b['src_dtype']} -> {b['dst_dtype']} ({b['policy']}, {b['outcome']})" for b in behaviour)

    lines = [f"castscope diff: {len(differences)} site(s) differ between {run_a} (A) and {run_b} (B)"]
    for d in differences:
        site = d["site"]
        lines.append(f"  {site['file']}:{site['line']} {site['op']}({site['arg']})")
        lines.append(f"    A: {describe(d['a'])}")
        lines.append(f"    B: {describe(d['b'])}")
    if differs:
        eager, compiled = (run_a, run_b) if eager_compiled["eager_run"] == "a" else (run_b, run_a)
        lines.append(f"  eager vs compiled: {len(eager_compiled['sites'])} site(s) whose casts differ between "
                     f"{eager} (eager) and {compiled} (torch.compile)")
        for d in eager_compiled["sites"]:
            site = d["site"]
            lines.append(f"    {site['file']}:{site['line']} {site['op']}({site['arg']}) [{site['phase']}]")
            lines.append(f"      eager:    {', '.join(d['eager']) or 'no cast'}")
            lines.append(f"      compiled: {', '.join(d['compiled']) or 'no cast'}")
    return "\n".join(lines)


def _human_bytes(n: float) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def _precision_cells(row: dict, per_step: bool) -> str:
    parts = []
    for key, label in (("stored", "stored"), ("computed", "computed"), ("communicated", "communicated"),
                       ("cast_to", "cast to")):
        if row.get(key):
            parts.append(f"{label} {'/'.join(row[key])}")
    bytes_by_maker = row.get("bytes_per_step_by_maker") if per_step else row.get("bytes_by_maker")
    if bytes_by_maker:
        unit = "/step" if per_step else ""
        parts.append(", ".join(f"{maker} {_human_bytes(n)}{unit}" for maker, n in sorted(bytes_by_maker.items())))
    return "; ".join(parts) if parts else "no casts"


def format_precision_map(report: dict) -> str:
    """`castscope report --precision-map`: the report's precision map as a module tree."""
    precision = report.get("precision_map") or {}
    run = report.get("run", {}).get("run_id", "")
    if not precision.get("available", False):
        return f"castscope precision map of run {run}: not available ({precision.get('why', 'no precision map')})"
    steps = precision.get("optimizer_steps", 0)
    modules = precision.get("modules", [])
    lines = [f"castscope precision map of run {run}: {len(modules)} modules, "
             + (f"bytes per optimizer step ({steps} steps)" if steps else "bytes over the run (no optimizer step seen)")]
    if not modules:
        lines.append("  no cast happened inside an nn.Module call (attach from Python, and call the model as a module)")
    for module in modules:
        name = module["module"]
        depth = name.count(".")  # "<Root>.a.b": the root at 0
        indent = "  " * (depth + 1)
        lines.append(f"{indent}{name}: {_precision_cells(module, steps > 0)}")
        for parameter in module.get("parameters", []):
            lines.append(f"{indent}  .{parameter['name']}: {_precision_cells(parameter, steps > 0)}")
    return "\n".join(lines)

