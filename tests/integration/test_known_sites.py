"""Source locations read again at sites seen before.

The frame reader answers a site it has seen on the calling thread without
taking the GIL (agent/pyframes/python_location_reader.cc). These runs call the
same lines many times, from several lines of one function, a helper shared by
two callers, a module's forward and a second thread, and check that every
record names the line that ran it (the first call of each site goes through
the GIL path, the later ones need not).
"""
import pathlib
import threading

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


def test_threads_that_come_and_go_each_read_their_own_sites(tmp_path):
    """The autocast kernels keep each thread's known sites in the agent's
    thread block, which the reader fills on the thread's first GIL read and
    empties when the thread exits: threads started one after another and two
    at once, each exiting before or while others run, name every line."""
    torch.manual_seed(0)
    a, b, model = torch.randn(8, 8), torch.randn(8, 8), Small()
    passes = 5
    with castscope.attached(events_path=tmp_path / "e.jsonl", probe=False) as agent:
        for _ in range(4):  # one after another
            worker = threading.Thread(target=run_lines, args=(a, b, model, passes))
            worker.start()
            worker.join()
        pair = [threading.Thread(target=run_lines, args=(a, b, model, passes + k)) for k in range(2)]
        for worker in pair:
            worker.start()
        for worker in pair:
            worker.join()
        run_lines(a, b, model, passes)  # the main thread after them all
        ops = agent.ops()
    calls = 4 * passes + (passes + passes + 1) + passes
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
    }
