"""`castscope run`: a command with castscope attached through LD_PRELOAD,
a collector beside it, and the run's report at the end."""
from __future__ import annotations

import argparse
import glob
import json
import os
import pathlib
import shutil
import signal
import subprocess
import sys
import time
import uuid


def add_parsers(commands) -> None:
    run = commands.add_parser("run", help="run a command with castscope attached")
    run.add_argument("--policy", dest="policies", action="append", default=[], help="base policy file")
    run.add_argument("--overlay", dest="overlays", action="append", default=[], help="user overlay, applied last")
    run.add_argument("--out", default="castscope-out", help="directory for events-<pid>.jsonl (default: castscope-out)")
    run.add_argument("--aggregate", action="store_true",
                     help="per-site counters instead of per-event records (docs/aggregate.md)")
    run.add_argument("--stacks", action="store_true", help="record the whole Python stack of every site")
    run.add_argument("--no-probe", action="store_true",
                     help="no op probe windows (low-precision-escape, cast-churn and not-autocast need them)")
    run.add_argument("--collector", help="send events to this collector (HOST:PORT; token in CASTSCOPE_TOKEN) "
                                         "instead of one started for the job")
    run.add_argument("--no-jsonl", action="store_true", help="no events-<pid>.jsonl dumps: the collector only")
    run.add_argument("--ring-records", type=int, default=1 << 14,
                     help="events buffered per thread between exporter passes (128 bytes each; default 16384)")
    run.add_argument("--tls-ca", help="CA certificate (PEM) of a --collector that serves TLS")
    run.add_argument("--give-up-after-s", type=_seconds, default=60,
                     help="after the job ends, how long the collector may stay unreachable before its batches are "
                          "left in the spool for `castscope load` (default 60)")
    run.add_argument("--gpu-timing", choices=("auto", "on", "off"), default=None,
                     help="CUDA kernel timing with CUPTI (docs/gpu.md; default auto: on when torch sees a GPU)")
    run.add_argument("--gpu-every-step", action="store_true",
                     help="time every step instead of 2 in 100 (costs about 12 %% of a launch-bound step)")
    run.add_argument("--serve", action="store_true",
                     help="keep serving the viewer after the job ends, until Ctrl-C (not with --collector)")
    run.add_argument("--http-listen", default="127.0.0.1:0",
                     help="where the embedded collector serves the viewer (default: a free loopback port)")
    run.add_argument("--ui-dir", help="the built viewer the embedded collector serves (default: ui/dist beside the "
                                      "collector's build; not with --collector)")
    run.add_argument("--run-id", help="name of this run in the collector (default: time and a random suffix)")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    run.set_defaults(handler=run_command)


def _seconds(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number of seconds") from None
    if not 0 <= value <= 1 << 30:
        raise argparse.ArgumentTypeError(f"{value} is out of range (0 to {1 << 30})")
    return value


def _job_path0(command: list[str]) -> str:
    """sys.path[0] of a Python command: the script's folder, or the current
    directory for -m, -c and an interactive interpreter."""
    arguments = iter(command[1:])
    for argument in arguments:
        if argument.startswith(("-m", "-c")):
            return os.getcwd()
        if argument in ("-W", "-X", "--check-hash-based-pycs"):
            next(arguments, None)  # the option's value
        elif not argument.startswith("-"):
            return os.path.dirname(os.path.abspath(argument))
    return os.getcwd()


def _probe_job(command: list[str], overlays: list[dict]) -> tuple[str | None, list[str], bool]:
    """The torch a Python job will import, and the module overlays whose
    module it cannot find, both asked of the job's own interpreter with the
    job's sys.path[0] (without importing the overlays' modules). The last
    value says whether the job's interpreter answered: for a command that is
    not Python (torchrun, pytest, a shell script), this interpreter looks the
    modules up, and what it misses is only a warning."""
    from .. import module_paths

    executable = shutil.which(command[0]) or command[0]
    if not os.path.basename(executable).startswith("python"):
        return None, module_paths.missing_module_errors(overlays), False
    code = pathlib.Path(module_paths.__file__).read_text() + (
        "\nimport json as _json\n"
        "sys.path.insert(0, sys.argv[1])\n"
        "try:\n    import torch\n    _version = torch.__version__\nexcept Exception:\n    _version = None\n"
        "print(_json.dumps({'torch': _version, 'missing': missing_module_errors(_json.load(sys.stdin))}))\n")
    # The entries go through stdin: as an argument, a few thousand of them
    # passed Linux's 128 KiB limit for one argument (OSError: E2BIG).
    probe = subprocess.run([executable, "-c", code, _job_path0(command)], input=json.dumps(overlays),
                           capture_output=True, text=True, timeout=300)
    try:
        answer = json.loads(probe.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return None, module_paths.missing_module_errors(overlays), False
    return answer["torch"], answer["missing"], True


def run_command(args) -> int:
    from .._native import _PACKAGE_DIR, agent_library_path, agent_torch_version
    from ..collector import CollectorError, EmbeddedCollector, pending_spool
    from ..config import default_policy_files
    from ..events import iter_events, summarize
    from ..policy import policy_check

    command = args.command
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("castscope run: no command given (castscope run [options] -- COMMAND...)", file=sys.stderr)
        return 2
    if args.ui_dir and not (pathlib.Path(args.ui_dir) / "index.html").is_file():
        print(f"castscope run: --ui-dir {args.ui_dir}: no index.html there (give the built viewer, ui/dist: "
              f"cd ui && npm run build)", file=sys.stderr)
        return 2
    # The overlays' modules are looked up by the job's own interpreter below.
    report = policy_check(policy_files=args.policies or None, overlays=args.overlays, check_modules=False)
    if not report["ok"]:
        print("castscope run: policy refused, the job was not started:", file=sys.stderr)
        for error in report["errors"] + [f["message"] for f in report["findings"] if f["severity"] == "error"]:
            print(f"  {error}", file=sys.stderr)
        return 2
    agent = agent_library_path()
    built_for = agent_torch_version()
    job_torch, missing_modules, asked_the_job = _probe_job(command, report.get("callable_overlays", []))
    if missing_modules and asked_the_job:
        print("castscope run: policy refused, the job was not started:", file=sys.stderr)
        for error in missing_modules:
            print(f"  {error}", file=sys.stderr)
        return 2
    for error in missing_modules:  # another launcher: its processes may see other modules
        print(f"castscope run: warning: {error} (asked of {sys.executable}, not of {command[0]}; the overlay "
              f"applies if the job imports it)", file=sys.stderr)
    if job_torch is not None and job_torch.split("+")[0] != built_for.split("+")[0]:
        print(f"castscope run: the agent was built against torch {built_for}, but {command[0]} imports torch "
              f"{job_torch}; rebuild castscope against that torch (scripts/setup.sh). The job was not started.",
              file=sys.stderr)
        return 2
    preload = agent.parent / "libcastscope_preload.so"
    out = pathlib.Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    for stale in list(out.glob("events-*.jsonl")) + list(out.glob("refused-*.txt")):
        stale.unlink()
    spool_dir = out / "spool"
    spool_dir.mkdir(mode=0o700, exist_ok=True)
    for stale in list(spool_dir.glob("*.forwarder.log")) + list(spool_dir.glob("*.forwarder.json")):
        stale.unlink()
    if pending_spool(spool_dir):
        print(f"castscope run: {spool_dir} holds batches of an earlier run that were never delivered; load them "
              f"(castscope load --db DB {spool_dir}) or remove them. The job was not started.", file=sys.stderr)
        return 2
    embedded = None
    collector = args.collector
    if collector is None:
        try:
            embedded = EmbeddedCollector(out / "castscope.db", out / "collector.log", http_listen=args.http_listen,
                                         ui_dir=pathlib.Path(args.ui_dir).resolve() if args.ui_dir else None)
        except (CollectorError, FileNotFoundError) as e:
            print(f"castscope run: cannot start the collector: {e}. The job was not started.", file=sys.stderr)
            return 2
        collector = embedded.address
        if embedded.viewer_url:
            print(f"castscope: viewer at {embedded.viewer_url}", file=sys.stderr, flush=True)
    elif args.serve or args.ui_dir:
        print(f"castscope run: {'--serve' if args.serve else '--ui-dir'} needs the embedded collector (your "
              f"--collector serves its own viewer)", file=sys.stderr)
        return 2
    run_id = args.run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
    files = list(args.policies or default_policy_files()) + list(args.overlays)
    env = dict(os.environ)
    env["LD_PRELOAD"] = " ".join(filter(None, [str(preload), env.get("LD_PRELOAD", "")]))
    config = {"policy_files": [str(pathlib.Path(f).resolve()) for f in files],
              "events_path": None if args.no_jsonl else str(out / "events-{pid}.jsonl"),
              "ring_records": args.ring_records,
              "aggregate": True if args.aggregate else None,
              "collector": collector, "spool_dir": str(spool_dir), "run_id": run_id,
              "give_up_after_s": args.give_up_after_s,
              "tls_ca": str(pathlib.Path(args.tls_ca).resolve()) if args.tls_ca else None,
              "command": " ".join(command),
              "probe": False if args.no_probe else None,
              "gpu_timing": args.gpu_timing,
              "gpu_window_steps": 0 if args.gpu_every_step else None}
    env["CASTSCOPE_CONFIG"] = json.dumps({k: v for k, v in config.items() if v is not None})
    env["CASTSCOPE_AGENT_LIB"] = str(agent)
    env["CASTSCOPE_STATUS_DIR"] = str(out)
    package_root = _PACKAGE_DIR.parent  # holds castscope/ and castscope_boot/
    # Python processes attach from sitecustomize once torch is imported; C++
    # programs through the preload, just before main.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(package_root / "castscope_boot"), str(package_root),
                                                      env.get("PYTHONPATH", "")]))
    if args.stacks:
        env["CASTSCOPE_STACKS"] = "1"
    try:
        job = subprocess.Popen(command, env=env)
    except OSError as e:
        print(f"castscope run: cannot start {command[0]}: {e}", file=sys.stderr)
        if embedded is not None:
            embedded.stop()
        return 127
    while True:
        try:
            code = job.wait()
            break
        except KeyboardInterrupt:
            job.send_signal(signal.SIGINT)  # the job decides; we wait for it
    exit_code = code if code >= 0 else 128 - code
    tls_ca = str(pathlib.Path(args.tls_ca).resolve()) if args.tls_ca else None
    _finish_delivery(spool_dir, embedded, run_id, collector, args.give_up_after_s, tls_ca, keep_serving=args.serve)
    if embedded is not None:
        _write_report(embedded.db, run_id, out / "report.json")
    else:
        skipped: list = []
        paths = sorted(glob.glob(str(out / "events-*.jsonl")))
        if paths:
            events = (event for path in paths for event in iter_events(path, skipped))
            print(summarize(events, skipped), file=sys.stderr)
        _print_stored_remote(collector, run_id, tls_ca)
    print(f"castscope: events in {out}", file=sys.stderr)
    refused = sorted(out.glob("refused-*.txt"))
    for path in refused:
        print(f"castscope: {path.read_text().strip()}", file=sys.stderr)
    if args.serve and embedded is not None:
        print(f"castscope: the job ended; still serving the viewer at {embedded.viewer_url} (Ctrl-C to stop)",
              file=sys.stderr, flush=True)
        embedded.wait_for_interrupt()
        embedded.stop()
    return 3 if refused and exit_code == 0 else exit_code


def _finish_delivery(spool_dir: pathlib.Path, embedded, run_id: str, collector: str, give_up_after_s: int,
                     tls_ca: str | None, keep_serving: bool = False) -> None:
    """Waits for the job's forwarders, stops an embedded collector, says where the events are."""
    from ..collector import Delivery

    left = Delivery(spool_dir, collector, give_up_after_s, tls_ca).wait()
    for log in sorted(spool_dir.glob("*.forwarder.log")):
        for line in log.read_text(errors="replace").splitlines():
            if " error: " in line:
                print(f"castscope: {line}", file=sys.stderr)
    if embedded is not None:
        if not keep_serving:
            embedded.stop()
        print(f"castscope: run {run_id} stored in {embedded.db}", file=sys.stderr)
        _print_stored(embedded.db, run_id)
    else:
        print(f"castscope: run {run_id} sent to the collector at {collector}", file=sys.stderr)
    if left:
        db = str(embedded.db) if embedded is not None else "DB"
        where = "" if embedded is not None else " (DB: the collector's database)"
        print(f"castscope: {len(left)} spool file(s) were not delivered and stay in {spool_dir}; load them with: "
              f"castscope load --db {db} {spool_dir}{where}", file=sys.stderr)


def _print_stored_remote(collector: str, run_id: str, tls_ca: str | None) -> None:
    """Per process: what a collector of one's own stored (asked over gRPC)."""
    from .._native import collector_binary

    command = [str(collector_binary()), "query", "--collector", collector]
    command += ["--tls-ca", tls_ca] if tls_ca else []
    command += ["runs"]
    result = subprocess.run(command, capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        print(f"castscope: cannot ask the collector at {collector} what it stored: {result.stderr.strip()}",
              file=sys.stderr)
        return
    _print_agents(json.loads(result.stdout), run_id)


def _write_report(db: pathlib.Path, run_id: str, path: pathlib.Path) -> None:
    """The run's audit report: JSON in `path`, a summary on the terminal."""
    from ..files import write_private_text
    from ..report import ReportError, format_report, load_report

    try:
        report = load_report(db, run_id)
    except (ReportError, FileNotFoundError) as e:
        print(f"castscope: no report for run {run_id}: {e}", file=sys.stderr)
        return
    write_private_text(path, json.dumps(report, indent=2) + "\n")
    print(format_report(report), file=sys.stderr)
    print(f"castscope: report in {path}", file=sys.stderr)


def _print_stored(db: pathlib.Path, run_id: str) -> None:
    """Per process: what the collector stored, and what the agent dropped."""
    from .._native import collector_binary

    result = subprocess.run([str(collector_binary()), "query", "--db", str(db), "runs"],
                            capture_output=True, text=True, timeout=300)
    if result.returncode != 0:
        print(f"castscope: cannot read {db}: {result.stderr.strip()}", file=sys.stderr)
        return
    _print_agents(json.loads(result.stdout), run_id)


def _print_agents(runs: list, run_id: str) -> None:
    for run in runs:
        if run["run_id"] != run_id:
            continue
        for agent in run["agents"]:
            identity = agent["identity"]
            rank = f" rank {identity['rank']}" if identity.get("rank", -1) >= 0 else ""
            n = {k: int(agent.get(k, 0)) for k in ("casts", "ops", "cache_samples", "kernels", "events_dropped_total",
                                                   "events_recorded_total")}  # proto3 JSON leaves zeros out
            stored = n["casts"] + n["ops"] + n["cache_samples"] + n["kernels"]
            unaccounted = n["events_recorded_total"] - stored
            kernels = f", {n['kernels']} GPU activities" if n["kernels"] else ""
            print(f"  pid {identity['pid']}{rank}: {n['casts']} casts, {n['ops']} ops, "
                  f"{n['cache_samples']} cache samples{kernels} stored; {n['events_dropped_total']} events dropped"
                  f"{'' if agent.get('finished') else ' (INCOMPLETE: the process did not finish normally)'}"
                  f"{f'; {unaccounted} recorded events not stored' if unaccounted > 0 else ''}", file=sys.stderr)
