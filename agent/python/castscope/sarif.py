"""A run's findings as SARIF 2.1.0 (OASIS), for code scanning services and
editors: one run, one rule per finding kind, one result per finding
(docs/sarif.md)."""
from __future__ import annotations

import functools
import json
import os
import pathlib
import subprocess
import urllib.parse

from ._native import collector_binary

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SOURCE_ROOT_ID = "SRCROOT"

# castscope severity -> SARIF level. SARIF has no level above "error": a
# critical finding keeps its own name in the result's properties.
LEVELS = {"critical": "error", "error": "error", "warning": "warning", "info": "note"}


@functools.lru_cache(maxsize=1)
def finding_catalog() -> tuple:
    """The finding catalog, declared once in the collector
    (server/src/analysis/finding_catalog.cc): `castscope-collector catalog`,
    one entry per kind with its default severity, title and why."""
    result = subprocess.run([str(collector_binary()), "catalog"], capture_output=True, text=True, timeout=60)
    if result.returncode != 0:
        raise RuntimeError(f"castscope-collector catalog exited with {result.returncode}: {result.stderr.strip()}")
    return tuple(json.loads(result.stdout))


def to_sarif(report: dict, source_root: str | os.PathLike, tool_version: str | None = None) -> dict:
    """The SARIF log of `report` (castscope-collector report's JSON), with
    source paths relative to `source_root` where they lie under it: a rule
    per kind of the catalog, in its order, then any kind it lacks."""
    root = pathlib.Path(os.path.abspath(source_root))
    catalog = {entry["kind"]: entry for entry in finding_catalog()}
    kinds = list(catalog) + sorted({f["kind"] for f in report["findings"]} - set(catalog))
    driver = {"name": "castscope", "rules": [_rule(kind, catalog.get(kind)) for kind in kinds]}
    if tool_version:
        driver["version"] = tool_version
    results = [_result(finding, kinds.index(finding["kind"]), root) for finding in report["findings"]]
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [{
        "tool": {"driver": driver},
        "originalUriBaseIds": {SOURCE_ROOT_ID: {"uri": root.as_uri().rstrip("/") + "/"}},  # a base ends with "/"
        "results": results,
        "properties": {"castscopeRunId": report["run"]["run_id"]},
    }]}


def _rule(kind: str, entry: dict | None) -> dict:
    severity, what, why = ((entry["severity"], entry["title"], entry["why"]) if entry is not None
                           else ("warning", f"castscope finding {kind}.", "See docs/diagnostics.md."))
    return {"id": kind, "name": "".join(word.capitalize() for word in kind.split("-")),
            "shortDescription": {"text": what}, "fullDescription": {"text": f"{what} {why}"},
            "help": {"text": f"castscope's docs/diagnostics.md, section \"{kind}\": the scenario that raises it, "
                             f"how it is detected and the fix."},
            "defaultConfiguration": {"level": LEVELS[severity]}, "properties": {"castscopeSeverity": severity}}


def _result(finding: dict, rule_index: int, root: pathlib.Path) -> dict:
    result = {"ruleId": finding["kind"], "ruleIndex": rule_index, "level": LEVELS[finding["severity"]],
              "message": {"text": f"{finding['summary']}.\nFix: {finding['fix']}"},
              # The finding id stays the same for the same kind at the same sites, across runs.
              "partialFingerprints": {"castscopeFindingId/v1": finding["id"]},
              "properties": {"castscopeSeverity": finding["severity"], "castscopeFindingId": finding["id"]}}
    sites = [_location(site, root) for site in finding["sites"]]
    if sites:
        result["locations"] = sites[:1]
        if sites[1:]:
            result["relatedLocations"] = [dict(location, id=i) for i, location in enumerate(sites[1:], start=1)]
    return result


def _location(site: dict, root: pathlib.Path) -> dict:
    """A site: its file and line where known, always its function and op."""
    location: dict = {"message": {"text": f"{site['op']}({site['arg']})" if site["arg"] else site["op"]}}
    if site["file"]:
        physical: dict = {"artifactLocation": _artifact(site["file"], root)}
        if site["line"] > 0:
            physical["region"] = {"startLine": site["line"]}
        location["physicalLocation"] = physical
    kind = "module" if site["function"] == "<module>" else "function"  # Python's name for top-level code
    location["logicalLocations"] = [{"name": site["function"] or site["op"], "kind": kind}]
    return location


def _artifact(file: str, root: pathlib.Path) -> dict:
    path = pathlib.PurePosixPath(file)
    if not path.is_absolute():
        return {"uri": urllib.parse.quote(file)}  # as recorded (e.g. a TorchScript source name)
    # As written, then with symbolic links resolved on both sides.
    for candidate, base in ((pathlib.Path(file), root), (pathlib.Path(file).resolve(), root.resolve())):
        try:
            relative = candidate.relative_to(base)
        except ValueError:
            continue
        return {"uri": urllib.parse.quote(relative.as_posix()), "uriBaseId": SOURCE_ROOT_ID}
    return {"uri": pathlib.Path(file).as_uri()}  # outside the source root: absolute
