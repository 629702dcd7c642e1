"""attach(), attached(), detach() and the Agent handle; also the attachment
`castscope run` makes from CASTSCOPE_CONFIG. (Not named attach.py: the
package's `castscope.attach` is the function.)"""
from __future__ import annotations

import contextlib
import ctypes
import json
import logging
import os
import pathlib
import tempfile
from typing import Iterator, Sequence

from . import callable_overlays, compile_capture, float8_scopes, module_scopes, scaler_hook
from ._native import (AttachError, PolicyRefused, _library, _location_reader_pointer, _read_json, _torch_dir,
                      _set_thread_location_reader, _thread_location_reader_pointer,
                      agent_torch_version)
from .config import _config, _gpu_config, _numerics_config, _probe_config, environment_config
from .events import is_probe_record, read_events, summarize
from .module_paths import missing_module_errors

_log = logging.getLogger("castscope")


class Agent:
    """Handle on the attached agent (one per process)."""

    def __init__(self, events_path: pathlib.Path, start: int = 0):
        self.events_path = events_path
        self.start = start  # bytes the file held before this attach: another session's events
        self._step_hook = None
        self._external = False

    def flush(self) -> int:
        return _library().castscope_agent_flush()

    def status(self) -> dict:
        return _read_json(_library().castscope_agent_status)

    def events(self) -> list[dict]:
        """Flushes, then returns every event this attach dumped so far."""
        self.flush()
        return read_events(self.events_path, self.start)

    def casts(self) -> list[dict]:
        return [e["cast"] for e in self.events() if "cast" in e]

    def ops(self) -> list[dict]:
        """The op events of castscope's autocast kernels (op probe records left out)."""
        return [e["op"] for e in self.events() if "op" in e and not is_probe_record(e["op"])]

    def probe_ops(self) -> list[dict]:
        """The op probe's records (docs/diagnostics.md, "The op probe")."""
        return [e["op"] for e in self.events() if "op" in e and is_probe_record(e["op"])]

    def cache_samples(self) -> list[dict]:
        return [e["cache_sample"] for e in self.events() if "cache_sample" in e]

    def mark_iteration(self) -> None:
        """Marks an iteration boundary by hand (optimizer steps do it already)."""
        _library().castscope_agent_mark_iteration()

    def summary(self) -> str:
        return summarize(self.events())


_current: Agent | None = None
_attached_from_environment = False
_environment_step_hook = None


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
    give_up_after_s: int | None = None,
    gpu_timing: str | dict | None = None,
    aggregate: bool | dict = False,
    numerics: bool | dict = True,
    explicit_casts: bool = True,
    module_scopes: bool = True,
) -> Agent:
    """Takes over autocast from the policy files (default: policies/ for all
    devices) plus user overlays. Raises AttachError, with file, line and
    entry, when a policy is refused; native autocast then keeps working.
    `locations=False` records no source locations (cheaper). With
    `collector="host:port"` batches stream to that collector (through a
    forwarder process; the token, if any, in CASTSCOPE_TOKEN); with
    `spool_dir` they are kept there (for `castscope load`) until delivered;
    once this process has ended, its forwarder leaves them there when the
    collector stays unreachable for `give_up_after_s` (default 60).
    `probe=False` opens no op probe windows (docs/diagnostics.md: the
    findings that need ops beyond the autocast kernels); a dict sets their
    schedule, e.g. {"steps": 2, "every_steps": 100, "max_ms": 5000,
    "every_ms": 60000}. `gpu_timing` ("auto" by default: on when torch sees
    a CUDA device, "on", "off", or a dict, docs/gpu.md) times the kernels of
    each cast and op with CUPTI. `aggregate=True` keeps per-site counters
    instead of per-event records (docs/aggregate.md); a dict sets its key
    limit too, e.g. {"max_keys": 2048}. `numerics=False` opens no numerics
    windows (overflow, underflow and non-finite values at casts and autocast
    ops, docs/numerics.md); a dict sets their schedule as `probe` does, plus
    "skip_capture_steps". (The old names "iterations", "every_iterations"
    and "skip_capture_iterations" still work, with a warning.)
    `explicit_casts=False` records autocast's casts alone, not every other
    conversion of the job (docs/events.md, "Makers"). `module_scopes=False`
    brackets no nn.Module call: casts name no module, and the report's
    precision map is empty (docs/events.md, "Modules and the precision map").
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
    start = _size_if_any(events_path)
    if start:
        _log.warning("castscope: %s already holds %d bytes of events (an earlier session's); this session's are "
                     "appended after them, and Agent.events() reads this session's only", events_path, start)
    config = _config(policy_files, overlays, events_path, record_events, ring_records=ring_records, max_threads=max_threads,
                     collector=collector, spool_dir=None if spool_dir is None else str(spool_dir), run_id=run_id,
                     give_up_after_s=give_up_after_s, explicit_casts=explicit_casts, module_scopes=module_scopes,
                     **_aggregate_config(aggregate), **_probe_config(probe), **_numerics_config(numerics),
                     **_gpu_config(gpu_timing))
    _start(config, locations)
    _current = Agent(events_path, start)
    _current._step_hook = _register_step_hook()
    return _current


def _size_if_any(path: pathlib.Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _aggregate_config(aggregate: bool | dict) -> dict:
    if isinstance(aggregate, dict):
        unknown = set(aggregate) - {"max_keys"}
        if unknown:
            raise ValueError(f"castscope: unknown aggregate keys {sorted(unknown)}; known: ['max_keys']")
        return {"aggregate": True, "aggregate_max_keys": aggregate.get("max_keys")}
    return {"aggregate": True} if aggregate else {}


def _start(config: dict, locations: bool, check_modules: bool = True) -> None:
    """Starts the agent with `config`; raises AttachError with its message
    (and, with `check_modules`, when an overlay's module cannot be found)."""
    lib = _library()
    lib.castscope_agent_set_location_reader(_location_reader_pointer() if locations else None)
    _set_thread_location_reader(lib, _thread_location_reader_pointer() if locations else None)
    err = ctypes.create_string_buffer(1 << 16)
    status = lib.castscope_agent_start(json.dumps(config).encode(), err, len(err))
    if status != 0:
        raise (PolicyRefused if status == 2 else AttachError)(err.value.decode())  # 2: agent.h
    entries = _read_json(lib.castscope_agent_status).get("callable_overlays", [])
    # `castscope run` looked the modules up in the job's interpreter before it
    # started; in the job a module may become importable later (sys.path
    # changes), so there an unfound one just waits for its import.
    missing = missing_module_errors(entries) if check_modules else []
    if missing:
        lib.castscope_agent_stop()
        raise PolicyRefused("castscope: policy refused, castscope does not take over autocast (native autocast keeps "
                          "working):\n  " + "\n  ".join(missing))
    try:
        callable_overlays.install(entries, lib)
    except Exception as e:  # noqa: BLE001 - never leave a half-attached agent behind
        callable_overlays.uninstall()
        lib.castscope_agent_stop()
        raise AttachError(f"castscope: could not install the module and function overlays: {type(e).__name__}: {e}") \
            from e
    _bracket_tracing(lib)
    _bracket_profiler(lib)
    scaler_hook.install(lib)
    scaler_hook.bracket_cuda_graphs(lib)
    compile_capture.install(lib)
    float8_scopes.install(lib, conversions=config.get("explicit_casts", True))
    if config.get("module_scopes", True):
        module_scopes.install(lib)
    import torch

    if torch.autograd.profiler._is_profiler_enabled:
        # Attached inside a running torch.profiler: its CUPTI until it stops.
        lib.castscope_agent_gpu_profiler(1)


def _bracket_profiler(lib) -> None:
    """Tells the agent when torch.profiler starts and stops collecting GPU
    activity (once per process): CUPTI's buffer callbacks and activity kinds
    are process-wide, so castscope's GPU timing steps aside meanwhile and
    comes back after (docs/gpu.md)."""
    import torch.autograd.profiler as autograd_profiler
    from torch.profiler import ProfilerActivity

    if getattr(autograd_profiler._prepare_profiler, "_castscope_bracketed", False):
        return

    def wants_gpu(activities) -> bool:
        return ProfilerActivity.CUDA in (activities or ())

    def starting(config, activities, *args, **kwargs):
        if wants_gpu(activities):
            lib.castscope_agent_gpu_profiler(1)

    autograd_profiler._prepare_profiler = _bracketed(autograd_profiler._prepare_profiler, before=starting)
    autograd_profiler._enable_profiler = _bracketed(autograd_profiler._enable_profiler, before=starting)
    autograd_profiler._disable_profiler = _bracketed(autograd_profiler._disable_profiler,
                                                     after=lambda: lib.castscope_agent_gpu_profiler(0))


def _bracketed(function, before=None, after=None):
    """`function`, with before(its arguments) called first and after() once it
    returned or raised; marked, so that it is wrapped once per process."""
    import functools

    @functools.wraps(function)
    def call(*args, **kwargs):
        if before is not None:
            before(*args, **kwargs)
        try:
            return function(*args, **kwargs)
        finally:
            if after is not None:
                after()
    call._castscope_bracketed = True
    return call


def _bracket_tracing(lib) -> None:
    """Tells the agent when torch.jit.trace records (once per process): code
    inside autocast(enabled=False) is then observed too (trace_observer.cc)."""
    import torch.jit

    if getattr(torch.jit.trace, "_castscope_bracketed", False):
        return

    def recording(*args, **kwargs):
        lib.castscope_agent_trace_recording(1)

    def recorded():
        lib.castscope_agent_trace_recording(0)

    torch.jit.trace = _bracketed(torch.jit.trace, before=recording, after=recorded)
    torch.jit.trace_module = _bracketed(torch.jit.trace_module, before=recording, after=recorded)


def _attach_from_environment() -> None:
    """Attaches with CASTSCOPE_CONFIG (set by `castscope run`); raises AttachError."""
    global _attached_from_environment, _environment_step_hook
    import atexit

    import torch

    lib = _library()
    built_for = agent_torch_version()
    if built_for.split("+")[0] != torch.__version__.split("+")[0]:
        raise PolicyRefused(f"the agent was built against torch {built_for} but this process imports torch "
                          f"{torch.__version__}; rebuild castscope against this torch")
    config = environment_config()
    config.setdefault("internal_path_prefix", _torch_dir())
    config.setdefault("torch_version", torch.__version__)
    _start(config, locations=True, check_modules=False)
    _attached_from_environment = True
    _environment_step_hook = _register_step_hook()
    def finish():  # write what is buffered at exit, GradScaler updates still on their way too
        try:
            scaler_hook.drain(lib, wait=True)
        finally:
            lib.castscope_agent_finish()

    atexit.register(finish)


def detach() -> None:
    """Restores native autocast and writes the remaining events."""
    global _current
    if _current is None:
        return
    if _current._step_hook is not None:
        _current._step_hook.remove()
    if not _current._external:
        callable_overlays.uninstall()
        compile_capture.uninstall()
        float8_scopes.uninstall()
        module_scopes.uninstall()
        try:
            scaler_hook.stop(_library())  # GradScaler updates still on their way (CUDA) are written first
        finally:
            _library().castscope_agent_stop()  # an outside attachment lives as long as its process
    _current = None


@contextlib.contextmanager
def attached(*args, **kwargs) -> Iterator[Agent]:
    agent = attach(*args, **kwargs)
    try:
        yield agent
    finally:
        detach()
