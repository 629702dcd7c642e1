"""`pytest --castscope` as a user runs it: a small real suite, written to
tmp_path, run by a real pytest in a subprocess with castscope attached and a
real collector; the plugin must name the test and line of each finding,
fail the run at the threshold, and change nothing else."""
from __future__ import annotations

import os
import subprocess
import sys

import torch

from helpers import line_of, scenario_code

CLEAN = '''
import torch


def train_step_outputs():
    torch.manual_seed(0)
    model = torch.nn.Linear(16, 16)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    outputs = []
    for _ in range(3):
        with torch.autocast("cpu", dtype=torch.bfloat16):  # one region per step: nothing to report
            loss = model(torch.randn(8, 16)).float().pow(2).mean()
        outputs.append(loss.detach())
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    return torch.stack(outputs)


def test_recommended_loop(tmp_path_factory):
    torch.save(train_step_outputs(), {outputs!r})
'''

STALE = '''
import torch


def test_whole_loop_in_one_region():
''' + scenario_code("stale_cache.py", indent="    ")

BACKWARD = '''
import torch


def test_backward_in_region():
    model = torch.nn.Linear(16, 16)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss = model(torch.randn(8, 16)).float().pow(2).mean()
        loss.backward()  # the backward line
'''


def write_suite(root, files: dict) -> None:
    root.mkdir()
    for name, text in files.items():
        (root / name).write_text(text)


def run_pytest(root, *args: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("CASTSCOPE_CONFIG", "PYTEST_ADDOPTS")}
    # -p castscope.pytest: the pytest11 entry point loads it too once the package is installed.
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "castscope.pytest", "-p", "no:cacheprovider",
                           "--rootdir", str(root), *args, str(root)], cwd=root, env=env, capture_output=True,
                          text=True, timeout=600)


def test_a_finding_fails_the_run_and_names_the_test_and_line(tmp_path):
    suite = tmp_path / "suite"
    write_suite(suite, {"test_clean.py": CLEAN.format(outputs=str(tmp_path / "outputs.pt")),
                        "test_stale.py": STALE, "test_backward.py": BACKWARD})
    result = run_pytest(suite, "--castscope=critical", "--castscope-out", str(tmp_path / "out"))
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "3 passed" in result.stdout, output  # the tests themselves still pass
    stale_line = line_of(STALE, "the stale line")
    assert (f"FAIL [critical] stale-cache-hit at test_stale.py:{stale_line} in "
            f"test_stale.py::test_whole_loop_in_one_region") in result.stdout, output
    # Below the threshold: reported, named, not failing.
    backward_line = line_of(BACKWARD, "the backward line")
    assert (f"note [warning] backward-under-autocast at test_backward.py:{backward_line} in "
            f"test_backward.py::test_backward_in_region") in result.stdout, output
    assert "in test_clean.py" not in result.stdout, output
    assert "at or above critical: the run fails" in result.stdout, output
    assert (tmp_path / "out" / "report.json").stat().st_mode & 0o777 == 0o600


def test_no_finding_at_the_threshold_keeps_exit_0_and_outputs(tmp_path):
    suite = tmp_path / "suite"
    outputs = tmp_path / "outputs.pt"
    write_suite(suite, {"test_clean.py": CLEAN.format(outputs=str(outputs)), "test_backward.py": BACKWARD})
    result = run_pytest(suite, "-q", "--castscope")  # default threshold: error; the warning does not fail
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "note [warning] backward-under-autocast" in result.stdout, output
    assert "castscope: 1 finding(s); no finding at or above error" in result.stdout, output
    # The same steps with native autocast here, castscope not attached: bit-identical.
    namespace: dict = {}
    exec(compile(CLEAN.format(outputs=str(outputs)), "clean", "exec"), namespace)
    assert torch.equal(torch.load(outputs), namespace["train_step_outputs"]())


def test_a_bad_severity_is_a_usage_error(tmp_path):
    suite = tmp_path / "suite"
    write_suite(suite, {"test_nothing.py": "def test_nothing():\n    pass\n"})
    result = run_pytest(suite, "--castscope=fatal")
    assert result.returncode == 4, result.stdout + result.stderr
    assert "--castscope=fatal: not a castscope severity (info, warning, error, critical)" in result.stderr
