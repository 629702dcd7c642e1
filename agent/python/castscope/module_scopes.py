"""The precision map's modules (docs/events.md, "Modules and the precision
map"): which nn.Module call each cast happens in, and which parameter a
weight's cast converts.

Two global module hooks (torch.nn.modules.module's forward pre-hook and
forward hook, the latter always called, an exception in forward included),
installed while an agent runs, bracket every module call with
castscope_module_enter / _exit; the agent stamps the innermost module's id on
each cast record, and a weight's cast with its parameter's. Python runs twice
per module call, never per cast.

Names: the first call of a module with no module call around it (a root)
names the root "<ClassName>" ("<ClassName>#2" for a second root of that
class) and every module below it "<ClassName>.qualified.name"
(`named_modules()`, as `state_dict` keys spell them), and declares each one's
own parameters with their TensorImpl. torch.compile's OptimizedModule is
named as the module it wraps. A module first called inside another without
having been named (made after the root's walk, or not registered under it)
is named after the module around it and its class. A later, larger root
(the whole model called after one of its layers was called alone) names its
modules again. Parameters replaced after their root's first call (a
load_state_dict(assign=True), a sharding applied after a warm-up step) are
not declared again: their casts count under the module.

While torch.compile traces, the hooks do nothing. Its graphs' casts name at
most the module call the graph runs in, never the modules inside the graph.
A BaseException that is no Exception (KeyboardInterrupt) raised through
module calls skips their exit hooks: casts outside any module call count
under the innermost of them until a call around them returns."""
from __future__ import annotations

import contextlib
import ctypes
import threading
import warnings
import weakref

_lib = None  # the running agent's library; None: the hooks pass straight through
_enter = _exit = None  # its castscope_module_enter / _exit, looked up once
_is_compiling = None  # torch.compiler.is_compiling
_handles = []
# id(module) -> [weakref to it, scope id, its root's module count, qualified name, named from a walk of it as root].
# Keyed by id (a plain dict: the hooks run per module call); the weakref tells a reused id apart and its
# callback drops the entry when the module goes.
_known: dict = {}
_stack = threading.local()  # .modules: the thread's module calls, innermost last
_lock = threading.Lock()
_roots: dict = {}  # root name -> weakref to the root module it names


def install(lib) -> None:
    """An agent started: module calls are bracketed from now on."""
    global _lib, _enter, _exit, _is_compiling, _stack, _quiet
    import torch

    lib.castscope_module_declare.argtypes, lib.castscope_module_declare.restype = [ctypes.c_char_p], ctypes.c_uint
    lib.castscope_parameter_declare.argtypes = [ctypes.c_uint, ctypes.c_char_p, ctypes.c_void_p]
    lib.castscope_parameter_declare.restype = ctypes.c_uint
    lib.castscope_module_enter.argtypes, lib.castscope_module_enter.restype = [ctypes.c_uint], None
    lib.castscope_module_exit.argtypes, lib.castscope_module_exit.restype = [], None
    lib.castscope_module_reset.argtypes, lib.castscope_module_reset.restype = [], None
    _enter, _exit = lib.castscope_module_enter, lib.castscope_module_exit
    _is_compiling = torch.compiler.is_compiling
    _stack = threading.local()  # calls an earlier attach left open (an exception past the hooks) are forgotten
    lib.castscope_module_reset()
    _lib = lib
    if not _handles:
        module = torch.nn.modules.module
        _handles.append(module.register_module_forward_pre_hook(_entered))
        _handles.append(module.register_module_forward_hook(_left, always_call=True))
        # torch.compile(module) warns of any global hook: these are castscope's, and they fire for the
        # OptimizedModule wrapper too (named as the module it wraps). Under -W error the warning
        # would stop the user's step.
        warnings.filterwarnings("ignore", message=_COMPILE_WARNING, category=UserWarning)
        _quiet = warnings.filters[0]


_COMPILE_WARNING = r"Using `torch\.compile\(module\)` when there are global hooks"
_quiet = None  # the warnings filter install added


def uninstall() -> None:
    """The agent stopped: the hooks are removed (a detached job runs no Python per module call)."""
    global _lib, _quiet
    _lib = None
    while _handles:
        _handles.pop().remove()
    if _quiet is not None:
        with contextlib.suppress(ValueError):
            warnings.filters.remove(_quiet)
        warnings._filters_mutated()
        _quiet = None


def _entered(module, _args):
    lib = _lib
    if lib is None or _is_compiling():
        return None
    try:
        calls = _stack.modules
    except AttributeError:
        calls = _stack.modules = []
    try:
        entry = _known.get(id(module))
        if entry is None or entry[0]() is not module or (not calls and not entry[4]):
            entry = _name(lib, module, calls)
        calls.append(module)
        _enter(entry[1] if entry is not None else 0)
    except Exception:  # noqa: BLE001 - a naming problem must never break the user's forward
        pass
    return None


def _left(module, _args, _output):
    if _lib is None or _is_compiling():
        return None
    calls = getattr(_stack, "modules", None)
    if not calls:
        return None
    if calls[-1] is module:  # the common case
        calls.pop()
        _exit()
        return None
    # Calls inside this one that never came back (a BaseException past their hooks) close with it.
    for depth in range(len(calls) - 2, -1, -1):
        if calls[depth] is module:
            for _ in range(len(calls) - depth):
                calls.pop()
                _exit()
            break
    return None


def _root_name(root) -> str:
    """"<ClassName>", made unique among the roots named so far ("<Model>#2" for a second model)."""
    wrapped = _unwrapped(root)
    base = f"<{type(wrapped).__name__}>"
    name, n = base, 1
    while True:
        holder = _roots.get(name)
        if holder is None or holder() is None or holder() is wrapped:
            _roots[name] = weakref.ref(wrapped)
            return name
        n += 1
        name = f"{base}#{n}"


def _unwrapped(module):
    """torch.compile's OptimizedModule stands for the module it wraps."""
    inner = module.__dict__.get("_modules", {}).get("_orig_mod") if type(module).__name__ == "OptimizedModule" else None
    return inner if inner is not None else module


def _name(lib, module, calls: list):
    """The entry of a module called for the first time (or first as a root)."""
    with _lock:
        if not calls:  # a root: names every module below it "<Root>.qualified.name"
            root = _root_name(module)
            named = list(module.named_modules())
            wrapper = _unwrapped(module) is not module
            for name, below in named:
                if wrapper:  # OptimizedModule: "_orig_mod" is the root itself, its children the root's
                    name = "" if name == "_orig_mod" else name.removeprefix("_orig_mod.")
                entry = _known.get(id(below))
                if entry is not None and entry[0]() is below and entry[2] >= len(named) and below is not module:
                    continue  # named from a root at least as large
                _declare(lib, below, f"{root}.{name}" if name else root, len(named))
            entry = _known.get(id(module))
            if entry is not None:
                entry[4] = True
            return entry
        # Inside another module without a name yet: after the module around it.
        around = _known.get(id(calls[-1]))
        prefix = around[3] if around is not None and around[0]() is calls[-1] else ""
        return _declare(lib, module, (prefix + "." if prefix else "") + f"<{type(module).__name__}>", 1)


def _forget(key: int, ref) -> None:
    entry = _known.get(key)
    if entry is not None and entry[0] is ref:
        del _known[key]


def _declare(lib, module, name: str, root_size: int):
    scope = lib.castscope_module_declare(name.encode(errors="surrogateescape"))
    if not scope:
        return None
    key = id(module)
    entry = [weakref.ref(module, lambda ref, key=key: _forget(key, ref)), scope, root_size, name, False]
    _known[key] = entry
    for parameter_name, parameter in module.named_parameters(recurse=False):
        impl = _tensor_impl(parameter)
        if impl:
            lib.castscope_parameter_declare(scope, parameter_name.encode(errors="surrogateescape"), impl)
    return entry


def _tensor_impl(tensor) -> int:
    """The TensorImpl address the agent sees for this tensor (0: none): torch's
    `_cdata` is the TensorImpl pointer of the Python tensor's at::Tensor."""
    try:
        return int(tensor._cdata)
    except Exception:  # noqa: BLE001 - a subclass without it: no parameter scope
        return 0
