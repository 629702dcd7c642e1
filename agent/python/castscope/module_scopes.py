"""The precision map's modules (docs/events.md, "Modules and the precision map"). which nn.Module
call each cast happens in, and which parameter a weight's cast converts.

Two global module hooks (torch.nn.modules.module's forward pre-hook and
forward hook, the latter always called, an exception in forward included),
installed while an agent runs, bracket every module call with castscope_module_enter / _exit; the agent
stamps the innermost module's id on each cast record, and a weight's cast
with its parameter's. Python runs twice per module call, never per cast.

Names: the first call of a module with no module call around it (a root)
names every module below it by its qualified name (`named_modules()`, as
`state_dict` keys spell them) and declares each one's own parameters with
their TensorImpl. The root itself is named "<ClassName>". A module first
called inside another without having been named (made after the root's walk,
or not registered under it) is named after the module around it and its
class. A later, larger root (the whole model called after one of its layers
was called alone) names its modules again.

While torch.compile traces, the hooks do nothing: compiled code carries no
module calls (its casts keep their lines, without a module)."""
from __future__ import annotations

import ctypes
import threading
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


def install(lib) -> None:
    """An agent started: module calls are bracketed from now on."""
    global _lib, _enter, _exit, _is_compiling
    import torch

    lib.castscope_module_declare.argtypes, lib.castscope_module_declare.restype = [ctypes.c_char_p], ctypes.c_uint
    lib.castscope_parameter_declare.argtypes = [ctypes.c_uint, ctypes.c_char_p, ctypes.c_void_p]
    lib.castscope_parameter_declare.restype = ctypes.c_uint
    lib.castscope_module_enter.argtypes, lib.castscope_module_enter.restype = [ctypes.c_uint], None
    lib.castscope_module_exit.argtypes, lib.castscope_module_exit.restype = [], None
    _enter, _exit = lib.castscope_module_enter, lib.castscope_module_exit
    _is_compiling = torch.compiler.is_compiling
    _lib = lib
    if not _handles:
        module = torch.nn.modules.module
        _handles.append(module.register_module_forward_pre_hook(_entered))
        _handles.append(module.register_module_forward_hook(_left, always_call=True))


def uninstall() -> None:
    """The agent stopped: the hooks are removed (a detached job runs no Python per module call)."""
    global _lib
    _lib = None
    while _handles:
        _handles.pop().remove()


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
    if calls and calls[-1] is module:
        calls.pop()
        _exit()
    return None


def _name(lib, module, calls: list):
    """The entry of a module called for the first time (or first as a root)."""
    with _lock:
        if not calls:  # a root: names every module below it
            named = list(module.named_modules())
            for name, below in named:
                entry = _known.get(id(below))
                if entry is not None and entry[0]() is below and entry[2] >= len(named) and below is not module:
                    continue  # named from a root at least as large
                _declare(lib, below, name if name else f"<{type(module).__name__}>", len(named))
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
