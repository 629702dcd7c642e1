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
