"""`castscope report RUN --sarif FILE`: the findings of a real run (a real
torch job under `castscope run`, a real collector) as SARIF 2.1.0, valid
against the published schema, with the report's rules, levels and lines."""
from __future__ import annotations

import hashlib
import json
import pathlib
import subprocess
import sys

import jsonschema

from castscope.sarif import to_sarif
from helpers import line_of, scenario_code


SCHEMA_FILE = pathlib.Path(__file__).parent / "sarif" / "sarif-2.1.0-rtm.5.json"
SCHEMA_SHA256 = "2d99159ae54a3eea97f81781cff48780548657c35949f4b7f25e99a2ba4de4f8"  # sarif/README.md
CASTSCOPE = [sys.executable, "-m", "castscope"]

TRAIN = '''import sys

import torch

sys.path.insert(0, {lib!r})
import helper

''' + scenario_code("stale_cache.py").replace("loss.backward()", "helper.backward(loss)")  # backward in another file
HELPER = '''def backward(loss):
    loss.backward()  # the backward line
'''


def validate(sarif: dict) -> None:
    data = SCHEMA_FILE.read_bytes()
    assert hashlib.sha256(data).hexdigest() == SCHEMA_SHA256, f"{SCHEMA_FILE} is not the copy sarif/README.md names"
    schema = json.loads(data)
    jsonschema.validators.validator_for(schema)(schema).validate(sarif)  # draft-04


def test_a_real_runs_findings_as_sarif(tmp_path):
    src, lib, out = tmp_path / "src", tmp_path / "lib", tmp_path / "out"
    src.mkdir()
    lib.mkdir()
    (src / "train.py").write_text(TRAIN.format(lib=str(lib)))
    (lib / "helper.py").write_text(HELPER)
    job = subprocess.run([*CASTSCOPE, "run", "--out", str(out), "--run-id", "sarif", "--no-probe", "--",
                          sys.executable, str(src / "train.py")], capture_output=True, text=True, timeout=600)
    assert job.returncode == 0, job.stderr
    sarif_path = tmp_path / "findings.sarif"
    result = subprocess.run([*CASTSCOPE, "report", "sarif", "--db", str(out / "castscope.db"), "--sarif",
                             str(sarif_path), "--source-root", str(src)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert sarif_path.stat().st_mode & 0o777 == 0o600
    sarif = json.loads(sarif_path.read_text())
    validate(sarif)
    report = json.loads((out / "report.json").read_text())

    [run] = sarif["runs"]
    driver = run["tool"]["driver"]
    assert driver["name"] == "castscope"
    rule_ids = [rule["id"] for rule in driver["rules"]]
    assert {"stale-cache-hit", "backward-under-autocast"} <= set(rule_ids)
    assert driver["rules"][rule_ids.index("stale-cache-hit")]["defaultConfiguration"]["level"] == "error"
    assert run["originalUriBaseIds"]["SRCROOT"]["uri"] == src.as_uri() + "/"

    # One result per finding, in the report's order, each with its rule, level and line.
    assert len(run["results"]) == len(report["findings"])
    levels = {"critical": "error", "error": "error", "warning": "warning", "info": "note"}
    for finding, res in zip(report["findings"], run["results"]):
        assert res["ruleId"] == finding["kind"] == rule_ids[res["ruleIndex"]]
        assert res["level"] == levels[finding["severity"]]
        assert res["message"]["text"].startswith(finding["summary"])
        region = res["locations"][0]["physicalLocation"]["region"]
        assert region["startLine"] == finding["sites"][0]["line"]

    by_kind = {res["ruleId"]: res for res in run["results"]}
    stale = by_kind["stale-cache-hit"]["locations"][0]["physicalLocation"]
    assert stale["artifactLocation"] == {"uri": "train.py", "uriBaseId": "SRCROOT"}  # inside the root
    assert stale["region"]["startLine"] == line_of(TRAIN, "the stale line")
    backward = by_kind["backward-under-autocast"]["locations"][0]["physicalLocation"]
    assert backward["artifactLocation"] == {"uri": (lib / "helper.py").as_uri()}  # outside it: absolute
    assert backward["region"]["startLine"] == line_of(HELPER, "the backward line")

    # A finding about the whole run (tf32-matmul without sites, as on a GPU) gets no location.
    run_level = {"id": "tf32-matmul/0123456789abcdef", "kind": "tf32-matmul", "severity": "info",
                 "summary": "float32 matmuls ran as TF32", "explanation": "", "fix": "", "sites": [], "evidence": {}}
    report["findings"].append(run_level)
    with_run_level = to_sarif(report, src)
    validate(with_run_level)
    last = with_run_level["runs"][0]["results"][-1]
    assert last["level"] == "note" and "locations" not in last


def test_source_root_must_be_a_directory(tmp_path):
    result = subprocess.run([*CASTSCOPE, "report", "any", "--db", str(tmp_path / "none.db"), "--sarif",
                             str(tmp_path / "x.sarif"), "--source-root", str(tmp_path / "missing")],
                            capture_output=True, text=True, timeout=300)
    assert result.returncode == 2
    assert f"--source-root {tmp_path / 'missing'}: not a directory" in result.stderr
