"""One release number: project(castscope VERSION) in CMakeLists.txt, which
pyproject.toml repeats; every program prints it with --version, and a real
job through a real collector reports both sides' (docs/operations.md)."""
from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys
import tomllib

import torch

import castscope
from collector_server import Collector, wait_delivered
from test_transport import CASTSCOPE

REPO = pathlib.Path(__file__).resolve().parents[2]
FORWARDER = REPO / "build" / "agent" / "castscope-forwarder"


def _cmake_version() -> str:
    match = re.search(r"project\(castscope VERSION (\d+\.\d+\.\d+)", (REPO / "CMakeLists.txt").read_text())
    assert match, "CMakeLists.txt: no project(castscope VERSION X.Y.Z)"
    return match.group(1)


VERSION = _cmake_version()


def test_pyproject_says_the_cmake_version():
    pyproject = tomllib.loads((REPO / "agent" / "python" / "pyproject.toml").read_text())
    assert pyproject["project"]["version"] == VERSION, \
        "agent/python/pyproject.toml's version must equal project(castscope VERSION) in CMakeLists.txt"


def test_every_program_prints_the_version():
    collector = subprocess.run([str(castscope.collector_binary()), "--version"], capture_output=True, text=True)
    assert collector.returncode == 0 and collector.stdout.strip() == f"castscope-collector {VERSION}", collector
    forwarder = subprocess.run([str(FORWARDER), "--version"], capture_output=True, text=True)
    assert forwarder.returncode == 0 and forwarder.stdout.strip() == f"castscope-forwarder {VERSION}", forwarder
    cli = subprocess.run([*CASTSCOPE, "--version"], capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    lines = cli.stdout.splitlines()
    assert lines[0] == f"castscope {VERSION}"
    assert lines[1] == f"agent built for torch {torch.__version__.split('+')[0]}", lines


def test_a_real_job_reports_the_agent_and_collector_versions(tmp_path):
    collector = Collector(tmp_path / "store.db")
    job = tmp_path / "job.py"
    job.write_text("import torch\nwith torch.autocast('cpu', dtype=torch.bfloat16):\n"
                   "    torch.mm(torch.randn(4, 4), torch.randn(4, 4))\n")
    out = tmp_path / "out"
    try:
        result = subprocess.run([*CASTSCOPE, "run", "--out", str(out), "--no-jsonl", "--collector", collector.address,
                                 "--run-id", "versions", "--", sys.executable, str(job)],
                                capture_output=True, text=True, timeout=600)
        assert result.returncode == 0, result.stderr
        wait_delivered(out / "spool")
    finally:
        collector.stop()
    report_file = tmp_path / "report.json"
    text = subprocess.run([*CASTSCOPE, "report", "versions", "--db", str(collector.db), "--json", str(report_file)],
                          capture_output=True, text=True, timeout=300)
    assert text.returncode == 0, text.stderr
    report = json.loads(report_file.read_text())
    assert report["collector_version"] == VERSION
    [agent] = report["run"]["agents"]
    assert agent["castscope_version"] == VERSION
    assert agent["torch_version"] and torch.__version__.startswith(agent["torch_version"])
    assert f"castscope agent {VERSION}, collector {VERSION}" in text.stdout, text.stdout
