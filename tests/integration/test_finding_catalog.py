"""The finding catalog is declared once, in the collector
(server/src/analysis/finding_catalog.cc, printed by `castscope-collector
catalog`); SARIF's rules come from it, and this test holds the report
schema's kind enum and docs/diagnostics.md's sections equal to it."""
from __future__ import annotations

import json
import pathlib
import re
import subprocess

from castscope._native import collector_binary
from castscope.sarif import LEVELS, finding_catalog, to_sarif

REPO = pathlib.Path(__file__).resolve().parents[2]


def catalog() -> list[dict]:
    result = subprocess.run([str(collector_binary()), "catalog"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def test_every_entry_is_whole_and_names_a_kind_once():
    entries = catalog()
    kinds = [entry["kind"] for entry in entries]
    assert len(kinds) == len(set(kinds)) >= 17
    for entry in entries:
        assert set(entry) == {"kind", "severity", "family", "title", "why"}, entry
        assert re.fullmatch(r"[a-z0-9]+(-[a-z0-9]+)*", entry["kind"]), entry
        assert entry["severity"] in LEVELS, entry
        assert entry["family"] in {"cache", "modes", "precision", "numerics"}, entry
        assert entry["title"].endswith(".") and entry["why"].endswith("."), entry


def test_the_report_schema_enumerates_the_catalogs_kinds():
    schema = json.loads((REPO / "docs" / "schema" / "report.schema.json").read_text())
    assert schema["$defs"]["finding"]["properties"]["kind"]["enum"] == [entry["kind"] for entry in catalog()]


def test_diagnostics_has_a_section_per_kind_with_its_default_severity():
    """`## kind (severity...)`: one per kind, none for a kind the catalog lacks."""
    text = (REPO / "docs" / "diagnostics.md").read_text()
    sections = {kind: severity for kind, severity in re.findall(r"(?m)^## ([a-z0-9-]+) \((\w+)", text)}
    assert sections == {entry["kind"]: entry["severity"] for entry in catalog()}


def test_sarif_has_a_rule_per_kind_in_the_catalogs_order(tmp_path):
    report = {"run": {"run_id": "r"}, "findings": []}
    rules = to_sarif(report, tmp_path)["runs"][0]["tool"]["driver"]["rules"]
    assert [rule["id"] for rule in rules] == [entry["kind"] for entry in finding_catalog()]
    for rule, entry in zip(rules, catalog()):
        assert rule["shortDescription"]["text"] == entry["title"]
        assert rule["fullDescription"]["text"] == f"{entry['title']} {entry['why']}"
        assert rule["properties"]["castscopeSeverity"] == entry["severity"]
