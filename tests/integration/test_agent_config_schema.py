"""docs/schema/agent-config.schema.json against what is really sent and parsed:
the configurations the Python package gives the agent (castscope.attach and
castscope run) are valid, the schema refuses what it should, and the agent's
C++ parser (castscope_policy_check, which parses a configuration without
starting anything) agrees with the schema on a set of samples."""
import ctypes
import json
import os
import pathlib
import subprocess
import sys

import jsonschema
import pytest

import castscope

REPO = pathlib.Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "docs" / "schema" / "agent-config.schema.json").read_text())
CPU_POLICY = str(REPO / "policies" / "cpu.json")

# Run in a subprocess: records every configuration castscope.attach hands to
# castscope_agent_start (at the C boundary, so whatever Python builds it) and
# starts nothing.
_CAPTURE_ATTACH = r"""
import ctypes, json, sys

sent = []

class Recording(ctypes.CDLL):
    def __getitem__(self, name):
        function = super().__getitem__(name)
        if name != "castscope_agent_start":
            return function

        def start(config, err, err_len):
            sent.append(json.loads(config.decode()))
            return 0
        return start

ctypes.CDLL = Recording
import torch  # noqa: E402,F401
import castscope  # noqa: E402

for kwargs in json.loads(sys.argv[1]):
    castscope.attach(**kwargs)
    castscope.detach()
print(json.dumps(sent))
"""


def _validator():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    return jsonschema.Draft202012Validator(SCHEMA)


def _schema_errors(config) -> list[str]:
    return [e.message for e in _validator().iter_errors(config)]


@pytest.fixture(scope="module")
def policy_check():
    """castscope_policy_check of the built agent: its parse errors, [] when
    the configuration is accepted."""
    lib = ctypes.CDLL(str(castscope.agent_library_path()))
    check = lib.castscope_policy_check
    check.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
    check.restype = ctypes.c_size_t

    def errors(config) -> list[str]:
        text = (config if isinstance(config, str) else json.dumps(config)).encode()
        size = 1 << 16
        while True:
            buf = ctypes.create_string_buffer(size)
            needed = check(text, buf, size)
            if needed < size:
                return json.loads(buf.value.decode())["errors"]
            size = needed + 1

    return errors


def _attach_configs(tmp_path, variants) -> list[dict]:
    result = subprocess.run([sys.executable, "-c", _CAPTURE_ATTACH, json.dumps(variants)], capture_output=True,
                            text=True, timeout=300, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    sent = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(sent) == len(variants), sent
    return sent


def test_schema_is_valid_draft_2020_12():
    jsonschema.Draft202012Validator.check_schema(SCHEMA)
    assert SCHEMA["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert SCHEMA["additionalProperties"] is False


def test_configs_from_castscope_attach_are_valid(tmp_path, policy_check):
    variants = [
        {"events_path": str(tmp_path / "a.jsonl")},
        {"events_path": str(tmp_path / "b.jsonl"), "policy_files": [CPU_POLICY], "record_events": False,
         "ring_records": 1024, "max_threads": 8, "run_id": "schema-run", "probe": False},
        {"events_path": str(tmp_path / "c.jsonl"), "collector": "127.0.0.1:7070", "spool_dir": str(tmp_path / "spool"),
         "probe": {"steps": 3, "every_steps": 0, "max_ms": 1000, "every_ms": 0}},
        {"events_path": str(tmp_path / "d.jsonl"), "aggregate": True},
    ]
    for config in _attach_configs(tmp_path, variants):
        assert _schema_errors(config) == [], config
        assert policy_check(config) == [], config
    # The optional keys attach sets are in the schema.
    assert {"ring_records", "max_threads", "run_id", "collector", "spool_dir", "probe_steps",
            "probe_every_steps", "probe_max_ms", "probe_every_ms", "aggregate"} <= set(SCHEMA["properties"])


def test_config_from_castscope_run_is_valid(tmp_path, policy_check):
    """castscope run passes the configuration in CASTSCOPE_CONFIG; the job prints it."""
    printer = "import os; print('CONFIG ' + os.environ['CASTSCOPE_CONFIG'])"
    result = subprocess.run([sys.executable, "-m", "castscope", "run", "--out", str(tmp_path / "out"), "--run-id",
                             "schema-run", "--ring-records", "2048", "--no-probe", "--aggregate", "--", sys.executable, "-c", printer],
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    [line] = [line for line in result.stdout.splitlines() if line.startswith("CONFIG ")]
    config = json.loads(line[len("CONFIG "):])
    assert config["run_id"] == "schema-run" and config["ring_records"] == 2048 and config["probe"] is False
    assert config["aggregate"] is True
    # What the preload (C++ programs) or castscope_boot (Python) adds before starting the agent.
    import torch
    config.update({"internal_path_prefix": os.path.dirname(torch.__file__) + os.sep,
                   "torch_version": torch.__version__})
    assert _schema_errors(config) == [], config
    assert policy_check(config) == [], config


def test_schema_refuses_unknown_keys_and_values_out_of_range():
    base = {"policy_files": [CPU_POLICY]}
    assert _schema_errors(base) == []
    unknown = _schema_errors({**base, "ring_record": 1024})
    assert unknown and "ring_record" in unknown[0]
    assert _schema_errors({**base, "max_threads": 4097})
    assert _schema_errors({**base, "ring_records": 0})
    assert _schema_errors({**base, "batch_events": 65537})
    assert _schema_errors({})


def _run_id(n):
    return "r" * n


GOOD = [
    {"policy_files": [CPU_POLICY]},
    {"policy_files": [CPU_POLICY], "events_path": None, "collector": None, "spool_dir": None},
    {"policy_files": [CPU_POLICY], "collector": ""},
    {"policy_files": [CPU_POLICY], "ring_records": 1, "max_threads": 1, "batch_events": 1, "flush_interval_ms": 1,
     "cache_sample_interval_ms": 1},
    {"policy_files": [CPU_POLICY], "ring_records": 1 << 24, "max_threads": 4096, "batch_events": 65536,
     "flush_interval_ms": 2**31 - 1},
    {"policy_files": [CPU_POLICY], "spool_segment_bytes": 4096, "spool_max_bytes": 4096},
    {"policy_files": [CPU_POLICY], "aggregate": True, "aggregate_max_keys": 16},
    {"policy_files": [CPU_POLICY], "aggregate": False, "aggregate_max_keys": 1 << 20},
    {"policy_files": [CPU_POLICY], "probe": True, "probe_steps": 1, "probe_every_steps": 0,
     "probe_max_ms": 1, "probe_every_ms": 0},
    # The old names of the schedule keys, still read (with a warning).
    {"policy_files": [CPU_POLICY], "probe_iterations": 1, "probe_every_iterations": 0, "numerics_iterations": 3,
     "numerics_every_iterations": 5, "numerics_skip_capture_iterations": 0, "gpu_window_steps": 0,
     "gpu_window_max_ms": 10},
    {"policy_files": [CPU_POLICY], "run_id": _run_id(256), "command": "python train.py", "token_env": "T",
     "tls_ca": "ca.pem", "forwarder_path": "/bin/true", "torch_version": "2.14.1", "internal_path_prefix": "/t/",
     "record_events": False, "events_path": "ev-{pid}.jsonl", "collector": "[::1]:7070", "spool_dir": "/tmp/s"},
]

BAD = [
    {},
    {"policy_files": []},
    {"policy_files": "cpu.json"},
    {"policy_files": [1]},
    {"policy_files": [CPU_POLICY], "ring_record": 1024},
    {"policy_files": [CPU_POLICY], "ring_records": 0},
    {"policy_files": [CPU_POLICY], "ring_records": -1},
    {"policy_files": [CPU_POLICY], "ring_records": (1 << 24) + 1},
    {"policy_files": [CPU_POLICY], "ring_records": "big"},
    {"policy_files": [CPU_POLICY], "ring_records": 1.5},
    {"policy_files": [CPU_POLICY], "ring_records": True},
    {"policy_files": [CPU_POLICY], "max_threads": 4097},
    {"policy_files": [CPU_POLICY], "flush_interval_ms": 0},
    {"policy_files": [CPU_POLICY], "flush_interval_ms": 2**31},
    {"policy_files": [CPU_POLICY], "cache_sample_interval_ms": -5},
    {"policy_files": [CPU_POLICY], "batch_events": 65537},
    {"policy_files": [CPU_POLICY], "spool_segment_bytes": 100},
    {"policy_files": [CPU_POLICY], "spool_max_bytes": 1000},
    {"policy_files": [CPU_POLICY], "record_events": 1},
    {"policy_files": [CPU_POLICY], "aggregate": "yes"},
    {"policy_files": [CPU_POLICY], "aggregate_max_keys": 15},
    {"policy_files": [CPU_POLICY], "aggregate_max_keys": (1 << 20) + 1},
    {"policy_files": [CPU_POLICY], "probe": "yes"},
    {"policy_files": [CPU_POLICY], "probe_steps": 0},
    {"policy_files": [CPU_POLICY], "probe_every_steps": -1},
    {"policy_files": [CPU_POLICY], "probe_iterations": 0},
    {"policy_files": [CPU_POLICY], "probe_max_ms": 0},
    {"policy_files": [CPU_POLICY], "probe_every_ms": -1},
    {"policy_files": [CPU_POLICY], "collector": "localhost"},
    {"policy_files": [CPU_POLICY], "collector": 7070},
    {"policy_files": [CPU_POLICY], "events_path": 5},
    {"policy_files": [CPU_POLICY], "token_env": None},
    {"policy_files": [CPU_POLICY], "run_id": _run_id(257)},
]


@pytest.mark.parametrize("config", GOOD, ids=lambda c: "good-" + ",".join(sorted(c)))
def test_parser_and_schema_accept_the_same(config, policy_check):
    assert _schema_errors(config) == []
    assert policy_check(config) == []


@pytest.mark.parametrize("config", BAD, ids=lambda c: "bad-" + json.dumps(c)[:60])
def test_parser_and_schema_refuse_the_same(config, policy_check):
    assert _schema_errors(config), f"the schema accepts {config}"
    errors = policy_check(config)
    assert len(errors) == 1 and errors[0].startswith("castscope: "), errors


def test_what_only_the_parser_checks(policy_check):
    """One rule relates two keys, which JSON Schema cannot say: the schema
    accepts, the parser refuses (the schema's description says so)."""
    config = {"policy_files": [CPU_POLICY], "spool_segment_bytes": 1 << 20, "spool_max_bytes": 1 << 16}
    assert _schema_errors(config) == []
    assert policy_check(config) == ["castscope: spool_max_bytes must be at least spool_segment_bytes"]
    assert "spool_max_bytes" in SCHEMA["description"]
    both_names = {"policy_files": [CPU_POLICY], "probe_steps": 2, "probe_iterations": 2}
    assert _schema_errors(both_names) == []
    assert policy_check(both_names) == ["castscope: give probe_steps or its old name probe_iterations, not both"]
    assert "old name" in SCHEMA["description"]


def test_parser_errors_name_the_key(policy_check):
    assert policy_check({"policy_files": [CPU_POLICY], "ring_record": 1}) == [
        'castscope: unknown configuration key "ring_record"']
    [error] = policy_check({"policy_files": [CPU_POLICY], "max_threads": "8"})
    assert '"max_threads"' in error and "expected an integer" in error
    [error] = policy_check('{"policy_files": [')
    assert error.startswith("castscope: configuration is not valid JSON")


def test_python_names_of_keys_are_the_schema_keys():
    """attach()'s dict options name configuration keys by shorter names: each
    is a key of the schema, and gpu_timing's cover every GPU key in it."""
    from castscope.attachment import _aggregate_config
    from castscope.config import GPU_TIMING_KEYS

    keys = set(SCHEMA["properties"])
    assert set(GPU_TIMING_KEYS.values()) == {key for key in keys if key.startswith(("gpu_", "cupti_", "cublaslt_"))}
    assert set(_aggregate_config({"max_keys": 16})) <= keys
