"""Detaching while other threads are inside castscope's kernels must not crash
(the dispatcher calls kernels through raw pointers), and results stay right."""
import subprocess
import sys
import textwrap


def test_attach_detach_while_threads_run_ops(tmp_path):
    script = textwrap.dedent(f"""
        import threading, torch, castscope
        a, b = torch.randn(16, 16), torch.randn(16, 16)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            expected = torch.mm(a, b)
        stop, bad = threading.Event(), []
        def work():
            with torch.autocast("cpu", dtype=torch.bfloat16):
                while not stop.is_set():
                    if not torch.equal(torch.mm(a, b), expected):
                        bad.append(1)
        threads = [threading.Thread(target=work) for _ in range(3)]
        for t in threads:
            t.start()
        for i in range(30):
            with castscope.attached(events_path={str(tmp_path)!r} + f"/e{{i}}.jsonl"):
                pass
        stop.set()
        for t in threads:
            t.join()
        print("bad", len(bad))
    """)
    # MALLOC_PERTURB_ fills freed memory, so a use-after-free shows up as a crash.
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                            env={"MALLOC_PERTURB_": "165", "PATH": "/usr/bin:/bin"})
    assert result.returncode == 0, result.stderr[-2000:]
    assert "bad 0" in result.stdout
