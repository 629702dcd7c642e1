"""Source locations read again at sites seen before.

The frame reader answers a site it has seen on the calling thread without
taking the GIL (agent/pyframes/python_location_reader.cc). These runs call the
same lines many times, from several lines of one function, a helper shared by
two callers, a module's forward and a second thread, and check that every
record names the line that ran it (the first call of each site goes through
the GIL path, the later ones need not).
"""
import ctypes
import os
import pathlib
import threading
import time

import torch

import castscope
import helpers

THIS_FILE = str(pathlib.Path(__file__).resolve())


def line_of(marker: str) -> int:
    return helpers.line_of(pathlib.Path(THIS_FILE), f"# <{marker}>")


class Small(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x)  # <forward>


def helper(a, b):
    return torch.mm(a, b)  # <helper>


def run_lines(a, b, model, passes):
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autocast state is per thread
        for _ in range(passes):
            torch.mm(a, b)  # <first>
            torch.mm(b, a)  # <second>
            helper(a, b)
            helper(b, a)
            model(a)
            torch.mm(a, a)  # <third>


def test_every_call_of_a_known_site_names_its_own_line(tmp_path):
    torch.manual_seed(0)
    a, b, model = torch.randn(8, 8), torch.randn(8, 8), Small()
    passes = 20
    with castscope.attached(events_path=tmp_path / "e.jsonl", probe=False) as agent:
        run_lines(a, b, model, passes)
        worker = threading.Thread(target=run_lines, args=(a, b, model, passes))
        worker.start()
        worker.join()
        ops = agent.ops()
    lines = {}
    for op in ops:
        assert op["location"]["file"] == THIS_FILE, op["location"]
        key = (op["op"], op["location"]["line"], op["location"]["function"])
        lines[key] = lines.get(key, 0) + 1
    per_pass = 2 * passes  # two threads
    assert lines == {
        ("aten::mm", line_of("first"), "run_lines"): per_pass,
        ("aten::mm", line_of("second"), "run_lines"): per_pass,
        ("aten::mm", line_of("third"), "run_lines"): per_pass,
        ("aten::mm", line_of("helper"), "helper"): 2 * per_pass,
        ("aten::linear", line_of("forward"), "Small.forward"): per_pass,
    }


def run_other_lines(a, b, passes):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(passes):
            torch.mm(b, b)  # <other-first>
            torch.mm(a, b)  # <other-second>


def test_threads_that_come_and_go_each_read_their_own_sites(tmp_path):
    """The autocast kernels keep each thread's known sites in the agent's
    thread block (castscope_python_location_for), which the reader fills on
    the thread's first GIL read and empties when the thread exits: threads
    started one after another and two at once, running lines of their own,
    each name every line they ran."""
    from castscope import _native

    torch.manual_seed(0)
    a, b, model = torch.randn(8, 8), torch.randn(8, 8), Small()
    passes = 5
    with castscope.attached(events_path=tmp_path / "e.jsonl", probe=False) as agent:
        assert _native._thread_location_reader_pointer() is not None, "the kernels' reader is not installed"
        for k in range(4):  # one after another, alternating the lines they run
            args = (a, b, model, passes) if k % 2 == 0 else (a, b, passes)
            worker = threading.Thread(target=run_lines if k % 2 == 0 else run_other_lines, args=args)
            worker.start()
            worker.join()
        pair = [threading.Thread(target=run_lines, args=(a, b, model, passes)),
                threading.Thread(target=run_other_lines, args=(a, b, passes + 1))]
        for worker in pair:
            worker.start()
        for worker in pair:
            worker.join()
        run_lines(a, b, model, passes)  # the main thread after them all
        ops = agent.ops()
    calls, other_calls = 4 * passes, 3 * passes + 1
    lines = {}
    for op in ops:
        key = (op["op"], op["location"]["file"], op["location"]["line"])
        lines[key] = lines.get(key, 0) + 1
    assert lines == {
        ("aten::mm", THIS_FILE, line_of("first")): calls,
        ("aten::mm", THIS_FILE, line_of("second")): calls,
        ("aten::mm", THIS_FILE, line_of("third")): calls,
        ("aten::mm", THIS_FILE, line_of("helper")): 2 * calls,
        ("aten::linear", THIS_FILE, line_of("forward")): calls,
        ("aten::mm", THIS_FILE, line_of("other-first")): other_calls,
        ("aten::mm", THIS_FILE, line_of("other-second")): other_calls,
    }


def test_the_reader_takes_a_threads_sites_back_from_the_agent_when_it_exits(tmp_path):
    """castscope_python_location_for hands the calling thread's known sites to
    the caller's slot (the agent's thread block) and nulls it when the thread
    exits, when it frees them: a slot left set would point at freed memory."""
    from castscope import _native

    with castscope.attached(events_path=tmp_path / "e.jsonl", probe=False):
        entry = _native._reader.castscope_python_location_for
        entry.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        entry.restype = ctypes.c_uint
        slot = ctypes.c_void_p(None)
        seen = {}

        def read():
            seen["id"] = entry(ctypes.byref(slot))
            seen["slot"] = slot.value

        worker = threading.Thread(target=read)
        worker.start()
        worker.join()
        # join() returns once Python is done with the thread; its C++
        # thread-local destructors run as the OS thread exits, just after.
        deadline = time.monotonic() + 10
        while slot.value is not None and time.monotonic() < deadline:
            time.sleep(0.01)
    assert seen["id"] != 0, "no line read"
    assert seen["slot"] is not None, "the reader gave the slot no sites"
    assert slot.value is None, "the slot still names the exited thread's sites"


def test_a_forked_child_reads_its_sites_with_its_own_thread_state_key(tmp_path):
    """A forked child's CPython makes its thread-state key anew; the reader
    turns its GIL-free path off at the fork and back on, with the new key,
    at the child's first read with the GIL: the child's reads of one line
    give one nonzero id, and the child lives to say so."""
    from castscope import _native

    with castscope.attached(events_path=tmp_path / "e.jsonl", probe=False):
        entry = _native._reader.castscope_python_location_for
        entry.argtypes = [ctypes.POINTER(ctypes.c_void_p)]
        entry.restype = ctypes.c_uint
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                # A thread of the child's own: its slot is the only one its sites go to.
                slot, seen = ctypes.c_void_p(None), {}

                def read():
                    seen["ids"] = [entry(ctypes.byref(slot)) for _ in range(3)]  # the GIL path, then known
                    seen["slot"] = slot.value

                reader = threading.Thread(target=read)
                reader.start()
                reader.join()
                ids = seen["ids"]
                code = 0 if ids[0] != 0 and len(set(ids)) == 1 and seen["slot"] is not None else 2
            finally:
                os._exit(code)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
