"""GEMM precision from cuBLASLt's logger (docs/gpu.md, "GEMM precision") in a
real torch process. This CPU-only machine has no cuBLASLt, so the stand-in
(tests/stand_ins/cublaslt) is loaded first, as torch loads the real one, and
found by the agent's real RTLD_NOLOAD path. A custom op, made an autocast op
by an overlay, "runs a matmul": its CPU kernel has the stand-in log the Trace
message cuBLASLt writes for one (the format seen on an H100), then multiplies."""
from __future__ import annotations

import ctypes
import json
import pathlib

import pytest
import torch

import castscope

REPO = pathlib.Path(__file__).resolve().parents[2]
STANDIN = REPO / "build" / "tests" / "stand_ins" / "cublaslt" / "libcastscope_standin_cublaslt.so"
CUDA_TYPE = {torch.float32: "R_32F", torch.bfloat16: "R_16BF", torch.float16: "R_16F"}
TF32 = {"on": False}  # what the stand-in "library" computes float32 matmuls in


def trace_message(a: torch.Tensor, b: torch.Tensor) -> bytes:
    compute = "COMPUTE_32F_FAST_TF32" if TF32["on"] and a.dtype == torch.float32 else "COMPUTE_32F"
    shape = f"rows={a.shape[0]} cols={a.shape[1]} ld={a.shape[0]}"
    return (f"A=0X7F82D6C00000 Adesc=[type={CUDA_TYPE[a.dtype]} {shape}] B=0X7F82D6A00000 "
            f"Bdesc=[type={CUDA_TYPE[b.dtype]} {shape}] C=0X7F82D7520000 Cdesc=[type={CUDA_TYPE[a.dtype]} {shape}] "
            f"D=0X7F82D7520000 Ddesc=[type={CUDA_TYPE[a.dtype]} {shape}] "
            f"computeDesc=[computeType={compute} scaleType=R_32F transa=OP_T smCountTarget=132] "
            "algo=[algoId=55 tile=MATMUL_TILE_64x64]").encode()


@pytest.fixture(scope="module")
def standin():
    if not STANDIN.is_file():  # built wherever cuBLASLt's headers are (cmake/CastscopeCupti.cmake)
        pytest.skip(f"{STANDIN} is not built: this build found no cuBLASLt headers")
    return ctypes.CDLL(str(STANDIN), mode=ctypes.RTLD_GLOBAL)


@pytest.fixture(scope="module")
def lt_matmul(standin):
    lib = torch.library.Library("castscope_lt", "DEF")
    lib.define("matmul(Tensor a, Tensor b) -> Tensor")

    def kernel(a, b):
        standin.standin_cublaslt_log(2, b"cublasLtMatmul", trace_message(a, b))
        return a @ b

    lib.impl("matmul", kernel, "CPU")
    yield torch.ops.castscope_lt.matmul
    lib._destroy()


def overlay(tmp_path, policy: str) -> str:
    path = tmp_path / "overlay.json"
    path.write_text(json.dumps({"castscope_policy": 1, "device": "cpu", "ops": {"castscope_lt::matmul": policy}}))
    return str(path)


def logger_on() -> dict:
    return {"mode": "off", "cublaslt_logger": True, "cublaslt_library": str(STANDIN)}


def test_each_autocast_op_gets_the_precision_its_matmuls_ran_in(tmp_path, standin, lt_matmul, capfd):
    a, b = torch.randn(16, 16), torch.randn(16, 16)
    TF32["on"] = False
    with castscope.attached(overlays=[overlay(tmp_path, "lower_precision_fp")], events_path=tmp_path / "ev.jsonl",
                            probe=False, gpu_timing=logger_on()) as agent:
        assert agent.status()["cublaslt_logger"]["state"] == "on"
        with torch.autocast("cpu", dtype=torch.bfloat16):
            out = lt_matmul(a, b)
        standin.standin_cublaslt_log(2, b"cublasLtSSSMatmul", trace_message(a, b))  # outside any autocast op
        status = agent.status()["cublaslt_logger"]
        [op] = [o for o in agent.ops() if o["op"] == "castscope_lt::matmul"]
    # Parity: the op ran as castscope's lower-precision policy says, unchanged by the logger.
    assert torch.equal(out, a.bfloat16() @ b.bfloat16())
    assert op["gemm"] == {"compute": "GEMM_COMPUTE_32F", "a_type": "DTYPE_BFLOAT16", "b_type": "DTYPE_BFLOAT16",
                          "d_type": "DTYPE_BFLOAT16", "calls": 1, "mixed": False}
    assert (status["matmuls_in_ops"], status["matmuls_outside_ops"], status["unread"]) == (1, 1, 0)
    # cuBLASLt prints what it logs unless given a file: castscope gave it /dev/null.
    assert "[standin][cublasLt]" not in capfd.readouterr().out
    # Detached: the logger is the library's again (mask 0, no callback).
    assert standin.standin_cublaslt_mask() == 0 and standin.standin_cublaslt_has_callback() == 0


def test_a_job_that_logs_cublaslt_itself_is_left_alone(tmp_path, standin, lt_matmul, monkeypatch):
    monkeypatch.setenv("CUBLASLT_LOG_MASK", "1")
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    with castscope.attached(overlays=[overlay(tmp_path, "lower_precision_fp")], events_path=tmp_path / "ev.jsonl",
                            probe=False, gpu_timing=logger_on()) as agent:
        state = agent.status()["cublaslt_logger"]["state"]
        with torch.autocast("cpu", dtype=torch.bfloat16):
            lt_matmul(a, b)
        [op] = [o for o in agent.ops() if o["op"] == "castscope_lt::matmul"]
    assert state == "off: the job logs cuBLASLt itself (CUBLASLT_LOG_MASK is set); castscope leaves its logger alone"
    assert "gemm" not in op and standin.standin_cublaslt_has_callback() == 0


def test_off_by_default_and_says_why_when_no_cublaslt_is_loaded(tmp_path):
    with castscope.attached(events_path=tmp_path / "ev.jsonl", probe=False) as agent:
        assert agent.status()["cublaslt_logger"]["state"] == ""
    with castscope.attached(events_path=tmp_path / "ev2.jsonl", probe=False,
                            gpu_timing={"cublaslt_logger": True, "cublaslt_library": "/nonexistent/libcublasLt.so.13"}) as agent:
        state = agent.status()["cublaslt_logger"]["state"]
    assert state.startswith("off: no cuBLASLt is loaded in this process"), state


def test_tf32_matmuls_reach_the_report_and_the_tf32_matmul_finding_at_the_users_line(tmp_path, standin, lt_matmul):
    from collector_server import Collector, wait_delivered

    # An fp32-policy op whose library computes float32 matmuls as TF32: the
    # precision autocast asked for is not the one the GPU used.
    TF32["on"] = True
    collector = Collector(tmp_path / "store.db")
    try:
        a, b = torch.randn(8, 8), torch.randn(8, 8)
        with castscope.attached(overlays=[overlay(tmp_path, "fp32")], collector=collector.address,
                                spool_dir=tmp_path / "spool", run_id="lt", probe=False, gpu_timing=logger_on()):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                for _ in range(2):
                    lt_matmul(a.bfloat16(), b)  # the tf32 line
        wait_delivered(tmp_path / "spool")
    finally:
        TF32["on"] = False
        collector.stop()
    from test_gpu_timing import report_of

    report = report_of(collector.db, run="lt")
    line = next(n for n, text in enumerate(pathlib.Path(__file__).read_text().splitlines(), 1)
                if text.strip().endswith("# the tf32 line"))
    [row] = report["gpu"]["gemm_precision"]["sites"]
    assert (row["site"]["file"], row["site"]["line"], row["site"]["op"]) == (__file__, line, "castscope_lt::matmul")
    assert (row["source"], row["confidence"], row["inputs"], row["op_calls"]) == ("cublaslt", "exact", "tf32", 2)
    [finding] = [f for f in report["findings"] if f["kind"] == "tf32-matmul"]
    assert finding["severity"] == "info"
    assert [(s["file"], s["line"]) for s in finding["sites"]] == [(__file__, line)]
    assert finding["evidence"]["source"] == "cublaslt"
