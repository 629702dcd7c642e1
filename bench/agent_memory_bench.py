"""The agent's memory: peak resident set of a job under castscope minus the
same job natively (budget: <= 32 MiB with the default configuration; issue 13).

Each row is a fresh process: THREADS threads each make --calls bf16 `mm`s
under CPU autocast (3 events each, enough to go round every thread's ring
several times), in one of the modes below; the process reports its peak RSS
(VmHWM) and its RSS at the end. Rows are interleaved over --repeats.

  native     torch's autocast
  castscope  attached with the default configuration (events dumped to a file)
  aggregate  attached in aggregate mode (counters), when this castscope has it

    .venv/bin/python bench/agent_memory_bench.py [--threads 1 4 16] [--calls 20000] [--repeats 3]
"""
import argparse
import json
import subprocess
import sys
import tempfile

from harness import interleaved, medians

CHILD = r"""
import json, sys, threading, torch
mode, threads, calls, events = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
torch.set_num_threads(1)
a, b = torch.randn(8, 8), torch.randn(8, 8)

def work():
    with torch.autocast("cpu", dtype=torch.bfloat16):
        for _ in range(calls):
            torch.mm(a, b)

def run_threads():
    pool = [threading.Thread(target=work) for _ in range(threads)]
    for t in pool: t.start()
    for t in pool: t.join()

def status(key):
    for line in open("/proc/self/status"):
        if line.startswith(key):
            return int(line.split()[1]) * 1024
work()  # torch's own first-call allocations happen in every row
if mode == "native":
    run_threads()
    dropped = 0
else:
    import castscope
    with castscope.attached(events_path=events, probe=False, **({"aggregate": True} if mode == "aggregate" else {})) as agent:
        run_threads()
        dropped = agent.status().get("events_dropped", 0)
print(json.dumps({"peak": status("VmHWM:"), "end": status("VmRSS:"), "dropped": dropped}))
"""


def supports_aggregate() -> bool:
    import inspect

    import castscope

    return "aggregate" in inspect.signature(castscope.attach).parameters


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 4, 16])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    modes = ["native", "castscope"] + (["aggregate"] if supports_aggregate() else [])
    mib = 1 << 20
    with tempfile.TemporaryDirectory() as tmp:
        for threads in args.threads:
            def peak(mode):
                out = subprocess.run([sys.executable, "-c", CHILD, mode, str(threads), str(args.calls),
                                      f"{tmp}/events.jsonl"], check=True, capture_output=True, text=True)
                return json.loads(out.stdout.strip().splitlines()[-1])["peak"]

            peaks = interleaved(modes, args.repeats, peak)
            median = medians(peaks)
            native = median["native"]
            row = ", ".join(f"{mode} +{(median[mode] - native) / mib:.1f} MiB "
                            f"(repeats {', '.join(f'{(p - native) / mib:+.1f}' for p in peaks[mode])})"
                            for mode in modes[1:])
            print(f"{threads:2d} thread(s): native peak {native / mib:.0f} MiB; {row}", flush=True)


if __name__ == "__main__":
    main()
