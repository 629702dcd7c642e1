"""Time of checking and applying a large policy overlay, by its number of entries.

Rows (each timed in a fresh child process, so nothing is interned or cached
from an earlier measurement; only the call itself is timed, not the start of
Python or `import torch`):
  check ops       castscope.policy_check(overlays=[F]) with F an "ops" overlay: parse and
                  validate the shipped policies and F, compare them with the dispatcher
  check callables the same with F a "modules" + "functions" overlay (half each), which also
                  looks up every entry's module without importing it
  attach ops      castscope.attach(overlays=[F], probe=False): the same checks, then a
                  kernel registered on the autocast key per op (castscope run's path in the job)
  attach imported castscope.attach with the callables overlay, its modules imported before:
                  every entry wrapped at attach
  attach importing  castscope.attach called from inside the overlaid module while it is
                  still importing (as `castscope run` may): attach, plus the first attribute
                  lookup after the import, which wraps every waiting entry

The ops overlay names the ops of a custom op library (`benchlib::op<i>`,
defined with torch.library in the child before the timing starts), as an
overlay for a big third-party library would; the callables overlay names
functions and nn.Module classes of generated modules, 1000 entries per module.
Every entry is valid and found: no findings, no errors.

Per entry = (median at N - median at 0 entries) / N: the fixed cost (the shipped
policies, the dispatcher's registrations) left out. Linear means the per-entry
time stays flat, so the 20k/2k ratio of the time above the 0-entry row is ~10.

    .venv/bin/python bench/overlay_check_bench.py [--sizes 2000,5000,20000] [--repeats 5]
"""
import argparse
import json
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

from harness import interleaved

ROWS = ("check ops", "check callables", "attach ops", "attach imported", "attach importing")
PER_MODULE = 1000


def write_ops_overlay(path: pathlib.Path, entries: int) -> None:
    ops = {f"benchlib::op{i}": "fp32" for i in range(entries)}
    path.write_text(json.dumps({"castscope_policy": 1, "device": "cpu", "ops": ops}, indent=1))


def module_names(entries: int, per_module: int) -> list[str]:
    return [f"m{i}" for i in range((entries + per_module - 1) // per_module)]


def write_callables(folder: pathlib.Path, package: str, entries: int, attach_first: str | None) -> None:
    """A package of modules with `entries` functions and module classes, and
    the overlay naming them all (package.json). With `attach_first`, one
    module holds them all and attaches castscope with that overlay before
    defining anything (the importing row: every entry waits)."""
    (folder / package).mkdir()
    (folder / package / "__init__.py").write_text("")
    per_module = max(entries, 1) if attach_first else PER_MODULE
    functions, modules = {}, {}
    for module, name in enumerate(module_names(entries, per_module)):
        count = min(per_module, entries - module * per_module)
        lines = ["import time", "import torch"]
        if attach_first:
            lines += ["import castscope", "_start = time.perf_counter()",
                      f"castscope.attach(overlays=[{attach_first!r}], probe=False, "
                      f"events_path={str(folder / f'events-{package}.jsonl')!r})",
                      "attach_s = time.perf_counter() - _start"]
        for i in range(count):
            if i % 2:
                lines += [f"class M{i}(torch.nn.Module):", "    def forward(self, x):", "        return x"]
                modules[f"{package}.{name}.M{i}"] = "fp32"
            else:
                lines += [f"def f{i}(x):", "    return x"]
                functions[f"{package}.{name}.f{i}"] = "fp32"
        (folder / package / f"{name}.py").write_text("\n".join(lines) + "\n")
    overlay = folder / f"{package}.json"
    overlay.write_text(json.dumps({"castscope_policy": 1, "modules": modules, "functions": functions}, indent=1))


def child(row: str, folder: str, entries: int) -> None:
    """Runs in a fresh process: one measurement, printed as seconds."""
    import importlib

    import torch

    import castscope

    if row.endswith(" ops"):  # not timed: the library whose ops the overlay names
        library = torch.library.Library("benchlib", "DEF")
        for i in range(entries):
            library.define(f"op{i}(Tensor x) -> Tensor")

    folder = pathlib.Path(folder)
    sys.path.insert(0, str(folder))
    modules = module_names(entries, max(entries, 1) if row == "attach importing" else PER_MODULE)
    events = folder / f"events-{row.replace(' ', '_')}-{entries}.jsonl"
    if row == "check ops":
        start = time.perf_counter()
        report = castscope.policy_check(overlays=[str(folder / f"ops{entries}.json")])
        elapsed = time.perf_counter() - start
        assert report["ok"], report["errors"]
        assert not [f for f in report["findings"] if f["op"].startswith("benchlib::")], "an overlay op was not found"
    elif row == "check callables":
        start = time.perf_counter()
        report = castscope.policy_check(overlays=[str(folder / f"wrapped{entries}.json")])
        elapsed = time.perf_counter() - start
        assert report["ok"], report["errors"]
    elif row == "attach ops":
        start = time.perf_counter()
        castscope.attach(overlays=[str(folder / f"ops{entries}.json")], probe=False, events_path=events)
        elapsed = time.perf_counter() - start
    elif row == "attach imported":
        for module in modules:
            importlib.import_module(f"wrapped{entries}.{module}")
        start = time.perf_counter()
        castscope.attach(overlays=[str(folder / f"wrapped{entries}.json")], probe=False, events_path=events)
        elapsed = time.perf_counter() - start
    elif row == "attach importing":
        if not modules:  # nothing to import: attach alone
            start = time.perf_counter()
            castscope.attach(overlays=[str(folder / f"importing{entries}.json")], probe=False, events_path=events)
            elapsed = time.perf_counter() - start
        else:
            first = importlib.import_module(f"importing{entries}.m0")  # attaches inside (timed there)
            start = time.perf_counter()
            first.f0  # the first lookup after the import wraps the waiting entries
            elapsed = first.attach_s + time.perf_counter() - start
    else:
        raise SystemExit(f"unknown row {row!r}")
    if row in ("attach imported", "attach importing") and modules:
        package = "wrapped" if row == "attach imported" else "importing"
        last = importlib.import_module(f"{package}{entries}.{modules[-1]}")
        assert hasattr(last.f0, "_castscope_overlay"), "the overlay was not applied"
    if row.startswith("attach"):
        castscope.detach()
    print(f"{elapsed:.6f}")


def measure(row: str, folder: pathlib.Path, entries: int) -> float:
    result = subprocess.run([sys.executable, __file__, "--child", row, str(folder), str(entries)],
                            capture_output=True, text=True, timeout=900)
    if result.returncode != 0:
        raise RuntimeError(f"{row} at {entries} entries failed:\n{result.stdout}{result.stderr}")
    return float(result.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="2000,5000,20000", help="overlay sizes in entries, comma-separated")
    parser.add_argument("--repeats", type=int, default=5, help="child processes per row and size (median)")
    parser.add_argument("--rows", default=",".join(ROWS), help=f"comma-separated subset of: {', '.join(ROWS)}")
    parser.add_argument("--child", nargs=3, metavar=("ROW", "FOLDER", "ENTRIES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], args.child[1], int(args.child[2]))
        return
    sizes = [0] + sorted({int(s) for s in args.sizes.split(",")})
    rows = [r.strip() for r in args.rows.split(",")]
    for row in rows:
        if row not in ROWS:
            parser.error(f"--rows: unknown row {row!r} (expected some of {', '.join(ROWS)})")
    with tempfile.TemporaryDirectory(prefix="castscope-overlay-bench-") as tmp:
        folder = pathlib.Path(tmp)
        for n in sizes:
            write_ops_overlay(folder / f"ops{n}.json", n)
            write_callables(folder, f"wrapped{n}", n, None)
            write_callables(folder, f"importing{n}", n, str(folder / f"importing{n}.json"))
        # Interleaved: a slow spell of the machine hits every size.
        times = interleaved([(row, n) for row in rows for n in sizes], args.repeats, lambda cell: measure(cell[0], folder, cell[1]),
                            lambda repeat: print(f"repeat {repeat}/{args.repeats} done", file=sys.stderr, flush=True))

    print(f"median and min of {args.repeats} child processes per cell; per entry = (median - median at 0) / entries")
    print(f"{'row':<18} {'entries':>8} {'median s':>9} {'min s':>8} {'per entry us':>13}")
    for row in rows:
        base = statistics.median(times[row, 0])
        for n in sizes:
            median = statistics.median(times[row, n])
            per_entry = f"{(median - base) / n * 1e6:13.1f}" if n else f"{'':>13}"
            print(f"{row:<18} {n:>8} {median:9.3f} {min(times[row, n]):8.3f} {per_entry}")
        small, large = sizes[1], sizes[-1]
        if large > small:
            above = [(statistics.median(times[row, n]) - base) for n in (small, large)]
            ratio = above[1] / above[0] if above[0] > 0 else float("inf")
            print(f"{row:<18} {large}/{small} above the 0-entry row: {ratio:.1f}x "
                  f"(entries {large / small:.0f}x: linear ~{large / small:.0f}, quadratic ~{(large / small) ** 2:.0f})")


if __name__ == "__main__":
    main()
