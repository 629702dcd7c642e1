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
_handles = []
_ids: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # module -> (scope id, root's module count)
_roots_walked: "weakref.WeakSet" = weakref.WeakSet()
_stack = threading.local()  # .modules: the thread's module calls, innermost last
_lock = threading.Lock()


def install(lib) -> None:
    """An agent started: module calls are bracketed from now on."""
    global _lib
    import torch

    lib.castscope_module_declare.argtypes, lib.castscope_module_declare.restype = [ctypes.c_char_p], ctypes.c_uint
    lib.castscope_parameter_declare.argtypes = [ctypes.c_uint, ctypes.c_char_p, ctypes.c_void_p]
    lib.castscope_parameter_declare.restype = ctypes.c_uint
    lib.castscope_module_enter.argtypes, lib.castscope_module_enter.restype = [ctypes.c_uint], None
    lib.castscope_module_exit.argtypes, lib.castscope_module_exit.restype = [], None
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


def _modules_of_thread() -> list:
    modules = getattr(_stack, "modules", None)
    if modules is None:
        modules = _stack.modules = []
    return modules


def _compiling() -> bool:
    global _is_compiling
    if _is_compiling is None:
        import torch
        _is_compiling = torch.compiler.is_compiling
    return _is_compiling()


_is_compiling = None


def _entered(module, _args):
    lib = _lib
    if lib is None or _compiling():
        return None
    try:
        calls = _modules_of_thread()
        if not calls and module not in _roots_walked:
            _name_from_root(lib, module)
        known = _ids.get(module)
        if known is None:
            around = calls[-1] if calls else None
            prefix = _names.get(around, "") if around is not None else ""
            _declare(lib, module, (prefix + "." if prefix else "") + f"<{type(module).__name__}>", 1)
            known = _ids.get(module)
        scope = known[0] if known is not None else 0
        calls.append(module)
        lib.castscope_module_enter(scope)
    except Exception:  # noqa: BLE001 - a naming problem must never break the user's forward
        pass
    return None


def _left(module, _args, _output):
    if _compiling():
        return None
    calls = _modules_of_thread()
    if calls and calls[-1] is module:
        calls.pop()
        lib = _lib
        if lib is not None:
            lib.castscope_module_exit()
    return None


_names: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # module -> its qualified name


def _name_from_root(lib, root) -> None:
    """Names every module below `root` (a module called with no module call around it)."""
    with _lock:
        _roots_walked.add(root)
        named = list(root.named_modules())
        size = len(named)
        for name, module in named:
            known = _ids.get(module)
            if known is not None and known[1] >= size:
                continue  # named from a root at least as large
            _declare(lib, module, name if name else f"<{type(root).__name__}>", size)


def _declare(lib, module, name: str, root_size: int) -> None:
    scope = lib.castscope_module_declare(name.encode(errors="surrogateescape"))
    if not scope:
        return
    _ids[module] = (scope, root_size)
    _names[module] = name
    for parameter_name, parameter in module.named_parameters(recurse=False):
        impl = _tensor_impl(parameter)
        if impl:
            lib.castscope_parameter_declare(scope, parameter_name.encode(errors="surrogateescape"), impl)


def _tensor_impl(tensor) -> int:
    """The TensorImpl address the agent sees for this tensor (0: none): torch's
    `_cdata` is the TensorImpl pointer of the Python tensor's at::Tensor."""
    try:
        return int(tensor._cdata)
    except Exception:  # noqa: BLE001 - a subclass without it: no parameter scope
        return 0
