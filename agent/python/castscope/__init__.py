"""castscope: see what autocast did to your job.

    import torch, castscope
    with castscope.attached(events_path="casts.jsonl") as agent:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            model(x)
    print(agent.summary())

`attach()` loads libcastscope_agent.so into this interpreter (after torch),
registers castscope's autocast kernels from the policy files, and records one
event per autocast decision. `detach()` hands autocast back to torch.
"""
from __future__ import annotations

import contextlib
import ctypes
import json
import os
import pathlib
import tempfile
from typing import Iterator, Sequence

__all__ = ["EventFileError", "iter_events", "summarize", "agent_library_path", "Agent", "AttachError", "attach", "attached", "detach", "default_policy_files", "policy_check", "read_events"]

_PACKAGE_DIR = pathlib.Path(__file__).resolve().parent
_REPO_ROOT = _PACKAGE_DIR.parents[2]


class AttachError(RuntimeError):
    """castscope could not take over autocast; native autocast is untouched."""


def _find_built(name: str, build_subdir: str, variable: str) -> pathlib.Path:
    """A built file: $variable, next to this package, or in build/; the
    candidates looked at go in the error when none exists."""
    explicit = os.environ.get(variable)
    candidates = [pathlib.Path(explicit)] if explicit else []
    candidates += [_PACKAGE_DIR / name, _REPO_ROOT / "build" / build_subdir / name]
    for candidate in candidates:
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(f"castscope: {name} not found (looked at {', '.join(str(c) for c in candidates)}); "
                            f"build it with scripts/setup.sh or set {variable}")


def _agent_library_path() -> pathlib.Path:
    try:
        return _find_built("libcastscope_agent.so", "agent", "CASTSCOPE_AGENT_LIB")
    except FileNotFoundError as e:
        raise AttachError(str(e)) from None


def agent_library_path() -> pathlib.Path:
    return _agent_library_path()


def collector_binary() -> pathlib.Path:
    """castscope-collector: the daemon, spool loader, query and report tool."""
    return _find_built("castscope-collector", "server", "CASTSCOPE_COLLECTOR_BIN")


def _python_reader_path() -> pathlib.Path | None:
    agent = _agent_library_path()
    candidate = agent.parent / "libcastscope_python.so"
    return candidate if candidate.is_file() else None


def policies_dir() -> pathlib.Path:
    return pathlib.Path(os.environ.get("CASTSCOPE_POLICIES", _REPO_ROOT / "policies"))


def default_policy_files(devices: Sequence[str] = ("cpu", "cuda", "xpu", "mps")) -> list[str]:
    """The native policy lists shipped for the reference torch, one per device."""
    return [str(policies_dir() / f"{device}.json") for device in devices if (policies_dir() / f"{device}.json").is_file()]


_lib = None


def _library():
    global _lib
    if _lib is None:
        import torch  # noqa: F401  (the agent binds to the libtorch already loaded)

        lib = ctypes.CDLL(str(_agent_library_path()))
        lib.castscope_agent_start.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.castscope_agent_start.restype = ctypes.c_int
        lib.castscope_agent_stop.restype = ctypes.c_int
        lib.castscope_agent_flush.restype = ctypes.c_long
        for name in ("castscope_agent_status", "castscope_policy_check"):
            getattr(lib, name).restype = ctypes.c_size_t
        lib.castscope_agent_status.argtypes = [ctypes.c_char_p, ctypes.c_size_t]
        lib.castscope_policy_check.argtypes = [ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t]
        lib.castscope_agent_mark_iteration.restype = None
        lib.castscope_agent_set_location_reader.argtypes = [ctypes.c_void_p]
        lib.castscope_agent_set_location_reader.restype = None
        lib.castscope_agent_torch_version.restype = ctypes.c_char_p
        lib.castscope_agent_finish.restype = None
        _install_location_reader(lib)
        _lib = lib
    return _lib


def _torch_dir() -> str:
    import torch

    return os.path.dirname(torch.__file__) + os.sep


def _install_location_reader(lib) -> None:
    """Source locations for Python processes: a small CPython-aware library
    the agent calls through a function pointer (the agent never links CPython)."""
    path = _python_reader_path()
    if path is None:
        return
    reader = ctypes.PyDLL(str(path))
    reader.castscope_python_init.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_int]
    reader.castscope_python_init.restype = None
    stacks = os.environ.get("CASTSCOPE_STACKS", "0") not in ("", "0")
    reader.castscope_python_init(ctypes.cast(lib.castscope_intern_location, ctypes.c_void_p), _torch_dir().encode(),
                                 (str(_PACKAGE_DIR) + os.sep).encode(), int(stacks))
    lib.castscope_agent_set_location_reader(ctypes.cast(reader.castscope_python_location, ctypes.c_void_p))
    global _reader
    _reader = reader  # keep loaded


_reader = None


def _read_json(call) -> dict:
    size = 1 << 16
    while True:
        buf = ctypes.create_string_buffer(size)
        needed = call(buf, size)
        if needed < size:
            return json.loads(buf.value.decode())
        size = needed + 1


def _config(policy_files, overlays, events_path, record_events, **extra) -> dict:
    import torch

    files = list(policy_files) if policy_files is not None else default_policy_files()
    files += [str(o) for o in overlays]
    config = {"policy_files": files, "record_events": record_events, "torch_version": torch.__version__,
              "internal_path_prefix": _torch_dir()}
    if events_path is not None:
        config["events_path"] = str(events_path)
    config.update({k: v for k, v in extra.items() if v is not None})
    return config


class EventFileError(ValueError):
    """A line of an events file is not a castscope event."""


def iter_events(path, skipped: list | None = None):
    """Streams a JSON-lines dump, one castscope.v1.Event (as a dict) per line.

    A line that is not JSON (a process killed mid-write leaves a truncated
    last line) is skipped; with `skipped` given, "path:line" is appended to it
    for each, otherwise EventFileError is raised."""
    with open(path, encoding="utf-8", errors="replace") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                event = json.loads(line)
            except json.JSONDecodeError as e:
                if skipped is None:
                    raise EventFileError(f"{path}:{number}: not a castscope event ({e.msg})") from None
                skipped.append(f"{path}:{number}")
                continue
            yield event


def read_events(path) -> list[dict]:
    """Reads a whole JSON-lines dump (see iter_events)."""
    return list(iter_events(path))


def summarize(events, skipped=()) -> str:
    """A terminal summary of events (an iterable, from one or several processes), in one pass."""
    from collections import Counter

    casts, cache = Counter(), Counter()
    ops = 0
    last_stats = {}  # per process: its final counters
    for e in events:
        c = e.get("cast")
        if c is not None:
            cache[c.get("cache")] += 1
            if c["outcome"] == "CAST_OUTCOME_CAST":
                casts[(c["op"], c["arg_name"], c["src_dtype"][6:].lower(), c["dst_dtype"][6:].lower())] += 1
        elif "op" in e:
            ops += 1
        elif "stats" in e:
            last_stats[e["stats"].get("pid")] = e["stats"]
    lines = [f"castscope: {ops} autocast ops, {sum(casts.values())} casts"
             + (f" in {len(last_stats)} processes" if len(last_stats) > 1 else "")]
    for (op, arg, src, dst), n in casts.most_common(15):
        lines.append(f"  {n:6d}  {op:36s} {arg:12s} {src} -> {dst}")
    if cache.get("CACHE_OUTCOME_MISS") or cache.get("CACHE_OUTCOME_HIT") or cache.get("CACHE_OUTCOME_STALE_HIT"):
        lines.append(f"  cast cache: {cache.get('CACHE_OUTCOME_MISS', 0)} misses, {cache.get('CACHE_OUTCOME_HIT', 0)} hits, "
                     f"{cache.get('CACHE_OUTCOME_STALE_HIT', 0)} stale hits")
    if last_stats:
        dropped = sum(int(s["events_dropped"]) for s in last_stats.values())
        errors = sum(int(s["internal_errors"]) for s in last_stats.values())
        lines.append(f"  dropped events: {dropped}, internal errors: {errors}")
    if skipped:
        lines.append(f"  {len(skipped)} unreadable lines skipped (first: {skipped[0]})")
    return "\n".join(lines)


class Agent:
    """Handle on the attached agent (one per process)."""

    def __init__(self, events_path: pathlib.Path):
        self.events_path = events_path
        self._step_hook = None
        self._external = False

    def flush(self) -> int:
        return _library().castscope_agent_flush()

    def status(self) -> dict:
        return _read_json(_library().castscope_agent_status)

    def events(self) -> list[dict]:
        """Flushes, then returns every event dumped so far."""
        self.flush()
        return read_events(self.events_path)

    def casts(self) -> list[dict]:
        return [e["cast"] for e in self.events() if "cast" in e]

    def ops(self) -> list[dict]:
        return [e["op"] for e in self.events() if "op" in e]

    def cache_samples(self) -> list[dict]:
        return [e["cache_sample"] for e in self.events() if "cache_sample" in e]

    def mark_iteration(self) -> None:
        """Marks an iteration boundary by hand (optimizer steps do it already)."""
        _library().castscope_agent_mark_iteration()

    def summary(self) -> str:
        return summarize(self.events())


_current: Agent | None = None


def _register_step_hook():
    """Every optimizer step marks an iteration: the agent samples the cast cache then."""
    from torch.optim.optimizer import register_optimizer_step_post_hook

    lib = _library()
    return register_optimizer_step_post_hook(lambda *_: lib.castscope_agent_mark_iteration())


def attach(
    policy_files: Sequence[str] | None = None,
    overlays: Sequence[str] = (),
    events_path: str | os.PathLike | None = None,
    record_events: bool = True,
    ring_records: int | None = None,
    max_threads: int | None = None,
    locations: bool = True,
    collector: str | None = None,
    spool_dir: str | os.PathLike | None = None,
    run_id: str | None = None,
    probe: bool | dict = True,
) -> Agent:
    """Takes over autocast from the policy files (default: policies/ for all
    devices) plus user overlays. Raises AttachError, with file, line and
    entry, when a policy is refused; native autocast then keeps working.
    `locations=False` records no source locations (cheaper). With
    `collector="host:port"` batches stream to that collector (through a
    forwarder process; the token, if any, in CASTSCOPE_TOKEN); with
    `spool_dir` they are kept there (for `castscope load`) until delivered.
    `probe=False` opens no op probe windows (docs/diagnostics.md: the
    findings that need ops beyond the autocast kernels); a dict sets their
    schedule, e.g. {"iterations": 2, "every_iterations": 100, "max_ms": 5000,
    "every_ms": 60000}.
    When castscope was attached from outside (castscope run), returns a
    handle on that."""
    global _current
    if _current is not None:
        raise AttachError("castscope: already attached; call castscope.detach() first")
    status = _read_json(_library().castscope_agent_status)
    if status["attached"]:
        # Attached from outside (castscope run): use that agent as it is.
        _current = Agent(pathlib.Path(status["events_path"]))
        _current._external = True
        _current._step_hook = None if _attached_from_environment else _register_step_hook()
        return _current
    if events_path is None:
        fd, events_path = tempfile.mkstemp(prefix="castscope-", suffix=".jsonl")
        os.close(fd)
    events_path = pathlib.Path(events_path)
    config = _config(policy_files, overlays, events_path, record_events, ring_records=ring_records, max_threads=max_threads,
                     collector=collector, spool_dir=None if spool_dir is None else str(spool_dir), run_id=run_id,
                     **_probe_config(probe))
    _start(config, locations)
    _current = Agent(events_path)
    _current._step_hook = _register_step_hook()
    return _current


def _probe_config(probe: bool | dict) -> dict:
    if isinstance(probe, dict):
        return {"probe": True, **{f"probe_{key}": value for key, value in probe.items()}}
    return {"probe": bool(probe)}


def _start(config: dict, locations: bool) -> None:
    """Starts the agent with `config`; raises AttachError with its message."""
    lib = _library()
    lib.castscope_agent_set_location_reader(
        ctypes.cast(_reader.castscope_python_location, ctypes.c_void_p) if (locations and _reader is not None) else None)
    err = ctypes.create_string_buffer(1 << 16)
    if lib.castscope_agent_start(json.dumps(config).encode(), err, len(err)) != 0:
        raise AttachError(err.value.decode())
    _bracket_tracing(lib)


def _bracket_tracing(lib) -> None:
    """Tells the agent when torch.jit.trace records (once per process): code
    inside autocast(enabled=False) is then observed too (trace_observer.cc)."""
    import functools

    import torch.jit

    if getattr(torch.jit.trace, "_castscope_bracketed", False):
        return
    lib.castscope_agent_trace_recording.argtypes = [ctypes.c_int]
    lib.castscope_agent_trace_recording.restype = None

    def bracketed(trace):
        @functools.wraps(trace)
        def recording(*args, **kwargs):
            lib.castscope_agent_trace_recording(1)
            try:
                return trace(*args, **kwargs)
            finally:
                lib.castscope_agent_trace_recording(0)
        recording._castscope_bracketed = True
        return recording

    torch.jit.trace = bracketed(torch.jit.trace)
    torch.jit.trace_module = bracketed(torch.jit.trace_module)


_attached_from_environment = False
_environment_step_hook = None


def _attach_from_environment() -> None:
    """Attaches with CASTSCOPE_CONFIG (set by `castscope run`); raises AttachError."""
    global _attached_from_environment, _environment_step_hook
    import atexit

    import torch

    lib = _library()
    built_for = lib.castscope_agent_torch_version().decode()
    if built_for.split("+")[0] != torch.__version__.split("+")[0]:
        raise AttachError(f"the agent was built against torch {built_for} but this process imports torch "
                          f"{torch.__version__}; rebuild castscope against this torch")
    config = json.loads(os.environ["CASTSCOPE_CONFIG"])
    config.setdefault("internal_path_prefix", _torch_dir())
    config.setdefault("torch_version", torch.__version__)
    _start(config, locations=True)
    _attached_from_environment = True
    _environment_step_hook = _register_step_hook()
    atexit.register(lib.castscope_agent_finish)  # write what is buffered at exit


def detach() -> None:
    """Restores native autocast and writes the remaining events."""
    global _current
    if _current is None:
        return
    if _current._step_hook is not None:
        _current._step_hook.remove()
    if not _current._external:
        _library().castscope_agent_stop()  # an outside attachment lives as long as its process
    _current = None


@contextlib.contextmanager
def attached(*args, **kwargs) -> Iterator[Agent]:
    agent = attach(*args, **kwargs)
    try:
        yield agent
    finally:
        detach()


def policy_check(policy_files: Sequence[str] | None = None, overlays: Sequence[str] = ()) -> dict:
    """Checks policy files against this process's dispatcher without attaching."""
    config = json.dumps(_config(policy_files, overlays, None, False)).encode()
    return _read_json(lambda buf, size: _library().castscope_policy_check(config, buf, size))
