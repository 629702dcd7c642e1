"""torch.compile capture (docs/compile.md): tells the agent about compiled
graphs and their runs, which no autocast kernel sees.

AOTAutograd traces autocast's casts into explicit graph nodes and runs the
compiled graphs with autocast off. So castscope wraps the two stages of
`aot_module_simplified` (looked up as module globals at call time):
  stage 1 (the trace): the agent keeps the autocast decisions it makes;
  stage 2 (the compilers): each graph handed to a compiler has its autocast
    casts read (compiled_graph_casts.py) and registered, before the original
    compiler runs; its result goes back untouched;
  the compiled function: each call records a run of the forward (or
    inference) graph, and one hook on the output's CompiledFunctionBackward
    node records the backward graph's run, at the forward's calling line.
A Dynamo start callback opens a new compile epoch (the agent records
compile-time decisions once per compile).

AOTAutogradCache stays on (a warm cache halves a first step's compile): a
graph it serves skips both stages, so castscope keeps, beside each entry
AOTAutograd saves, what it read of that entry's graphs (graph_store.py): the
casts registered per graph and the COMPILING records the trace logged. A hit
registers and logs those again; an entry castscope has not read (a cache
warmed without castscope, or by another agent build) is looked up as a miss,
so AOTAutograd traces and compiles it as before.

The training job comes first: everything castscope does here is guarded, an
exception in it is counted as an internal error and the original behaviour
goes on unchanged."""
from __future__ import annotations

import functools
import json
import logging
import os
import sys
import threading

from ._native import _read_json, is_user_file
from .compiled_graph_casts import DecisionPool, autocast_casts
from .graph_store import GraphStore

_log = logging.getLogger("castscope.compile")
_BACKWARD_NODE = "CompiledFunctionBackward"


class _Capture:
    """What install() changed, to undo it."""

    def __init__(self, lib, aot, autograd_cache, callbacks):
        self.lib = lib
        self.aot = aot
        self.autograd_cache = autograd_cache  # AOTAutogradCache
        self.callbacks = callbacks
        self.stage1 = aot.aot_stage1_graph_capture
        self.stage2 = aot.aot_stage2_compile
        self.lookup = autograd_cache.__dict__["_lookup"]  # the staticmethods themselves, to put back
        self.try_load = autograd_cache.__dict__["try_load"]
        self.store = GraphStore(lib)
        # Per thread: the decisions and records of its last stage 1, until its
        # stage 2; what the store holds for the entry its last lookup found.
        self.local = threading.local()
        self.locations: dict[tuple, int] = {}  # (code, instruction offset) -> interned location id
        self.user_codes: dict = {}  # code -> is_calling_code(code)
        from torch._dynamo.utils import orig_code_map

        self.dynamo_codes = orig_code_map  # the code Dynamo made of the user's functions

    def calling_location(self) -> int:
        """The line that called the compiled code, as a location id (0: none).
        A walk of its own, on the agent's user-file rule: the agent's frame
        reader cannot serve, as it would stop at the code Dynamo made of the
        user's function (a user file, whose current line is its `def`), and
        only Dynamo's orig_code_map tells those code objects apart."""
        frame = sys._getframe(1)
        while frame is not None and not self.is_calling_code(frame.f_code):
            frame = frame.f_back
        if frame is None:
            return 0
        key = (frame.f_code, frame.f_lasti)
        location = self.locations.get(key)
        if location is None:
            code = frame.f_code
            location = self.lib.castscope_intern_location(1, code.co_filename.encode(), frame.f_lineno or 0,
                                                          getattr(code, "co_qualname", code.co_name).encode(), b"")
            self.locations[key] = location
        return location

    def is_calling_code(self, code) -> bool:
        """Whether the walk stops at `code`: a user file's, not Dynamo's.
        Cached per code object, as the frame reader does: the rule is a call
        into the agent, and this walk runs on every call of compiled code."""
        stops = self.user_codes.get(code)
        if stops is None:
            stops = is_user_file(code.co_filename) and code not in self.dynamo_codes
            if len(self.user_codes) >= 4096:
                self.user_codes.clear()
            self.user_codes[code] = stops
        return stops

    def count_internal_error(self, what: str = "compile capture failed") -> None:
        """Logged as a warning by the agent and counted in its stats."""
        try:
            self.lib.castscope_internal_error(f"compile capture: {what}".encode(errors="replace"))
        except Exception:  # noqa: BLE001 - nothing may reach the job
            pass

    def keep_epoch_callback(self) -> None:
        # torch._dynamo.reset() clears every start callback: back for the next compile.
        if self.new_epoch not in self.callbacks.start_callbacks:
            _guarded(self, self.callbacks.register_start_callback, self.new_epoch)
            self.new_epoch()  # this compile's start went by unseen: it is a new compile all the same

    def new_epoch(self, *_):
        try:
            self.lib.castscope_compile_epoch()
        except Exception:  # noqa: BLE001
            self.count_internal_error()


_current: _Capture | None = None


def install(lib) -> None:
    """Wraps AOTAutograd's stages at the first torch.compile call (now, when
    torch._dynamo is already imported): importing Dynamo costs about a second,
    which a job that never compiles must not pay, and at attach time (inside
    `import torch`) or inside Dynamo's own import chain AOTAutograd cannot be
    imported yet. Does nothing (one info line) when this torch lacks them."""
    global _uncaptured_compile
    if _current is not None or _uncaptured_compile is not None:
        return
    if "torch._dynamo" in sys.modules:
        _install_now(lib)
        return
    import torch

    original = torch.compile

    @functools.wraps(original)
    def compile(*args, **kwargs):  # noqa: A001 - stands in for torch.compile
        if _restore_torch_compile():
            _install_now(lib)
        return original(*args, **kwargs)

    _uncaptured_compile = original
    torch.compile = compile


_uncaptured_compile = None  # torch.compile before install() wrapped it, until its first call


def _restore_torch_compile() -> bool:
    """Puts torch.compile back; False when it was not wrapped."""
    global _uncaptured_compile
    original, _uncaptured_compile = _uncaptured_compile, None
    if original is None:
        return False
    import torch

    torch.compile = original
    return True


def _install_now(lib) -> None:
    global _current
    try:
        import torch._dynamo.callback as dynamo_callback
        import torch._functorch.aot_autograd as aot
        from torch._functorch._aot_autograd.autograd_cache import AOTAutogradCache

        handler = dynamo_callback.callback_handler
        for owner, name in ((aot, "aot_stage1_graph_capture"), (aot, "aot_stage2_compile"),
                            (AOTAutogradCache, "_lookup"), (AOTAutogradCache, "try_load"),
                            (handler, "register_start_callback"), (handler, "remove_start_callback"),
                            (lib, "castscope_compile_collect"), (lib, "castscope_compile_replay")):
            if not hasattr(owner, name):
                raise AttributeError(f"{getattr(owner, '__name__', type(owner).__name__)} has no {name}")
        capture = _Capture(lib, aot, AOTAutogradCache, handler)
    except Exception as e:  # noqa: BLE001 - an older torch (or agent): eager capture still works
        _log.info("torch.compile capture unavailable: %s", e)
        return
    aot.aot_stage1_graph_capture = _stage1(capture)
    aot.aot_stage2_compile = _stage2(capture)
    AOTAutogradCache._lookup = staticmethod(_lookup(capture))
    AOTAutogradCache.try_load = staticmethod(_try_load(capture))
    handler.register_start_callback(capture.new_epoch)
    _current = capture


def uninstall() -> None:
    global _current
    _restore_torch_compile()
    capture, _current = _current, None
    if capture is None:
        return
    capture.aot.aot_stage1_graph_capture = capture.stage1
    capture.aot.aot_stage2_compile = capture.stage2
    capture.autograd_cache._lookup = capture.lookup
    capture.autograd_cache.try_load = capture.try_load
    try:
        capture.callbacks.remove_start_callback(capture.new_epoch)
    except ValueError:
        pass  # already cleared by torch._dynamo.reset()


def _stage1(capture: _Capture):
    original = capture.stage1

    @functools.wraps(original)
    def aot_stage1_graph_capture(*args, **kwargs):
        depth = getattr(capture.local, "depth", 0)
        if depth == 0:
            capture.keep_epoch_callback()
            _guarded(capture, capture.lib.castscope_compile_collect, 1)
        capture.local.depth = depth + 1
        try:
            graph_capture = original(*args, **kwargs)
        finally:
            capture.local.depth = depth
            if depth == 0:
                _guarded(capture, capture.lib.castscope_compile_collect, 0)
            # Taken even when the trace failed, so they never reach the next graph.
            # A stage 1 nested in another (a region traced inside a trace) takes
            # every decision kept so far; the outer graph's casts then go unmatched.
            decisions = _guarded(capture, _read_json, capture.lib.castscope_compile_decisions, default=[])
            records = _guarded(capture, _read_json, capture.lib.castscope_compile_records, default=[])
        capture.local.pending = (graph_capture, decisions if isinstance(decisions, list) else [],
                                 records if isinstance(records, list) else [])
        return graph_capture
    return aot_stage1_graph_capture


def _lookup(capture: _Capture):
    """AOTAutogradCache's lookup of one key, for an entry castscope has read
    (its graphs stored): any other is a miss, so that AOTAutograd traces and
    compiles it where castscope sees the graphs."""
    original = capture.lookup.__func__

    @functools.wraps(original)
    def lookup(key, *args, **kwargs):
        stored = _guarded(capture, capture.store.read, key, default=None)
        if stored is None:
            return None
        result = original(key, *args, **kwargs)
        if result is not None:
            capture.local.hit = stored
        return result
    return lookup


def _try_load(capture: _Capture):
    """AOTAutogradCache's load: at a hit, the entry's graphs registered and
    the trace's records logged again from the store, and the compiled
    function recording its runs as a compiled one does."""
    original = capture.try_load.__func__

    @functools.wraps(original)
    def try_load(*args, **kwargs):
        capture.local.hit = None
        compiled_fn, aot_config = original(*args, **kwargs)
        stored, capture.local.hit = capture.local.hit, None
        if compiled_fn is not None and stored is not None:
            capture.keep_epoch_callback()
            graph = _guarded(capture, _CompiledGraph.served, capture, stored, default=None)
            if graph is not None:
                compiled_fn = graph.runner(compiled_fn)
        return compiled_fn, aot_config
    return try_load


def _stage2(capture: _Capture):
    original = capture.stage2

    @functools.wraps(original)
    def aot_stage2_compile(aot_state, aot_graph_capture, partition_fn, fw_compiler, bw_compiler=None,
                           inference_compiler=None, *args, **kwargs):
        pending = getattr(capture.local, "pending", None)
        capture.local.pending = None
        decisions, records = pending[1:] if pending and pending[0] is aot_graph_capture else ([], [])
        cache_info = getattr(getattr(aot_state, "aot_config", None), "cache_info", None)
        graph = _guarded(capture, _CompiledGraph, capture, decisions, default=None)
        if graph is not None and getattr(cache_info, "cache_key", None):
            graph.stored = {"key": cache_info.cache_key, "records": records, "graphs": {}}
        if graph is None:
            return original(aot_state, aot_graph_capture, partition_fn, fw_compiler, bw_compiler, inference_compiler,
                            *args, **kwargs)
        if bw_compiler is None:
            bw_compiler = fw_compiler
        if inference_compiler is None:
            inference_compiler = fw_compiler
        result = original(aot_state, aot_graph_capture, partition_fn, graph.compiler(fw_compiler, "forward"),
                          graph.compiler(bw_compiler, "backward"), graph.compiler(inference_compiler, "inference"),
                          *args, **kwargs)
        try:
            compiled_fn, *rest = result
            return (graph.runner(compiled_fn), *rest)
        except Exception:  # noqa: BLE001 - not the (compiled_fn, ...) this torch returns: leave it be
            capture.count_internal_error()
            return result
    return aot_stage2_compile


class _CompiledGraph:
    """The graphs of one stage 2: their ids in the agent, and the stage-1
    decisions not yet matched (the backward graph is compiled lazily, at
    the first backward)."""

    def __init__(self, capture: _Capture, decisions: list[dict]):
        self.capture = capture
        self.pool = DecisionPool(decisions)
        self.ids = {"forward": 0, "backward": 0, "inference": 0}
        self.stored = None  # what the store keeps for this graph's AOTAutogradCache entry (None: no entry)

    @classmethod
    def served(cls, capture: _Capture, stored: dict) -> _CompiledGraph:
        """The graphs of an entry AOTAutogradCache served: the trace's records
        logged again, each graph registered with the casts read at its compile."""
        graph = cls(capture, [])
        if capture.lib.castscope_compile_replay(json.dumps(stored["records"]).encode()) < 0:
            capture.count_internal_error("stored compile records rejected")
        for kind, casts in stored["graphs"].items():
            graph.add(kind, casts)
        return graph

    def register(self, gm, kind: str) -> None:
        casts = autocast_casts(gm, self.pool)
        self.add(kind, casts)
        if self.stored is not None:  # AOTAutograd saves its entry after the last graph's compile
            self.stored["graphs"][kind] = casts
            self.capture.store.write(self.stored["key"], self.stored)

    def add(self, kind: str, casts: list[dict]) -> None:
        self.ids[kind] = self.capture.lib.castscope_compiled_graph(json.dumps({"kind": kind, "casts": casts}).encode())

    def compiler(self, original, kind: str):
        """`original` with the graph registered first; its result is returned
        unchanged (inductor's OutputCode too). A SerializableAOTDispatchCompiler
        stays one, for AOT's isinstance checks."""
        def compile_registered(gm, example_inputs, *args, **kwargs):
            _guarded(self.capture, self.register, gm, kind)
            return original(gm, example_inputs, *args, **kwargs)

        try:
            from torch._functorch._aot_autograd.schemas import SerializableAOTDispatchCompiler

            if isinstance(original, SerializableAOTDispatchCompiler):
                return SerializableAOTDispatchCompiler(original.output_code_ty, compile_registered)
        except Exception:  # noqa: BLE001
            self.capture.count_internal_error()
        return functools.wraps(original)(compile_registered) if callable(original) else original

    def runner(self, compiled_fn):
        """`compiled_fn` recording each run of the forward (or inference) graph, and of its backward."""
        capture = self.capture

        @functools.wraps(compiled_fn)
        def run_recorded(*args, **kwargs):
            location = _guarded(capture, self.ran_forward, default=0)
            # The conversions the graph dispatches are its casts, recorded from the graph.
            capture.lib.castscope_compiled_graph_running(1)
            try:
                outputs = compiled_fn(*args, **kwargs)
            finally:
                capture.lib.castscope_compiled_graph_running(0)
            if location:
                _guarded(capture, self.hook_backward, outputs, location)
            return outputs
        return run_recorded

    def ran_forward(self) -> int:
        graph = self.ids["forward"] or self.ids["inference"]
        return self.capture.lib.castscope_compiled_graph_ran(graph, self.capture.calling_location()) if graph else 0

    def hook_backward(self, outputs, location: int) -> None:
        """Hooks before and after the outputs' CompiledFunctionBackward node
        (its graph's run, bracketed); they return None, so grads are untouched."""
        if not self.ids["forward"]:
            return
        for output in outputs if isinstance(outputs, (list, tuple)) else (outputs,):
            node = getattr(output, "grad_fn", None)
            if node is not None and type(node).__name__ == _BACKWARD_NODE:
                node.register_prehook(self.backward_starts)
                node.register_hook(functools.partial(self.ran_backward, location))
                return

    def backward_starts(self, *_grads):
        _guarded(self.capture, self.capture.lib.castscope_compiled_graph_running, 1)
        return None

    def ran_backward(self, forward_location: int, *_grads):
        """At the line that called backward() (the autograd engine runs a CPU
        backward on that thread); the forward's calling line when no Python
        frame is there (a worker thread)."""
        _guarded(self.capture, self.capture.lib.castscope_compiled_graph_running, 0)
        if self.ids["backward"]:
            location = _guarded(self.capture, self.capture.calling_location, default=0) or forward_location
            _guarded(self.capture, self.capture.lib.castscope_compiled_graph_ran, self.ids["backward"], location)
        return None


def _guarded(capture: _Capture, call, *args, default=None):
    """call(*args), or `default` with an internal error counted when castscope's own code fails."""
    try:
        return call(*args)
    except Exception as e:  # noqa: BLE001 - never into the job
        capture.count_internal_error(f"{getattr(call, '__name__', call)}: {e!r}")
        return default
