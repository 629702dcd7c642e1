"""GPU timing (docs/gpu.md) in a real torch process. On this CPU-only machine
CUPTI is the stand-in (tests/stand_ins/cupti), loaded by the agent's real
dlopen path, with `gpu_correlate: all_ops` so CPU autocast ops push their
correlation ids as CUDA ops would; the CUDA test runs only where torch sees a
GPU."""
from __future__ import annotations

import contextlib
import json
import pathlib

import pytest
import torch

import castscope
import castscope.events
from helpers import autocast_steps, mlp_step, policies_for_this_torch, train

REPO = pathlib.Path(__file__).resolve().parents[2]
STANDIN = REPO / "build" / "tests" / "stand_ins" / "cupti" / "libcastscope_standin_cupti.so"

SCRIPT = {
    "cast": [{"name": "void at::native::elementwise_kernel<128, 4, copy>", "duration_ns": 2000}],
    "op": [{"name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64", "duration_ns": 9000}],
    "unscoped": [{"name": "void at::native::vectorized_elementwise_kernel<4, add>", "duration_ns": 500}],
}


def events_of(path: pathlib.Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def with_standin(tmp_path, monkeypatch, script: dict) -> dict:
    if not STANDIN.is_file():  # built wherever CUPTI's headers are (cmake/CastscopeCupti.cmake)
        pytest.skip(f"{STANDIN} is not built: this build found no CUPTI headers")
    path = tmp_path / "standin.json"
    path.write_text(json.dumps(script))
    monkeypatch.setenv("CASTSCOPE_STANDIN_CUPTI", str(path))
    # Every step timed (steps 0), unless a test asks for windows.
    return {"mode": "on", "cupti_library": str(STANDIN), "correlate": "all_ops", "steps": 0}


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU-only machine's answer")
def test_without_a_gpu_timing_is_off_and_says_why(tmp_path):
    with castscope.attached(events_path=tmp_path / "e.jsonl", probe=False) as agent:
        assert agent.status()["gpu_timing"] == "off: torch sees no CUDA device"
    with castscope.attached(events_path=tmp_path / "f.jsonl", probe=False,
                            gpu_timing={"mode": "on", "cupti_library": str(tmp_path / "libcupti.so.13")}) as agent:
        state = agent.status()["gpu_timing"]
        assert state.startswith("off: no usable CUPTI library:") and str(tmp_path / "libcupti.so.13") in state
        train(1)  # the job goes on as if nothing was asked


def test_kernels_join_the_casts_and_ops_they_were_launched_under(tmp_path, monkeypatch):
    gpu = with_standin(tmp_path, monkeypatch, SCRIPT)
    native = train()
    with castscope.attached(events_path=tmp_path / "e.jsonl", probe=False, gpu_timing=gpu) as agent:
        assert agent.status()["gpu_timing"] == "on"
        attached = train()
    # Timing never changes training.
    assert all(torch.equal(a, b) for a, b in zip(native, attached))

    events = events_of(tmp_path / "e.jsonl")
    casts = {int(e["cast"]["seq"]): e["cast"] for e in events if "cast" in e}
    ops = {int(e["op"]["seq"]): e["op"] for e in events if "op" in e}
    kernels = [e["kernel"] for e in events if "kernel" in e]
    by_cast = [k for k in kernels if k["launched_by"] == "LAUNCHED_BY_CAST"]
    by_op = [k for k in kernels if k["launched_by"] == "LAUNCHED_BY_OP"]
    unscoped = [k for k in kernels if k["launched_by"] == "LAUNCHED_BY_NONE"]
    assert by_cast and by_op and unscoped
    for k in by_cast:
        cast = casts[int(k["launch_seq"])]
        # Autocast's casts belong to their op; an explicit conversion's kernels are its own, in no op.
        assert int(cast["op_seq"]) in ops if cast["maker"] == "CAST_MAKER_AUTOCAST" else int(cast["op_seq"]) == 0
        assert k["name"] == SCRIPT["cast"][0]["name"] and int(k["duration_ns"]) == 2000
    for k in by_op:
        op = ops[int(k["launch_seq"])]
        # The stand-in runs the op's kernel when the op's id is popped: within the op's CPU window.
        assert int(op["ts_ns"]) <= int(k["ts_ns"]) <= int(op["ts_ns"]) + int(op["cpu_duration_ns"]) + 1_000_000
    assert len(by_op) == len(ops)  # one scripted kernel per autocast op
    assert all(int(k.get("launch_seq", 0)) == 0 for k in unscoped)
    # Kernels share the sequence numbers: unique, no gaps.
    seqs = sorted([*casts, *ops, *(int(k["seq"]) for k in kernels),
                   *(int(e["cache_sample"]["seq"]) for e in events if "cache_sample" in e),
                   *(int(e["numerics"]["seq"]) for e in events if "numerics" in e)])
    assert seqs == list(range(1, len(seqs) + 1))
    stats = [e["stats"] for e in events if "stats" in e][-1]
    assert stats["gpu_timing"] == "on"
    summary = castscope.events.summarize(events)
    assert "  GPU timing: on" in summary
    cast_ms, op_ms = len(by_cast) * 2000 / 1e6, len(by_op) * 9000 / 1e6
    assert f"  GPU time: casts {cast_ms:.3f} ms, autocast ops {op_ms:.3f} ms" in summary, summary


def test_memcpy_and_memset_records_become_events_with_their_bytes(tmp_path, monkeypatch):
    gpu = with_standin(tmp_path, monkeypatch, {
        "cast": [{"name": "memcpy DtoD", "duration_ns": 700, "activity": "memcpy", "bytes": 4096}],
        "op": [{"name": "memset", "duration_ns": 300, "activity": "memset", "bytes": 512}]})
    a, w = torch.randn(8, 8), torch.randn(8, 8)
    with castscope.attached(events_path=tmp_path / "e.jsonl", probe=False, gpu_timing=gpu):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            torch.mm(a, w)
    kernels = [e["kernel"] for e in events_of(tmp_path / "e.jsonl") if "kernel" in e]
    seen = {(k["activity"], k["launched_by"], int(k["bytes"]), int(k["duration_ns"]), int(k["stream"]))
            for k in kernels}
    assert seen == {("GPU_ACTIVITY_MEMCPY", "LAUNCHED_BY_CAST", 4096, 700, 7),
                    ("GPU_ACTIVITY_MEMSET", "LAUNCHED_BY_OP", 512, 300, 7)}, kernels


def test_a_tool_holding_cupti_is_left_alone_and_named(tmp_path, monkeypatch):
    gpu = with_standin(tmp_path, monkeypatch, {"held_by": "CUPTI for Nsight Systems"})
    with castscope.attached(events_path=tmp_path / "e.jsonl", probe=False, gpu_timing=gpu) as agent:
        assert agent.status()["gpu_timing"] == (
            "off: another tool holds CUPTI (CUPTI for Nsight Systems); castscope leaves it alone")
        train(1)
    assert not [e for e in events_of(tmp_path / "e.jsonl") if "kernel" in e]


def test_dropped_gpu_records_are_counted_not_lost_silently(tmp_path, monkeypatch):
    gpu = with_standin(tmp_path, monkeypatch, {**SCRIPT, "dropped_records": 7})
    with castscope.attached(events_path=tmp_path / "e.jsonl", probe=False, gpu_timing=gpu) as agent:
        train(1)
        agent.flush()
    stats = [e["stats"] for e in events_of(tmp_path / "e.jsonl") if "stats" in e][-1]
    assert int(stats["gpu_records_dropped"]) == 7


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; checked on a GPU machine (docs/gpu.md)")
def test_cuda_casts_and_ops_get_their_kernels(tmp_path):
    torch.manual_seed(0)
    model = torch.nn.Linear(256, 256).cuda()
    x = torch.randn(64, 256, device="cuda")
    with castscope.attached(events_path=tmp_path / "e.jsonl", probe=False) as agent:
        assert agent.status()["gpu_timing"] == "on"
        with torch.autocast("cuda", dtype=torch.bfloat16):
            model(x).sum().backward()
        torch.cuda.synchronize()
    kernels = [e["kernel"] for e in events_of(tmp_path / "e.jsonl") if "kernel" in e]
    assert any(k["launched_by"] == "LAUNCHED_BY_CAST" for k in kernels)
    assert any(k["launched_by"] == "LAUNCHED_BY_OP" for k in kernels)


def test_gpu_timing_steps_aside_while_another_client_collects(tmp_path, monkeypatch):
    """The agent's side of the profiler bracket. On this machine torch.profiler
    drops CUDA activity ("CUDA is not available"), so the bracket's begin/end
    calls are made directly; on a GPU machine the CUDA test below runs the real
    torch.profiler."""
    from torch.profiler import ProfilerActivity, profile

    from castscope._native import _library

    gpu = with_standin(tmp_path, monkeypatch, SCRIPT)
    a, b = torch.randn(8, 8), torch.randn(8, 8)

    def one_op():
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return torch.mm(a, b)

    with castscope.attached(events_path=tmp_path / "e.jsonl", probe=False, gpu_timing=gpu) as agent:
        one_op()
        _library().castscope_agent_gpu_profiler(1)
        assert agent.status()["gpu_timing"].startswith("paused: another CUPTI client (torch.profiler)")
        one_op()
        _library().castscope_agent_gpu_profiler(0)
        one_op()
        assert agent.status()["gpu_timing"] == (
            "on; stepped aside for torch.profiler 1 time (its GPU activity is in the profiler's trace)")
        with profile(activities=[ProfilerActivity.CPU]):  # no GPU activity asked for: castscope stays
            assert agent.status()["gpu_timing"].startswith("on;")
            one_op()
    events = events_of(tmp_path / "e.jsonl")
    op_seqs = [int(e["op"]["seq"]) for e in events if "op" in e and e["op"]["op"] == "aten::mm"]
    timed = {int(e["kernel"]["launch_seq"]) for e in events
             if "kernel" in e and e["kernel"]["launched_by"] == "LAUNCHED_BY_OP"}
    assert len(op_seqs) == 4
    assert timed == {op_seqs[0], op_seqs[2], op_seqs[3]}  # the other client's op is its own to time


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; checked on a GPU machine (docs/gpu.md)")
def test_torch_profiler_sees_the_same_gpu_activity_with_castscope_attached(tmp_path):
    from collections import Counter

    from torch.profiler import ProfilerActivity, profile

    model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).cuda()
    x = torch.randn(32, 256, device="cuda")

    def step():
        with torch.autocast("cuda", dtype=torch.bfloat16):
            model(x).float().sum().backward()
        torch.cuda.synchronize()

    def profiled() -> Counter:
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step()
        return Counter(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)

    step()  # warm up: cuBLAS handles, kernel choices
    # castscope attached, GPU timing off, is the baseline: what GPU timing must not change.
    # Numerics windows off in both: their checks launch kernels of their own
    # (docs/numerics.md), which the profiler saw in one attach and not the
    # other in 4 of 5 runs on an H100 (2026-11-26); this compares GPU timing alone.
    with castscope.attached(events_path=tmp_path / "off.jsonl", probe=False, numerics=False, gpu_timing="off"):
        step()
        without_timing = profiled()
    with castscope.attached(events_path=tmp_path / "e.jsonl", probe=False, numerics=False) as agent:
        step()
        with_timing = profiled()
        step()
        state = agent.status()["gpu_timing"]
    differ = {name[:120]: (without_timing[name], with_timing[name])
              for name in without_timing.keys() | with_timing.keys() if without_timing[name] != with_timing[name]}
    assert without_timing and not differ, f"kernel counts (timing off, timing on) that differ: {differ}"
    assert state.startswith("on; stepped aside for torch.profiler 1 time"), state
    kernels = [e["kernel"] for e in events_of(tmp_path / "e.jsonl") if "kernel" in e]
    assert any(k["launched_by"] == "LAUNCHED_BY_OP" for k in kernels)  # before and after the profiler


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; checked on a GPU machine (docs/gpu.md)")
@pytest.mark.parametrize("gpu_timing", ["off", "on"])
def test_an_attached_step_launches_the_kernels_a_native_one_does(tmp_path, gpu_timing):
    """What torch.profiler sees of a bf16 training step: the same kernels by name and count natively and
    attached (castscope's autocast must pick the same ATen paths, not only produce the same bits). A first
    look on an H100, at tests/gpu/smoke_on_gpu.py's step (this one), once saw fewer bf16 copies and another
    reduction attached (docs/gpu.md); the native
    step is profiled before and after the attached one, so a difference of the machine's is told apart."""
    from collections import Counter

    from torch.profiler import ProfilerActivity, profile

    torch.manual_seed(0)
    step = mlp_step("cuda")

    def profiled() -> Counter:
        step()  # warm: cuBLAS handles, kernel choices, the optimizer's state
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            step()
        return Counter(e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA)

    native_before = profiled()
    # Numerics windows off: their checks are castscope's own kernels, on purpose (docs/numerics.md).
    with castscope.attached(policy_files=policies_for_this_torch(), events_path=tmp_path / "e.jsonl", probe=False,
                            gpu_timing=gpu_timing, numerics=False):
        attached = profiled()
    native_after = profiled()

    def differ(a: Counter, b: Counter) -> dict:
        return {name[:120]: (a[name], b[name]) for name in a.keys() | b.keys() if a[name] != b[name]}

    assert not differ(native_before, native_after), f"native runs differ: {differ(native_before, native_after)}"
    assert native_before and not differ(native_before, attached), f"(native, attached): {differ(native_before, attached)}"


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; checked on a GPU machine (docs/gpu.md)")
def test_cuda_training_step_is_bit_identical_attached(tmp_path):
    def run(attached: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(256, 256), torch.nn.ReLU(), torch.nn.Linear(256, 8)).cuda()
        x = torch.randn(32, 256, device="cuda")
        context = castscope.attached(events_path=tmp_path / "p.jsonl", probe=False) if attached else contextlib.nullcontext()
        with context:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                loss = model(x).float().sum()
            loss.backward()
        return [loss.detach()] + [p.grad for p in model.parameters()]

    native, attached = run(False), run(True)
    assert [t.dtype for t in native] == [t.dtype for t in attached]
    assert all(torch.equal(a, b) for a, b in zip(native, attached))


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU; checked on a GPU machine (docs/gpu.md)")
@pytest.mark.parametrize("gpu", ["off", {"mode": "on", "steps": 0, "cublaslt_logger": True}], ids=["plain", "timed+cublaslt"])
def test_cuda_resnet18_step_is_bit_identical_attached(tmp_path, gpu):
    torchvision = pytest.importorskip("torchvision")
    policies = policies_for_this_torch()

    def run(attached: bool) -> list[torch.Tensor]:
        torch.manual_seed(0)
        model = torchvision.models.resnet18(num_classes=10).cuda()
        optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
        x = torch.randn(16, 3, 224, 224, device="cuda")
        y = torch.randint(0, 10, (16,), device="cuda")
        context = (castscope.attached(policy_files=policies, events_path=tmp_path / "r.jsonl", probe=False, gpu_timing=gpu)
                   if attached else contextlib.nullcontext())
        with context:
            losses = autocast_steps(model, optimizer, x, y, 2, "cuda")
        return [losses[-1]] + [p.detach() for p in model.parameters()]

    deterministic = torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark
    torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = True, False  # same kernels both times
    try:
        native, attached = run(False), run(True)
    finally:
        torch.backends.cudnn.deterministic, torch.backends.cudnn.benchmark = deterministic
    assert [t.dtype for t in native] == [t.dtype for t in attached]
    assert all(torch.equal(a, b) for a, b in zip(native, attached))


def test_timing_windows_time_a_few_steps_in_many(tmp_path, monkeypatch):
    gpu = {**with_standin(tmp_path, monkeypatch, SCRIPT), "steps": 1, "every_steps": 3}
    with castscope.attached(events_path=tmp_path / "e.jsonl", probe=False, gpu_timing=gpu) as agent:
        train(7)
        assert agent.status()["gpu_timing"] == "on"
    events = events_of(tmp_path / "e.jsonl")
    steps = [int(e["cache_sample"]["seq"]) for e in events
             if "cache_sample" in e and e["cache_sample"]["trigger"] == "TRIGGER_ITERATION"]
    assert len(steps) == 7
    ops = sorted(int(e["op"]["seq"]) for e in events if "op" in e)
    timed = {int(e["kernel"]["launch_seq"]) for e in events
             if "kernel" in e and e["kernel"]["launched_by"] == "LAUNCHED_BY_OP"}

    def step_of(seq: int) -> int:  # 1-based: the step whose ops it was among
        return 1 + sum(1 for end in steps if end < seq)

    timed_steps = sorted({step_of(seq) for seq in timed})
    # A window from the start covers step 1; then one opens after steps 3 and 6.
    assert timed_steps == [1, 4, 7], timed_steps
    assert all(seq in timed for seq in ops if step_of(seq) in (1, 4, 7))


def mm_three_times_under_a_collector(tmp_path, gpu: dict, unscoped: bool = False) -> pathlib.Path:
    """Three autocast torch.mm calls at "the casting line" (and, if `unscoped`, an
    add outside autocast), delivered to a collector; its store."""
    from collector_server import Collector, wait_delivered

    collector = Collector(tmp_path / "store.db")
    try:
        a, w = torch.randn(8, 8), torch.randn(8, 8)
        with castscope.attached(collector=collector.address, spool_dir=tmp_path / "spool", run_id="gpu",
                                probe=False, gpu_timing=gpu):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                for _ in range(3):
                    torch.mm(a, w)  # the casting line
            if unscoped:
                (a + w).sum()  # outside autocast: an unscoped kernel
        wait_delivered(tmp_path / "spool")
    finally:
        collector.stop()
    return collector.db


def test_an_info_finding_stays_out_of_the_collectors_log(tmp_path, monkeypatch):
    """A clean job is silent above info: casts at 12 % of the op's GPU time are
    an info finding, in the report and at info level in the collector's log,
    never among its warnings (the collector logs warnings and worse by default)."""
    kernels = {"cast": [{"name": "void at::native::elementwise_kernel<copy>", "duration_ns": 4000}],
               "op": [{"name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32", "duration_ns": 60000}]}
    logs = {}
    for level in ("default", "info"):
        if level == "default":
            monkeypatch.delenv("CASTSCOPE_LOG", raising=False)
        else:
            monkeypatch.setenv("CASTSCOPE_LOG", level)
        (tmp_path / level).mkdir()
        db = mm_three_times_under_a_collector(tmp_path / level, with_standin(tmp_path / level, monkeypatch, kernels))
        [finding] = [f for f in report_of(db)["findings"] if f["kind"] == "cast-share"]
        assert finding["severity"] == "info"
        logs[level] = db.with_suffix(".log").read_text(errors="replace")
        assert "castscope-collector: stopped" in logs[level]  # read after the collector's last analysis
    assert "finding [" not in logs["default"], logs["default"]
    assert "finding [info] cast-share" in logs["info"], logs["info"]  # logged, at its own level


def report_of(db: pathlib.Path, run: str = "gpu") -> dict:
    import subprocess

    import jsonschema

    report = subprocess.run([str(castscope.collector_binary()), "report", "--db", str(db), "--run", run],
                            capture_output=True, text=True, timeout=120)
    assert report.returncode == 0, report.stderr
    report = json.loads(report.stdout)
    jsonschema.validate(report, json.loads((REPO / "docs" / "schema" / "report.schema.json").read_text()))
    return report


def casting_line() -> int:
    return next(n for n, text in enumerate(pathlib.Path(__file__).read_text().splitlines(), 1)
                if text.strip().endswith("# the casting line"))


def test_gpu_time_reaches_the_store_the_report_and_the_cast_share_finding(tmp_path, monkeypatch):
    from test_transport import stored_event_seqs, the_agent

    # Casting costs as much as the op computes: a warning at the user's line.
    gpu = with_standin(tmp_path, monkeypatch, {
        "cast": [{"name": "void at::native::elementwise_kernel<copy>", "duration_ns": 40000}],
        "op": [{"name": "sm90_xmma_gemm_bf16bf16_bf16f32_f32", "duration_ns": 60000}]})
    db = mm_three_times_under_a_collector(tmp_path, gpu)
    agent = the_agent(db)
    assert agent["kernels"] == 9 and agent["gpu_timing"] == "on"  # 2 casts and the op, 3 times
    assert agent["casts"] + agent["ops"] + agent["cache_samples"] + agent["kernels"] + agent["numerics"] == \
        agent["events_recorded_total"]
    assert stored_event_seqs(db) == list(range(1, agent["events_recorded_total"] + 1))

    report = report_of(db)
    assert report["totals"]["accounting"]["complete"]
    assert report["gpu"]["cast_ns"] == 6 * 40000 and report["gpu"]["compute_ns"] == 3 * 60000
    assert report["gpu"]["unjoined_ns"] == 0 and report["gpu"]["unattributed_ns"] == 0
    [site] = report["gpu"]["sites"]
    line = casting_line()
    assert (site["site"]["file"], site["site"]["line"], site["site"]["op"]) == (__file__, line, "aten::mm")
    assert site["cast_kernels"] == 6 and site["compute_kernels"] == 3
    [finding] = [f for f in report["findings"] if f["kind"] == "cast-share"]
    assert finding["severity"] == "warning"
    assert [(s["file"], s["line"]) for s in finding["sites"]] == [(__file__, line)]
    assert finding["summary"] == "casts for aten::mm took 57 % of its GPU time (0.240 ms casting, 0.180 ms computing)"
    assert report["run"]["agents"][0]["gpu_timing"] == "on"
    from castscope.report import format_report
    text = format_report(report)
    assert "  GPU timing: on" in text
    assert "  GPU time: casts 0.240 ms, autocast ops 0.180 ms (57% in casts), outside autocast ops 0.000 ms" in text, text
    # The op's kernel read as a bf16 GEMM from its name; no TF32, so no tf32-matmul.
    [gemm] = report["gpu"]["gemm_precision"]["sites"]
    assert (gemm["source"], gemm["confidence"], gemm["inputs"], gemm["accumulate"]) == (
        "kernel_name", "medium", "bf16", "fp32")
    assert gemm["kernels"] == 3 and gemm["gpu_ns"] == 3 * 60000
    assert not [f for f in report["findings"] if f["kind"] == "tf32-matmul"]


# Seen on an H100 for a float32 mm with torch.backends.cuda.matmul.allow_tf32 (server/src/analysis/kernel_precision_test.cc).
TF32_GEMM = "sm90_xmma_gemm_f32f32_tf32f32_f32_tn_n_tilesize64x64x32_warpgroupsize1x1x1_execute_segment_k_off_kernel__5x_cublas"


def test_tf32_gemm_kernels_reach_the_report_and_the_tf32_matmul_finding(tmp_path, monkeypatch):
    # The op "runs" a TF32 GEMM kernel; each op also sees one launched outside any autocast op.
    gpu = with_standin(tmp_path, monkeypatch, {"op": [{"name": TF32_GEMM, "duration_ns": 50000}],
                                               "unscoped": [{"name": TF32_GEMM, "duration_ns": 20000}]})
    report = report_of(mm_three_times_under_a_collector(tmp_path, gpu))
    line = casting_line()
    [gemm] = report["gpu"]["gemm_precision"]["sites"]
    assert (gemm["site"]["file"], gemm["site"]["line"], gemm["site"]["op"]) == (__file__, line, "aten::mm")
    assert (gemm["source"], gemm["confidence"], gemm["inputs"], gemm["tensor_cores"]) == (
        "kernel_name", "medium", "tf32", True)
    assert gemm["kernels"] == 3 and gemm["gpu_ns"] == 3 * 50000 and gemm["kernel"] == TF32_GEMM
    [outside] = report["gpu"]["gemm_precision"]["outside_autocast_ops"]
    assert outside["inputs"] == "tf32" and outside["kernels"] == 3
    found = [f for f in report["findings"] if f["kind"] == "tf32-matmul"]
    [at_line] = [f for f in found if f["sites"]]
    assert at_line["severity"] == "info"
    assert [(s["file"], s["line"]) for s in at_line["sites"]] == [(__file__, line)]
    assert at_line["summary"] == ("aten::mm ran float32 matmuls as TF32 on tensor cores: 3 TF32 kernels, 0.150 ms "
                                  "on the GPU (read from kernel names, medium confidence)")
    assert at_line["evidence"]["source"] == "kernel_name" and at_line["evidence"]["gpu_ns"] == 150000
    [run_level] = [f for f in found if not f["sites"]]
    assert run_level["evidence"]["kernels"] == 3 and run_level["evidence"]["launched"] == "outside autocast ops"
