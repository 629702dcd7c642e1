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
import socket
import subprocess
import sys
import threading
import time
import uuid

from . import arguments

MAX_RING_RECORDS = 1 << 24  # kMaxRingRecords, agent/src/record/event_log.h


def add_parsers(commands) -> None:
    run = commands.add_parser("run", help="run a command with castscope attached")
    run.add_argument("--policy", dest="policies", action="append", default=[], help="base policy file")
    run.add_argument("--overlay", dest="overlays", action="append", default=[], help="user overlay, applied last")
    run.add_argument("--out", type=arguments.output_folder, default="castscope-out",
                     help="directory for events-<pid>.jsonl (default: castscope-out)")
    run.add_argument("--aggregate", action="store_true",
                     help="per-site counters instead of per-event records (docs/aggregate.md)")
    run.add_argument("--stacks", action="store_true", help="record the whole Python stack of every site")
    run.add_argument("--no-numerics", action="store_true",
                     help="no numerics windows (cast-overflow, cast-underflow, nonfinite-output and scaler-skips' "
                          "first non-finite op need them; docs/numerics.md)")
    run.add_argument("--no-probe", action="store_true",
                     help="no op probe windows (low-precision-escape, cast-churn and not-autocast need them)")
    run.add_argument("--collector", type=arguments.collector_address,
                     help="send events to this collector (HOST:PORT or unix:PATH; token in CASTSCOPE_TOKEN) instead "
                          "of one started for the job")
    run.add_argument("--no-jsonl", action="store_true", help="no events-<pid>.jsonl dumps: the collector only")
    run.add_argument("--ring-records", type=arguments.whole_number("a ring size", 1, MAX_RING_RECORDS),
                     default=1 << 14,
                     help="events buffered per thread between exporter passes (128 bytes each; default 16384)")
    run.add_argument("--tls-ca", type=arguments.readable_file,
                     help="CA certificate (PEM) of a --collector that serves TLS")
    run.add_argument("--give-up-after-s", type=arguments.whole_number("seconds", 0, 1 << 30), default=60,
                     help="after the job ends, how long the collector may stay unreachable before its batches are "
                          "left in the spool for `castscope load` (default 60)")
    run.add_argument("--gpu-timing", choices=("auto", "on", "off"), default=None,
                     help="CUDA kernel timing with CUPTI (docs/gpu.md; default auto: on when torch sees a GPU)")
    run.add_argument("--gpu-every-step", action="store_true",
                     help="time every step instead of 2 in 100 (costs about 12 %% of a launch-bound step)")
    run.add_argument("--serve", action="store_true",
                     help="keep serving the viewer after the job ends, until Ctrl-C (not with --collector)")
    run.add_argument("--http-listen", type=arguments.listen_address, default="127.0.0.1:0",
                     help="where the embedded collector serves the viewer (default: a free loopback port)")
    run.add_argument("--ui-dir", help="the built viewer the embedded collector serves (default: the one installed "
                                      "with castscope, or ui/dist of the source tree; not with --collector)")
    run.add_argument("--ship", metavar="URL",
                     help="the embedded collector ships rollups, findings and the job's end to this fleet PostgreSQL "
                          "(libpq URL without a password; password from --ship-password-file, PGPASSWORD or "
                          "~/.pgpass; CASTSCOPE_SHIP, which the collector reads, does the same; docs/fleet.md; "
                          "not with --collector)")
    run.add_argument("--ship-password-file",
                     help="the fleet PostgreSQL's password, from this file (mode 600; or CASTSCOPE_SHIP_PASSWORD_FILE)")
    run.add_argument("--run-id", type=_run_id,
                     help="name of this run in the collector (default: time and a random suffix)")
    run.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    run.set_defaults(handler=run_command)


def _run_id(text: str) -> str:
    if not text or len(text) > 256:
        raise argparse.ArgumentTypeError(f"a run id has 1 to 256 characters, not {len(text)}")
    return text


def _name_lookup_problem(address: str, wait_s: float = 10.0) -> str | None:
    """Why the collector's host name cannot be looked up, or None. In a
    thread with a time limit: a lookup that hangs must not hold the job for
    the resolver's whole minute."""
    if address.startswith("unix:"):
        return None
    host, _, port = address.rpartition(":")
    host = host[1:-1] if host.startswith("[") else host
    answer: list = []

    def look_up() -> None:
        try:
            socket.getaddrinfo(host, int(port), type=socket.SOCK_STREAM)
            answer.append(None)
        except OSError as e:
            answer.append(f"cannot look up {host}: {e.strerror or e}")

    thread = threading.Thread(target=look_up, name="castscope-lookup", daemon=True)
    thread.start()
    thread.join(wait_s)
    return answer[0] if answer else f"the name lookup of {host} did not answer in {wait_s:.0f} s"


def _is_python(command: list[str]) -> bool:
    executable = shutil.which(command[0]) or command[0]
    return os.path.basename(executable).startswith("python")


def run_command(args) -> int:
    from .._native import _PACKAGE_DIR, agent_library_path
    from .._policy_lint import lint_policy_files
    from ..embedded_collector import CollectorError, EmbeddedCollector, pending_spool
    from ..config import default_policy_files
    from ..events import iter_events, summarize

    command = args.command
    if command and command[0] == "--":
        command = command[1:]
    if not command:
        print("castscope run: no command given (castscope run [options] -- COMMAND...)", file=sys.stderr)
        return 2
    if args.collector is not None and (args.serve or args.ui_dir):
        print(f"castscope run: {'--serve' if args.serve else '--ui-dir'} needs the embedded collector (your "
              f"--collector serves its own viewer)", file=sys.stderr)
        return 2
    if args.collector is not None and (args.ship or args.ship_password_file):
        print("castscope run: --ship needs the embedded collector (your --collector ships when started with "
              "castscope serve --ship URL)", file=sys.stderr)
        return 2
    if args.ui_dir and not (pathlib.Path(args.ui_dir) / "index.html").is_file():
        print(f"castscope run: --ui-dir {args.ui_dir}: no index.html there (give the built viewer, ui/dist: "
              f"cd ui && npm run build)", file=sys.stderr)
        return 2
    files = list(args.policies or default_policy_files()) + list(args.overlays)
    # Without torch (importing it costs seconds): what needs the job's torch
    # and its path is checked in the job at start-up and at attach, which
    # stop it before its code runs (_job_preflight.py).
    try:
        agent = agent_library_path()
        report = lint_policy_files(files)
    except (OSError, RuntimeError) as e:
        print(f"castscope run: cannot check the policy: {e}. The job was not started.", file=sys.stderr)
        return 2
    if not report["ok"]:
        print("castscope run: policy refused, the job was not started:", file=sys.stderr)
        for error in report["errors"]:
            print(f"  {error}", file=sys.stderr)
        return 2
    preload = agent.parent / "libcastscope_preload.so"
    if args.collector is not None and (problem := _name_lookup_problem(args.collector)):
        print(f"castscope run: --collector {args.collector}: {problem}. The job was not started.", file=sys.stderr)
        return 2
    out = args.out.resolve()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        print(f"castscope run: --out {args.out}: cannot create the folder: {e.strerror}. The job was not started.",
              file=sys.stderr)
        return 2
    for stale in list(out.glob("events-*.jsonl")) + list(out.glob("refused-*.txt")) + list(out.glob("stopped-*.txt")):
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
                                         ui_dir=pathlib.Path(args.ui_dir).resolve() if args.ui_dir else None,
                                         ship=args.ship, ship_password_file=args.ship_password_file)
        except (CollectorError, FileNotFoundError) as e:
            print(f"castscope run: cannot start the collector: {e}. The job was not started.", file=sys.stderr)
            return 2
        collector = embedded.address
        if embedded.viewer_url:
            print(f"castscope: viewer at {embedded.viewer_url}", file=sys.stderr, flush=True)
    run_id = args.run_id or f"{time.strftime('%Y%m%d-%H%M%S')}-{uuid.uuid4().hex[:8]}"
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
              "numerics": False if args.no_numerics else None,
              "gpu_timing": args.gpu_timing,
              "gpu_steps": 0 if args.gpu_every_step else None}
    env["CASTSCOPE_CONFIG"] = json.dumps({k: v for k, v in config.items() if v is not None})
    env["CASTSCOPE_AGENT_LIB"] = str(agent)
    env["CASTSCOPE_STATUS_DIR"] = str(out)
    # Python processes attach from sitecustomize once torch is imported (it
    # imports the castscope beside it); C++ programs through the preload, just before main.
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_PACKAGE_DIR.parent / "castscope_boot"),
                                                      env.get("PYTHONPATH", "")]))
    if args.stacks:
        env["CASTSCOPE_STACKS"] = "1"
    if _is_python(command):  # its start-up refuses a missing module; a launcher's children only warn
        env["CASTSCOPE_RUN_PYTHON_JOB_OF"] = str(os.getpid())
    else:
        env.pop("CASTSCOPE_RUN_PYTHON_JOB_OF", None)
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
    stopped = sorted(out.glob("stopped-*.txt"))
    report, undelivered = _finish_delivery(spool_dir, embedded, run_id, collector, args.give_up_after_s, tls_ca,
                                           keep_serving=args.serve and not stopped, quiet=bool(stopped))
    if stopped:
        for path in stopped:
            pid = path.stem.split("-", 1)[1]
            print(f"castscope run: policy refused in pid {pid}, the job was not started:", file=sys.stderr)
            for line in path.read_text(errors="replace").splitlines():
                print(f"  {line}", file=sys.stderr)
        return 2
    if report is not None:
        _write_report(report, run_id, out / "report.json")
    else:
        skipped: list = []
        paths = sorted(glob.glob(str(out / "events-*.jsonl")))
        if paths:
            events = (event for path in paths for event in iter_events(path, skipped))
            print(summarize(events, skipped), file=sys.stderr)
        if not undelivered:  # else the collector was not reached: asking it what it stored would wait again
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
    if args.ship and embedded is not None:
        _say_what_was_not_shipped(out / "castscope.db", args.ship, args.ship_password_file)
    return 3 if refused and exit_code == 0 else exit_code


def _say_what_was_not_shipped(db: pathlib.Path, url: str, password_file: str | None) -> None:
    """After the embedded collector's last shipping attempt (at its stop): if
    that failed, say why and how to ship what waits in the job's store (the
    job's exit status stays the job's)."""
    from .._native import collector_binary

    result = subprocess.run([str(collector_binary()), "query", "--db", str(db), "shipping"], capture_output=True,
                            text=True, timeout=60)
    if result.returncode != 0:
        print(f"castscope: cannot tell what reached the fleet: {result.stderr.strip()}", file=sys.stderr)
        return
    state = json.loads(result.stdout)
    if not state.get("last_error"):
        return
    password = f" --ship-password-file {password_file}" if password_file else ""
    print(f"castscope: shipping to the fleet failed: {state['last_error']}", file=sys.stderr)
    print(f"castscope: this run's rollups wait in {db} ({state.get('backlog_rows', 0)} rows); ship them once the "
          f"fleet is reachable with: castscope serve --db {db} --ship '{url}'{password}", file=sys.stderr)


def _finish_delivery(spool_dir: pathlib.Path, embedded, run_id: str, collector: str, give_up_after_s: int,
                     tls_ca: str | None, keep_serving: bool = False, quiet: bool = False):
    """Waits for the job's forwarders, stops an embedded collector, says where
    the events are (`quiet`: only what went wrong). Returns the embedded
    collector's report of the run (being built meanwhile) or None, and the
    spool files that were not delivered."""
    from ..embedded_collector import Delivery
    from ..report import PendingReport

    delivery = Delivery(spool_dir, collector, give_up_after_s, tls_ca)
    left = delivery.wait()
    if embedded is None:  # a collector of one's own goes on taking what processes the job left running send
        left = [path for path in left if path.parent.name not in delivery.left_running]
    for log in sorted(spool_dir.glob("*.forwarder.log")):
        for line in log.read_text(errors="replace").splitlines():
            if " error: " in line:
                print(f"castscope: {line}", file=sys.stderr)
    report = stored = None
    if embedded is not None and not quiet:
        # Every delivered batch is committed (acknowledged after the commit): the report and the
        # stored counts are read from the database while the collector shuts down.
        try:
            report = PendingReport(embedded.db, run_id)
        except OSError as e:
            print(f"castscope: no report for run {run_id}: {e}", file=sys.stderr)
        stored = _start_stored_query(embedded.db)
    if embedded is not None and not keep_serving:
        embedded.stop()
    if quiet:
        pass
    elif embedded is not None:
        print(f"castscope: run {run_id} stored in {embedded.db}", file=sys.stderr)
        _print_stored(stored, embedded.db, run_id)
    elif left:
        print(f"castscope: run {run_id} was NOT fully delivered: the collector at {collector} did not take it",
              file=sys.stderr)
    else:
        print(f"castscope: run {run_id} sent to the collector at {collector}", file=sys.stderr)
    if left:
        db = str(embedded.db) if embedded is not None else "DB"
        where = "" if embedded is not None else " (DB: the collector's database)"
        print(f"castscope: {len(left)} spool file(s) were not delivered and stay in {spool_dir}; load them with: "
              f"castscope load --db {db} {spool_dir}{where}", file=sys.stderr)
    return report, left


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


def _write_report(pending, run_id: str, path: pathlib.Path) -> None:
    """The run's audit report: JSON in `path`, a summary on the terminal."""
    from ..private_files import write_private_text
    from ..report import ReportError, format_report

    try:
        report = pending.result()
    except ReportError as e:
        print(f"castscope: no report for run {run_id}: {e}", file=sys.stderr)
        return
    write_private_text(path, json.dumps(report, indent=2) + "\n")
    print(format_report(report), file=sys.stderr)
    print(f"castscope: report in {path}", file=sys.stderr)


def _start_stored_query(db: pathlib.Path) -> subprocess.Popen:
    from .._native import collector_binary

    return subprocess.Popen([str(collector_binary()), "query", "--db", str(db), "runs"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def _print_stored(query: subprocess.Popen, db: pathlib.Path, run_id: str) -> None:
    """Per process: what the collector stored, and what the agent dropped."""
    stdout, stderr = query.communicate(timeout=300)
    if query.returncode != 0:
        print(f"castscope: cannot read {db}: {stderr.strip()}", file=sys.stderr)
        return
    _print_agents(json.loads(stdout), run_id)


def _print_agents(runs: list, run_id: str) -> None:
    for run in runs:
        if run["run_id"] != run_id:
            continue
        for agent in run["agents"]:
            identity = agent["identity"]
            rank = f" rank {identity['rank']}" if identity.get("rank", -1) >= 0 else ""
            counters = ("casts", "ops", "cache_samples", "kernels", "numerics", "events_dropped_total",
                        "events_recorded_total")
            n = {k: int(agent.get(k, 0)) for k in counters}  # proto3 JSON leaves zeros out
            # Every kind of stored event the agent counts as recorded (the store's own accounting).
            stored = n["casts"] + n["ops"] + n["cache_samples"] + n["kernels"] + n["numerics"]
            unaccounted = n["events_recorded_total"] - stored
            kernels = f", {n['kernels']} GPU activities" if n["kernels"] else ""
            numerics = f", {n['numerics']} numerics summaries" if n["numerics"] else ""
            print(f"  pid {identity['pid']}{rank}: {n['casts']} casts, {n['ops']} ops, "
                  f"{n['cache_samples']} cache samples{kernels}{numerics} stored; "
                  f"{n['events_dropped_total']} events dropped"
                  f"{'' if agent.get('finished') else ' (INCOMPLETE: the process did not finish normally)'}"
                  f"{f'; {unaccounted} recorded events not stored' if unaccounted > 0 else ''}", file=sys.stderr)
