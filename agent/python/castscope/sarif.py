"""A run's findings as SARIF 2.1.0 (OASIS), for code scanning services and
editors: one run, one rule per finding kind, one result per finding
(docs/sarif.md)."""
from __future__ import annotations

import os
import pathlib
import urllib.parse

SCHEMA_URI = "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
SOURCE_ROOT_ID = "SRCROOT"

# castscope severity -> SARIF level. SARIF has no level above "error": a
# critical finding keeps its own name in the result's properties.
LEVELS = {"critical": "error", "error": "error", "warning": "warning", "info": "note"}

# kind -> (default severity, what, why it matters); docs/diagnostics.md has one section per kind.
RULES = {
    "stale-cache-hit": ("critical", "A cached low-precision weight was served after the weight changed in place.",
                        "The forward pass used old weights: training is silently wrong."),
    "cache-growth": ("warning", "Live cached casts grew across iterations.",
                     "An autocast region that never exits and meets new leaves each step grows memory without bound."),
    "backward-under-autocast": ("warning", "Backward ops ran with autocast enabled.",
                                "Not recommended by PyTorch; the backward pass may get unexpected dtypes."),
    "mode-mismatch": ("warning", "The same line computes in different dtypes in eager, scripted or traced execution.",
                      "What was tested is not numerically what ships."),
    "script-disable-ignored": ("error", "Scripted autocast(enabled=False) did not keep full precision under eager "
                                        "autocast.",
                               "Code meant to run in float32 runs in lower precision, silently."),
    "trace-dropped-autocast": ("error", "autocast(enabled=False) inside a traced function was not kept in the graph.",
                               "The traced graph computes in lower precision where the source asked for float32."),
    "script-under-trace": ("error", "A traced function calls TorchScript with autocast enabled.",
                           "PyTorch does not support this combination; the recorded dtypes may not be what runs."),
    "low-precision-escape": ("warning", "A low-precision tensor made inside an autocast region met float32 outside "
                                        "it.",
                             "It causes 'expected scalar type' errors or silent type promotion."),
    "cast-churn": ("warning", "The same tensor was cast down and up again repeatedly.",
                   "Wasted memory bandwidth and kernel time."),
    "not-autocast": ("warning", "In-place, out=, float64 or unlisted custom ops ran without autocast.",
                     "The op computed in the dtype it was handed, uncast, inside a region where the code around it is cast."),
    "compile-mismatch": ("warning", "A line computes in different dtypes compiled with torch.compile and eagerly.",
                         "What was debugged eagerly is not numerically what runs compiled."),
    "cast-share": ("warning", "Cast kernels take a large share of a site's GPU time.",
                   "The casts may cost more than the lower precision saves."),
    "tf32-matmul": ("info", "float32 matmuls ran on tensor cores as TF32.",
                    "A precision the code did not ask for."),
    "cast-overflow": ("error", "Casting to a lower precision turned finite values into inf.",
                      "The op computes on inf: its result, the loss and the gradients go non-finite."),
    "cast-underflow": ("warning", "Casting to a lower precision turned nonzero values into 0.",
                       "Epsilons and small gradients vanish silently."),
    "nonfinite-output": ("error", "An autocast op produced inf or NaN from finite inputs.",
                         "Its lower-precision output overflowed; the loss and gradients follow."),
    "scaler-skips": ("warning", "GradScaler skipped optimizer steps after its scale had settled.",
                     "Each skip throws a training step away; something overflows again and again."),
}


def to_sarif(report: dict, source_root: str | os.PathLike, tool_version: str | None = None) -> dict:
    """The SARIF log of `report` (castscope-collector report's JSON), with
    source paths relative to `source_root` where they lie under it."""
    root = pathlib.Path(os.path.abspath(source_root))
    kinds = list(RULES) + sorted({f["kind"] for f in report["findings"]} - set(RULES))
    driver = {"name": "castscope", "rules": [_rule(kind) for kind in kinds]}
    if tool_version:
        driver["version"] = tool_version
    results = [_result(finding, kinds.index(finding["kind"]), root) for finding in report["findings"]]
    return {"$schema": SCHEMA_URI, "version": "2.1.0", "runs": [{
        "tool": {"driver": driver},
        "originalUriBaseIds": {SOURCE_ROOT_ID: {"uri": root.as_uri().rstrip("/") + "/"}},  # a base ends with "/"
        "results": results,
        "properties": {"castscopeRunId": report["run"]["run_id"]},
    }]}


def _rule(kind: str) -> dict:
    severity, what, why = RULES.get(kind, ("warning", f"castscope finding {kind}.", "See docs/diagnostics.md."))
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
