"""`pip wheel .` builds one castscope wheel that works where it is installed:
built at the repository root (in the developer's build/, so nothing is
compiled again), installed into a fresh venv, and used from there with no
source tree in sight: `castscope run` (LD_PRELOAD, the embedded collector,
the report), `castscope.attach()`, `pytest --castscope` and the viewer.

The fresh venv sees the test venv's torch 2.14.1 (and the rest of its
packages, castscope's own left out) through symlinks and a .pth line, so
pip finds the torch the wheel requires already installed instead of
unpacking gigabytes again."""
from __future__ import annotations

import http.client
import json
import os
import pathlib
import subprocess
import sys
import sysconfig
import time
import urllib.parse
import zipfile

import pytest
from test_pytest_plugin import STALE as STALE_TEST, line_of

REPO = pathlib.Path(__file__).resolve().parents[2]

# The stale-cache scenario (tests/integration/scenarios), as a script and as a test.
STALE_TRAINING = (REPO / "tests" / "integration" / "scenarios" / "stale_cache.py").read_text() + '''
import sys
print("attached from", sys.modules["castscope"].__file__)  # imported by castscope_boot, the job never does
'''

ATTACHED = '''
import pathlib, sys
import torch
import castscope
from castscope.config import policies_dir

with castscope.attached(events_path=sys.argv[1]):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        torch.mm(torch.randn(4, 4), torch.randn(4, 4))  # the mm line
print(pathlib.Path(castscope.__file__).parent, castscope.agent_library_path(), policies_dir())
'''


def _run(*args, timeout=600, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout, **kwargs)


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> pathlib.Path:
    out = tmp_path_factory.mktemp("dist")
    built = _run(sys.executable, "-m", "pip", "wheel", REPO, "--no-build-isolation", "--no-deps", "--no-index",
                 "-w", out, "-Cbuild-dir=build", cwd=REPO)
    assert built.returncode == 0, built.stdout[-6000:] + built.stderr[-6000:]
    wheels = list(out.glob("castscope-*.whl"))
    assert len(wheels) == 1, wheels
    return wheels[0]


@pytest.fixture(scope="module")
def venv(tmp_path_factory, wheel):
    """A fresh venv with the wheel installed by pip (which must find the torch it requires)."""
    root = tmp_path_factory.mktemp("fresh")
    venv = root / "venv"
    # No pip or setuptools of its own: the test venv's come with torch (which needs setuptools >= 77).
    created = _run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert created.returncode == 0, created.stderr
    python = venv / "bin" / "python"
    site = pathlib.Path(_run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    beside = root / "torch-and-friends"
    beside.mkdir()
    for entry in pathlib.Path(sysconfig.get_paths()["purelib"]).iterdir():
        if "castscope" not in entry.name.lower() and entry.suffix != ".pth":
            (beside / entry.name).symlink_to(entry)
    (site / "torch-and-friends.pth").write_text(f"{beside}\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASTSCOPE_") and k not in ("PYTHONPATH",
                                                                                                 "PYTEST_ADDOPTS")}
    installed = _run(python, "-m", "pip", "install", "--no-index", wheel, env=env, cwd=root)
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv, env, site


def test_the_wheel_holds_everything_and_requires_its_torch(wheel):
    import torch

    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = next(archive.read(n).decode() for n in names if n.endswith(".dist-info/METADATA"))
    for native in ("libcastscope_agent.so", "libcastscope_preload.so", "libcastscope_python.so",
                   "libcastscope_policy_lint.so", "castscope-forwarder", "castscope-collector"):
        assert f"castscope/{native}" in names, native
    for device in ("cpu", "cuda"):
        assert f"castscope/policies/{device}.json" in names
    assert "castscope/ui/index.html" in names
    assert "castscope/__init__.py" in names and "castscope/cli/run.py" in names
    assert "castscope_boot/sitecustomize.py" in names
    assert not [n for n in names if "__pycache__" in n or n.endswith("_test") or "/build/" in n]
    # No path of the machine that built it (the preload shim once held the source tree's, as a fallback).
    with zipfile.ZipFile(wheel) as archive:
        holding = [n for n in names if str(REPO).encode() in archive.read(n)]
    assert holding == [], holding
    release = torch.__version__.split("+")[0]
    assert f"Requires-Dist: torch=={release}" in metadata.splitlines(), metadata


def test_castscope_run_from_the_installed_wheel(tmp_path, venv):
    venv, env, site = venv
    (tmp_path / "train.py").write_text(STALE_TRAINING)
    ran = _run(venv / "bin" / "castscope", "run", "--out", "out", "--", venv / "bin" / "python", "train.py",
               env=env, cwd=tmp_path)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 0, output
    assert "stored in" in output, output
    assert f"attached from {site / 'castscope' / '__init__.py'}" in ran.stdout, output
    report = json.loads((tmp_path / "out" / "report.json").read_text())
    stale_at = {(s["file"], s["line"]) for f in report["findings"] if f["kind"] == "stale-cache-hit" for s in f["sites"]}
    assert (str(tmp_path / "train.py"), line_of(STALE_TRAINING, "the stale line")) in stale_at, report["findings"]
    reported = _run(venv / "bin" / "castscope", "report", report["run"]["run_id"], "--db", "out/castscope.db",
                    env=env, cwd=tmp_path)
    assert reported.returncode == 0, reported.stdout + reported.stderr
    assert f"train.py:{line_of(STALE_TRAINING, 'the stale line')}" in reported.stdout + reported.stderr

    url_file = tmp_path / "viewer.url"
    viewer = subprocess.Popen([str(site / "castscope" / "castscope-collector"), "view", "--db",
                               str(tmp_path / "out" / "castscope.db"), "--viewer-file", str(url_file)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    try:
        deadline = time.monotonic() + 30
        while not url_file.exists():
            assert viewer.poll() is None, viewer.stderr.read().decode(errors="replace")
            assert time.monotonic() < deadline, "viewer not ready in 30 s"
            time.sleep(0.05)
        url = urllib.parse.urlparse(url_file.read_text().strip())
        token = urllib.parse.parse_qs(url.query)["token"][0]
        connection = http.client.HTTPConnection(url.hostname, url.port, timeout=30)
        connection.request("GET", "/", headers={"Authorization": f"Bearer {token}"})
        response = connection.getresponse()
        assert response.status == 200
        assert response.read() == (site / "castscope" / "ui" / "index.html").read_bytes()
    finally:
        viewer.kill()
        viewer.wait()


def test_attach_from_the_installed_wheel(tmp_path, venv):
    venv, env, site = venv
    (tmp_path / "job.py").write_text(ATTACHED)
    ran = _run(venv / "bin" / "python", "job.py", tmp_path / "events.jsonl", env=env, cwd=tmp_path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    package, agent, policies = ran.stdout.split()
    assert pathlib.Path(package) == site / "castscope"
    assert pathlib.Path(agent) == site / "castscope" / "libcastscope_agent.so"
    assert pathlib.Path(policies) == site / "castscope" / "policies"
    casts = [json.loads(line).get("cast") for line in (tmp_path / "events.jsonl").read_text().splitlines()]
    at = {(c["op"], c["location"]["file"], c["location"]["line"]) for c in casts if c}
    assert at == {("aten::mm", str(tmp_path / "job.py"), line_of(ATTACHED, "the mm line"))}, at


def test_pytest_castscope_from_the_installed_wheel(tmp_path, venv):
    venv, env, site = venv
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "test_stale.py").write_text(STALE_TEST)
    ran = _run(venv / "bin" / "python", "-m", "pytest", "-p", "no:cacheprovider", "--rootdir", suite, "--castscope",
               "--castscope-out", tmp_path / "out", suite, env=env, cwd=suite)
    output = ran.stdout + ran.stderr
    assert ran.returncode == 1, output  # the stale cache hit is critical: the run fails
    assert "1 passed" in ran.stdout, output
    assert (f"FAIL [critical] stale-cache-hit at test_stale.py:{line_of(STALE_TEST, 'the stale line')}"
            in ran.stdout), output
