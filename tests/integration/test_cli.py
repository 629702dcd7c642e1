"""`castscope policy check` as a user runs it: a real subprocess."""
import os
import subprocess
import sys

import pytest


def _castscope(*args):
    return subprocess.run([sys.executable, "-m", "castscope", *args], capture_output=True, text=True, timeout=300)


def test_shipped_policies_pass():
    result = _castscope("policy", "check")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "castscope policy check: OK (cpu: 126 ops" in result.stdout


def test_refused_overlay_names_file_line_entry(tmp_path):
    overlay = tmp_path / "overlay.json"
    overlay.write_text('{"castscope_policy": 1, "device": "cpu", "ops": {\n  "aten::mm": "bf16"\n}}\n')
    result = _castscope("policy", "check", "--overlay", str(overlay))
    assert result.returncode == 1
    assert f'error: {overlay}:2: entry "aten::mm": unknown policy "bf16"' in result.stdout
    assert "REFUSED" in result.stdout


@pytest.mark.parametrize("imports,expect_unknown", [([], True), (["--import", "torchvision"], False)])
def test_third_party_ops_resolve_after_import(tmp_path, imports, expect_unknown):
    overlay = tmp_path / "overlay.json"
    overlay.write_text('{"castscope_policy": 1, "device": "cpu", "ops": {"torchvision::roi_pool": "fp32"}}')
    result = _castscope("policy", "check", "--policy", str(overlay), *imports)
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("unknown_op" in result.stdout and "torchvision::roi_pool" in result.stdout) == expect_unknown, result.stdout


def test_bad_arguments_exit_2():
    assert _castscope("policy", "frobnicate").returncode == 2
    assert _castscope("policy", "check", "--import", "no_such_module_xyz").returncode == 2


# Each used to start the job (or wait a minute on a name lookup first) and
# then fail, or dial something else: `--collector localhost:99999` wrapped to
# another port, `127.0.0.1:` dialed port 0, `--out FILE` was a traceback.
# Now each is a usage error naming the argument, and the job never starts.
@pytest.mark.parametrize("arguments,says", [
    (["--out", "{file}"], "argument --out: '{file}': is a file, not a folder"),
    (["--out", "{file}/sub"], "argument --out: '{file}/sub': {file} is a file, not a folder"),
    (["--collector", "bad:port:x"], "argument --collector: 'bad:port:x': expected HOST:PORT"),
    (["--collector", "localhost:99999"], "argument --collector: 'localhost:99999': the port must be a number from 1"),
    (["--collector", "127.0.0.1:"], "argument --collector: '127.0.0.1:': the port must be a number from 1 to 65535"),
    (["--collector", "nocolon"], "argument --collector: 'nocolon': expected HOST:PORT"),
    (["--collector", "unix:"], "argument --collector: 'unix:': unix: needs a path"),
    (["--collector", "no-such-host.invalid:5000"], "--collector no-such-host.invalid:5000: "),
    (["--ring-records", "-5"], "argument --ring-records: -5 is out of range for a ring size (1 to 16777216)"),
    (["--ring-records", "lots"], "argument --ring-records: 'lots' is not a ring size"),
    (["--give-up-after-s", "-1"], "argument --give-up-after-s: -1 is out of range for seconds"),
    (["--http-listen", "notanaddr"], "argument --http-listen: 'notanaddr': expected HOST:PORT"),
    (["--run-id", "r" * 257], "argument --run-id: a run id has 1 to 256 characters, not 257"),
    (["--tls-ca", "{file}.pem"], "argument --tls-ca: '{file}.pem': No such file or directory"),
    (["--tls-ca", "{fifo}"], "argument --tls-ca: '{fifo}': not a regular file"),  # opening it would wait
    (["--out", "x" * 300], "argument --out: '" + "x" * 300 + "': File name too long"),
    (["--collector", "127.0.0.1:5000", "--serve"], "--serve needs the embedded collector"),
    (["--collector", "127.0.0.1:5000", "--ship", "postgresql://w@127.0.0.1/castscope"],
     "--ship needs the embedded collector"),
])
def test_bad_run_arguments_are_usage_errors_before_the_job_starts(tmp_path, arguments, says):
    file = tmp_path / "a-file"
    file.write_text("")
    fifo = tmp_path / "a-fifo"
    os.mkfifo(fifo)
    arguments = [a.format(file=file, fifo=fifo) for a in arguments]
    says = says.format(file=file, fifo=fifo)
    result = subprocess.run([sys.executable, "-m", "castscope", "run", *arguments, "--", sys.executable, "-c",
                             "open('started', 'w')"], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr, result.stderr
    assert "Traceback" not in result.stderr, result.stderr
    assert not (tmp_path / "started").exists()
    assert not (tmp_path / "castscope-out").exists()  # nothing made either


@pytest.mark.parametrize("listen,says", [
    ("notanaddr", '--listen: "notanaddr": expected HOST:PORT'),
    ("127.0.0.1:99999", '--listen: "127.0.0.1:99999": the port must be a number from 0 to 65535'),
    ("unix:", '--listen: "unix:": unix: needs a path'),
])
def test_serve_names_a_bad_listen_address(tmp_path, listen, says):
    result = _castscope("serve", "--db", str(tmp_path / "c.db"), "--listen", listen)
    assert result.returncode == 2, result.stderr
    assert says in result.stderr, result.stderr
    assert "loopback" not in result.stderr, result.stderr


# A name is not loopback because it starts with "127.": it resolves wherever its owner wants.
@pytest.mark.parametrize("listen", ["127.evil.example:5000", "127.0.0.1.example:5000"])
def test_serve_wants_a_token_on_a_name_that_only_looks_like_loopback(tmp_path, listen):
    result = _castscope("serve", "--db", str(tmp_path / "c.db"), "--listen", listen)
    assert result.returncode == 2, result.stderr
    assert f"--listen {listen} is not a loopback address: give --token" in result.stderr, result.stderr
