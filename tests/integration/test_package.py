"""agent/python installs as a package: pip, editable, offline, into a fresh
venv (torch seen through a .pth line, not installed again), and the venv's
`castscope` command finds and loads the native agent in the build tree."""
import os
import pathlib
import subprocess
import sys
import sysconfig

REPO = pathlib.Path(__file__).resolve().parents[2]


def _run(*args, **kwargs):
    return subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=300, **kwargs)


def test_editable_install_into_a_fresh_venv(tmp_path):
    venv = tmp_path / "venv"
    # No pip of its own: `python -m pip` below runs the test venv's pip, through the .pth line.
    created = _run(sys.executable, "-m", "venv", "--without-pip", venv)
    assert created.returncode == 0, created.stderr
    python = venv / "bin" / "python"
    site = _run(python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    # torch 2.14.1, pip and setuptools from the test's venv, after the new venv's own site-packages.
    (pathlib.Path(site) / "castscope-test-base.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    env = {k: v for k, v in os.environ.items() if not k.startswith("CASTSCOPE_") and k != "PYTHONPATH"}

    install = _run(python, "-m", "pip", "install", "--no-index", "--no-build-isolation", "-e", REPO / "agent" / "python",
                   env=env)
    assert install.returncode == 0, install.stdout + install.stderr
    # The package must never make pip fetch torch.
    requires = _run(python, "-c", "import importlib.metadata as m; print(m.distribution('castscope').requires)", env=env)
    assert requires.stdout.strip() == "None", requires.stdout + requires.stderr

    castscope = venv / "bin" / "castscope"
    helped = _run(castscope, "--help", env=env, cwd=tmp_path)
    assert helped.returncode == 0, helped.stderr
    assert "policy" in helped.stdout and "run" in helped.stdout

    where = _run(python, "-c", "import castscope; print(castscope.__file__); print(castscope.agent_library_path())",
                 env=env, cwd=tmp_path)
    assert where.returncode == 0, where.stderr
    package, agent = where.stdout.split()
    assert pathlib.Path(package) == REPO / "agent" / "python" / "castscope" / "__init__.py"
    assert pathlib.Path(agent) == REPO / "build" / "agent" / "libcastscope_agent.so"

    checked = _run(castscope, "policy", "check", env=env, cwd=tmp_path)  # loads the agent into torch
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert "castscope policy check: OK" in checked.stdout
