"""A steady CPU load beside a benchmark: N processes, each busy for DUTY of
every 4 ms and asleep the rest, until killed. Used to tell a cost that is only
CPU share (the same drop as this load of the same size) from one that is not
(docs/performance.md, "Two pages against the same CPU load").

    python3 bench/cpu_load.py --processes 2 --duty 0.25 &   # half a core in all
"""

import argparse
import ctypes
import multiprocessing
import os
import signal
import time

PERIOD_S = 0.004


def busy(duty: float, parent: int) -> None:
    # Ends with the parent, however the parent ends (kill -9 included), and
    # at once if it has already gone.
    PR_SET_PDEATHSIG = 1
    if ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_PDEATHSIG)")
    if os.getppid() != parent:
        return
    while True:
        start = time.perf_counter()
        while time.perf_counter() - start < PERIOD_S * duty:
            pass
        time.sleep(PERIOD_S * (1 - duty))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--duty", type=float, default=0.25, help="busy fraction of each process, 0 to 1")
    args = parser.parse_args()
    if args.processes < 1 or not 0 < args.duty <= 1:
        parser.error("--processes must be >= 1 and --duty in (0, 1]")
    fork = multiprocessing.get_context("fork")  # children of this process: the death signal follows it
    workers = [fork.Process(target=busy, args=(args.duty, os.getpid()), daemon=True) for _ in range(args.processes)]
    for w in workers:
        w.start()
    for w in workers:
        w.join()


if __name__ == "__main__":
    main()
