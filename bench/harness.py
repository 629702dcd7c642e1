"""The benches' one comparison loop: rows, interleaved repeats, medians, ratios.

A bench names its rows (a label and what the row needs: a context manager,
a command...) and how to measure one row once; `interleaved` runs every row
once per repeat, in turn, so that drift (CPU frequency, caches, whatever
else shares the machine) hits every row alike, and the median absorbs the
outliers. `medians` and `print_against` then give what the benches print.
"""
import argparse
import contextlib
import pathlib
import statistics
import sys
import time
from typing import Any, Callable, Hashable, Iterable

# The integration tests' helpers (tests/integration/helpers.py: the training
# loops) and their collector serve the benches too.
sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "tests" / "integration"))


def interleaved(rows: Iterable[Hashable], repeats: int, measure: Callable[[Any], float],
                after_repeat: Callable[[int], None] = lambda repeat: None) -> dict:
    """{row: [measure(row) for each repeat]}, the rows taken in turn within each
    repeat; after_repeat(n) once repeat n (from 1) is done."""
    rows = list(rows)
    samples = {row: [] for row in rows}
    for repeat in range(repeats):
        for row in rows:
            samples[row].append(measure(row))
        after_repeat(repeat + 1)
    return samples


def medians(samples: dict) -> dict:
    return {row: statistics.median(values) for row, values in samples.items()}


def repeats_parser(repeats: int, **counts: int) -> argparse.ArgumentParser:
    """An argument parser with --repeats and one integer option per keyword (steps=5: --steps, default 5)."""
    parser = argparse.ArgumentParser()
    for name, default in counts.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=int, default=default)
    parser.add_argument("--repeats", type=int, default=repeats)
    return parser


def gpu_timing_rows(policy_files, tmp: str, rows: dict) -> dict:
    """The GPU benches' rows: native, castscope with GPU timing off, and per `rows`
    entry castscope attached with that gpu_timing setting (events to `tmp`)."""
    import castscope

    def attached(gpu):
        return lambda: castscope.attached(policy_files=policy_files, events_path=f"{tmp}/e.jsonl", probe=False,
                                          gpu_timing=gpu)

    return {"native": contextlib.nullcontext, "castscope": attached("off"),
            **{row: attached(gpu) for row, gpu in rows.items()}}


def ms_per_step(wrap: Callable[[], contextlib.AbstractContextManager], run_steps: Callable[[int], Any], steps: int,
                warmup: int) -> float:
    """Milliseconds per step of run_steps(steps) inside wrap(), after `warmup` steps inside it."""
    with wrap():
        run_steps(warmup)
        start = time.perf_counter()
        run_steps(steps)
        return (time.perf_counter() - start) / steps * 1e3


def print_against(median: dict, bases: Iterable[str], unit: str, digits: int = 2) -> None:
    """One line per row: its median and its ratio to each base row ("x1.012 of native")."""
    for row, value in median.items():
        against = "  ".join(f"x{value / median[base]:.3f} of {base}" for base in bases)
        print(f"  {row:18s} {value:8.{digits}f} {unit}  {against}")
