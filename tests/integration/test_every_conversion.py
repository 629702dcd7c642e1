"""Every conversion of a job, whoever made it (docs/events.md, "Makers"): a
TorchDispatchMode below autocast and autograd counts the dtype-changing
_to_copy / copy_ calls of a real job natively; castscope's report counts the
same, split by maker, and the job's results stay bit-identical."""
from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import jsonschema
import pytest

from castscope.report import format_report, load_report
from helpers import line_of

HERE = pathlib.Path(__file__).parent
REPO = HERE.parents[1]
SCHEMA = json.loads((REPO / "docs" / "schema" / "report.schema.json").read_text())
SCENARIO = HERE / "scenarios" / "explicit_casts.py"


def _castscope_run(tmp_path: pathlib.Path, script: pathlib.Path, *flags: str, job_args: tuple = ()) -> tuple[dict, str]:
    out = tmp_path / ("out" + "".join(flags).replace("-", "_"))
    result = subprocess.run([sys.executable, "-m", "castscope", "run", "--out", str(out), "--run-id", "every", *flags,
                             "--", sys.executable, str(script), *job_args], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr
    report = json.loads((out / "report.json").read_text())
    jsonschema.validate(report, SCHEMA)
    return report, result.stdout


def _dtype_pairs(pairs: dict) -> dict:
    """The mode's "torch.float32->torch.bfloat16" as the report names them."""
    return {key.replace("torch.", ""): n for key, n in pairs.items()}


def test_a_llama_steps_every_conversion_is_counted_by_maker(tmp_path):
    job = HERE / "jobs" / "llama_steps.py"
    native = subprocess.run([sys.executable, str(job), "--count"], capture_output=True, text=True, timeout=600)
    assert native.returncode == 0, native.stderr
    counted = json.loads(native.stdout.strip().splitlines()[-1])
    # The mode counts under castscope too: a dispatch mode changes the path
    # some ops take (CPU sdpa converts 4 times more without one), so the
    # report is compared with the count of the same process.
    report, stdout = _castscope_run(tmp_path, job, job_args=("--count",))
    ours = json.loads(stdout.strip().splitlines()[-1])
    assert ours["losses"] == counted["losses"] and ours["weights"] == counted["weights"], "training diverged"
    assert ours["conversions"] == counted["conversions"] and ours["pairs"] == counted["pairs"]

    totals = report["totals"]
    assert counted["step_conversions"] == 249  # transformers 5.23, torch 2.14.1: the measurement
    assert totals["conversions"] == ours["conversions"]
    assert totals["casts_by_dtype_pair"] == _dtype_pairs(ours["pairs"])
    by_maker = totals["conversions_by_maker"]
    assert sum(by_maker.values()) == totals["conversions"]
    # Autocast's casts and their gradients' way back, one each.
    assert by_maker["autocast"] == by_maker["autocast_backward"] > 0, by_maker

    # Without the mode (whose frame is then the innermost outside torch): the
    # model's own conversions at transformers' lines, autograd's other backward ones.
    report, _ = _castscope_run(tmp_path / "without_mode", job)
    totals = report["totals"]
    by_maker = totals["conversions_by_maker"]
    assert sum(by_maker.values()) == totals["conversions"]
    assert by_maker["autograd"] > 0 and by_maker["transformers"] > 0, by_maker
    assert set(by_maker) == {"autocast", "autocast_backward", "autograd", "transformers"}, by_maker
    rows = report["conversions"]
    assert sum(r["count"] for r in rows) == totals["conversions"] - by_maker["autocast"]
    assert all("/transformers/" in r["site"]["file"] for r in rows if r["maker"] == "transformers")
    assert {r["role"] for r in rows if r["maker"] in ("autograd", "autocast_backward")} == {"gradient"}

    # The precision map: every conversion of the steps happens inside a module call of the model
    # (the loss too: LlamaForCausalLM computes it), the backward's at the module its forward ran in.
    precision = report["precision_map"]
    assert precision["available"] and precision["optimizer_steps"] == 3
    modules = {m["module"]: m for m in precision["modules"]}
    assert sum(m["conversions"] for m in modules.values()) == totals["conversions"]
    assert next(iter(modules)) == "<LlamaForCausalLM>"  # the root first
    for layer in (0, 1):
        q_proj = modules[f"<LlamaForCausalLM>.model.layers.{layer}.self_attn.q_proj"]
        weight = {p["name"]: p for p in q_proj["parameters"]}["weight"]
        assert (weight["stored"], weight["computed"], weight["cast_to"]) == (["float32"], ["bfloat16"], ["bfloat16"])
        assert set(weight["bytes_by_maker"]) == {"autocast"} and weight["bytes_per_step_by_maker"]["autocast"] > 0
        # Its input's cast, and the gradients' way back (the backward at the module of its forward).
        assert {"autocast", "autocast_backward"} <= set(q_proj["bytes_by_maker"]), q_proj
        attention = modules[f"<LlamaForCausalLM>.model.layers.{layer}.self_attn"]
        assert "transformers" in attention["bytes_by_maker"] and "float32" in attention["cast_to"], attention
    tree = subprocess.run([sys.executable, "-m", "castscope", "report", "--db", str(tmp_path / "without_mode" / "out" / "castscope.db"),
                           "--precision-map"], capture_output=True, text=True, timeout=300)
    assert tree.returncode == 0, tree.stderr
    assert "precision map of run every: 21 modules, bytes per optimizer step (3 steps)" in tree.stdout, tree.stdout
    assert "            <LlamaForCausalLM>.model.layers.0.self_attn.q_proj: stored float32; computed bfloat16; cast to " \
        "float32/bfloat16;" in tree.stdout, tree.stdout
    # layers.1 before layers.10 would be, by value: the tree lists the first layer's modules first
    assert tree.stdout.index("model.layers.0.") < tree.stdout.index("model.layers.1.")


def test_explicit_casts_are_at_their_lines_and_counted_alike_in_aggregate_mode(tmp_path):
    full, _ = _castscope_run(tmp_path, SCENARIO)
    rows = {(r["site"]["line"], r["site"]["op"], r["maker"], r["src_dtype"], r["dst_dtype"], r["role"]): r["count"]
            for r in full["conversions"]}
    up, down, copy = (line_of(SCENARIO, marker) for marker in ("UPCAST", "DOWNCAST", "COPY"))
    assert rows[(up, "aten::_to_copy", "user", "bfloat16", "float32", "activation")] == 3
    assert rows[(down, "aten::_to_copy", "user", "float32", "bfloat16", "activation")] == 3
    assert rows[(copy, "aten::copy_", "user", "bfloat16", "float16", "input")] == 3
    by_maker = full["totals"]["conversions_by_maker"]
    # linear's input, weight and bias cast per step; each weight's and bias's
    # gradient converted back (the input needs none); loss's upcast.
    assert by_maker["autocast"] == 9 and by_maker["autocast_backward"] == 6, by_maker
    assert by_maker["user"] == 12 and by_maker["autograd"] == 9, by_maker
    # Autocast's findings read autocast's decisions alone: the explicit casts add none.
    assert not [f for f in full["findings"] if f["severity"] != "info"], full["findings"]
    assert "  conversions by maker: user 12, autocast 9, autograd 9, autocast_backward 6" in format_report(full)

    aggregate, _ = _castscope_run(tmp_path, SCENARIO, "--aggregate")
    assert aggregate["precision_map"]["available"] is False and aggregate["precision_map"]["modules"] == []
    for key in ("conversions", "conversions_by_maker", "casts_by_dtype_pair", "casts_by_role", "bytes_cast"):
        assert aggregate["totals"][key] == full["totals"][key], key
    assert sorted(map(json.dumps, aggregate["conversions"])) == sorted(map(json.dumps, full["conversions"]))


@pytest.mark.parametrize("recipe, float8_pairs", [
    ("tensorwise", {"float32->float8_e4m3fn": 24, "float32->float8_e5m2": 12}),  # input, weight; grad_output e5m2
    ("rowwise", {"float32->float8_e4m3fn": 36}),
])
def test_torchao_float8_casts_are_torchaos_at_the_users_lines(tmp_path, recipe, float8_pairs):
    job = HERE / "jobs" / "float8_steps.py"
    native = subprocess.run([sys.executable, str(job), recipe, "--count"], capture_output=True, text=True, timeout=600)
    assert native.returncode == 0, native.stderr
    counted = json.loads(native.stdout.strip().splitlines()[-1])
    report, stdout = _castscope_run(tmp_path, job, job_args=(recipe, "--count"))
    ours = json.loads(stdout.strip().splitlines()[-1])
    assert ours == counted, "training diverged, or the job converted otherwise"
    assert counted["conversions"] == 159  # torchao 0.18.0 (the measurement)
    pairs = report["totals"]["casts_by_dtype_pair"]
    assert {k: v for k, v in pairs.items() if "float8" in k} == float8_pairs
    # The report counts what the mode counted in the steps, and no more than the
    # whole job made (the model's conversion happens before the mode is on).
    # The mode also counts autocast's relabels of torchao's float8 tensors (a new
    # dtype label, no data converted), which the report counts apart: the input
    # and weight of each of the 2 layers' mm in 3 steps, less the first layer's
    # input, already bfloat16.
    assert report["totals"]["relabelled"] == 9
    assert report["totals"]["conversions"] + report["totals"]["relabelled"] >= counted["conversions"]
    relabels = {}
    for row in report["sites"]:
        if row["outcome"] == "relabelled":
            pair = f'{row["src_dtype"]}->{row["dst_dtype"]}'
            relabels[pair] = relabels.get(pair, 0) + row["count"]
    assert relabels == {"float32->bfloat16": 9}
    assert all(pairs.get(k, 0) + relabels.get(k, 0) >= n for k, n in _dtype_pairs(counted["pairs"]).items())

    # Without the mode: every float8 cast is torchao's, at the user's lines.
    report, _ = _castscope_run(tmp_path / "without_mode", job, job_args=(recipe,))
    model_line, backward_line = line_of(job, "the model line"), line_of(job, "the backward line")
    float8 = [r for r in report["conversions"] if r["dst_dtype"].startswith("float8")]
    assert sum(r["count"] for r in float8) == sum(float8_pairs.values())
    assert {r["maker"] for r in float8} == {"torchao"}
    # Each Float8Linear converts in its float8 dtypes, by torchao's hand.
    precision = {m["module"]: m for m in report["precision_map"]["modules"]}
    for layer in ("<Sequential>.0", "<Sequential>.2"):
        assert {d for d in precision[layer]["cast_to"] if d.startswith("float8")} == set(d.split("->")[1] for d in float8_pairs)
        assert precision[layer]["bytes_by_maker"]["torchao"] > 0
    assert {(r["site"]["file"], r["site"]["line"]) for r in float8} == {(str(job), model_line), (str(job), backward_line)}
    assert report["totals"]["conversions_by_maker"]["torchao"] >= sum(float8_pairs.values())
    # Each with torchao's role and its scale as powers of two: input and weight in e4m3, grad_output
    # (castscope's role gradient) in e5m2 or, rowwise, e4m3; the scale is float8 max / amax.
    roles = {(r["role"], r["dst_dtype"], r["site"]["line"]) for r in float8}
    grad_dtype = "float8_e5m2" if recipe == "tensorwise" else "float8_e4m3fn"
    assert {("input", "float8_e4m3fn", model_line), ("weight", "float8_e4m3fn", model_line),
            ("gradient", grad_dtype, backward_line)} <= roles, roles
    for row in float8:
        assert row["float8"]["conversions"] == row["count"], row
        assert row["float8"]["zero_amax_conversions"] == 0
        low, high = row["float8"]["scale_log2"]
        amax_low, amax_high = row["float8"]["amax_log2"]
        assert low <= high and amax_low <= amax_high
        # amax = max / scale: their powers of two add up to the format's (448 ~ 2^8.8, 57344 ~ 2^15.8), within rounding.
        top = 8 if row["dst_dtype"] == "float8_e4m3fn" else 15
        assert top - 1 <= low + amax_high <= top + 1, row


def test_fsdp2_parameter_and_gradient_casts_per_rank(tmp_path):
    scenario = HERE / "scenarios" / "fsdp2_mixed_precision.py"
    launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(scenario)]
    native = subprocess.run(launch, capture_output=True, text=True, timeout=600)
    assert native.returncode == 0, native.stderr
    out = tmp_path / "out"
    result = subprocess.run([sys.executable, "-m", "castscope", "run", "--out", str(out), "--run-id", "fsdp", "--",
                             *launch], capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stderr

    def losses(stdout: str) -> dict:  # the ranks print at once: their lines may run together
        return {r["rank"]: r["losses"] for r in map(json.loads, re.findall(r'\{"rank": \d+, "losses": \[[^\]]*\]\}', stdout))}
    assert losses(result.stdout) == losses(native.stdout) and sorted(losses(native.stdout)) == [0, 1]

    step_line, backward_line = line_of(scenario, "the step line"), line_of(scenario, "the backward line")
    for rank in (0, 1):
        report = load_report(str(out / "castscope.db"), "fsdp", rank=rank)
        jsonschema.validate(report, SCHEMA)
        fsdp = {(r["site"]["op"], r["site"]["line"], r["src_dtype"], r["dst_dtype"], r["role"]): r["count"]
                for r in report["conversions"] if r["maker"] == "fsdp"}
        # Four parameters (two Linears' weight and bias), 3 steps: each cast to bfloat16 for its
        # all-gather in the forward and again in the backward (resharded after the forward), each
        # gradient to float32 for its reduce-scatter; and the root's input cast to bfloat16.
        assert fsdp == {("aten::_foreach_copy_", step_line, "float32", "bfloat16", "input"): 12,
                        ("aten::_foreach_copy_", backward_line, "float32", "bfloat16", "input"): 12,
                        ("aten::_chunk_cat.out", backward_line, "bfloat16", "float32", "gradient"): 12,
                        ("aten::_to_copy", step_line, "float32", "bfloat16", "input"): 3}, fsdp
        assert report["totals"]["conversions_by_maker"]["fsdp"] == 39
        # In the precision map: the dtype each FSDP module communicated in, FSDP's bytes per step.
        precision = {m["module"]: m for m in report["precision_map"]["modules"]}
        first, second = precision["<FSDPSequential>.0"], precision["<FSDPSequential>.2"]
        assert first["communicated"] == ["bfloat16"] and first["bytes_per_step_by_maker"]["fsdp"] > 0, first
        assert set(second["communicated"]) == {"float32", "bfloat16"}, second


@pytest.mark.parametrize("scenario, kind, marker, severity", [
    ("conversion_round_trip.py", "cast-round-trip", "the round trip line", "warning"),
    ("upcast_dominates.py", "explicit-upcast-dominates", "the upcast line", "info"),
    ("fp8_saturation.py", "fp8-saturation", "the float8 line", "warning"),
])
def test_conversion_findings_fire_at_their_line_and_their_twins_stay_silent(tmp_path, scenario, kind, marker, severity):
    path = HERE / "scenarios" / scenario
    report, _ = _castscope_run(tmp_path, path)
    [finding] = [f for f in report["findings"] if f["kind"] == kind]
    assert finding["severity"] == severity
    assert [(s["file"], s["line"]) for s in finding["sites"]] == [(str(path), line_of(path, marker))]
    assert finding["fix"] and finding["explanation"]
    twin, _ = _castscope_run(tmp_path / "twin", path, job_args=("twin",))
    assert twin["findings"] == [], twin["findings"]


def test_fp8_zero_amax_names_the_zero_weight_and_the_gradient_it_starves_at_the_users_lines(tmp_path):
    path = HERE / "scenarios" / "fp8_zero_amax.py"
    report, _ = _castscope_run(tmp_path, path)
    found = [f for f in report["findings"] if f["kind"] == "fp8-zero-amax"]
    model_line, backward_line = line_of(path, "the model line"), line_of(path, "the backward line")
    # The zero weight's conversions in the forward and again in the backward (tensorwise converts it
    # for grad_input), and the first layer's grad_output, all zero since the second layer's weight is.
    assert sorted((f["sites"][0]["line"], f["evidence"]["role"]) for f in found) == [
        (model_line, "weight"), (backward_line, "gradient"), (backward_line, "weight")], found
    assert all(f["severity"] == "warning" and f["evidence"]["maker"] == "torchao" for f in found)
    assert all(f["sites"][0]["file"] == str(path) for f in found)
    twin, _ = _castscope_run(tmp_path / "twin", path, job_args=("twin",))
    assert twin["findings"] == [], twin["findings"]


def test_relabels_are_told_without_explicit_casts_too(tmp_path):
    """explicit_casts=False records autocast's casts alone; autocast's relabels of torchao's float8
    tensors are among them, and still not conversions."""
    code = f"""
import dataclasses, json, torch, castscope
from torchao.float8 import Float8LinearConfig, convert_to_float8_training
model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 64))
convert_to_float8_training(model, config=dataclasses.replace(Float8LinearConfig.from_recipe_name("tensorwise"), emulate=True))
with castscope.attached(events_path={str(tmp_path / "e.jsonl")!r}, explicit_casts=False):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randn(8, 64))
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    casts = [json.loads(line)["cast"] for line in (tmp_path / "e.jsonl").read_text().splitlines() if '"cast"' in line]
    outcomes = {}
    for cast in casts:
        outcomes[cast["outcome"], cast.get("maker")] = outcomes.get((cast["outcome"], cast.get("maker")), 0) + 1
    # The float8 mm's input and weight of the second layer, the first layer's weight (its input is already bfloat16).
    assert outcomes.get(("CAST_OUTCOME_RELABELLED", "CAST_MAKER_AUTOCAST")) == 3, outcomes
    assert not [c for c in casts if c.get("maker") not in (None, "CAST_MAKER_AUTOCAST")], outcomes
