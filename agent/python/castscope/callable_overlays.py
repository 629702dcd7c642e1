"""Module and function overlays (docs/overlays.md): the "modules" and
"functions" entries of policy files, applied by wrapping Python callables.

    "modules":   {"torchvision.ops.RoIPool": "fp32"}
    "functions": {"mylib.backend.fru": "lower_precision_fp"}

Under autocast, each call of a wrapped module class's forward or of a
wrapped function casts its floating tensor arguments to the policy's dtype
(fp32: float32; lower_precision_fp: the region's lower-precision dtype, or
the entry's "dtype"; promote: the widest of them) and runs with autocast off
for that device, as torch.amp.custom_fwd(cast_inputs=...) and apex's
float_function / half_function / promote_function do. With "output":
"input_dtype" its floating outputs are cast back to the dtype of its first
floating input. Outside autocast a wrapper calls straight through.

Entries whose module is already imported are wrapped at attach; the others
when their module is imported (an import hook). An attribute that is missing
then is an overlay error: logged, counted, sent with the agent's stats (the
report lists them), and that entry is skipped. Every decision is a castscope
cast event (op "module::<path>" or "function::<path>") at the caller's line.
"""
from __future__ import annotations

import ctypes
import functools
import importlib.abc
import inspect
import sys
import threading

from .import_hooks import initializing, spec_after_exec
from .module_paths import split_target

# Values of proto/castscope/v1/events.proto.
_POLICY = {"lower_precision_fp": 1, "fp32": 2, "promote": 5}
_DEVICE = {"cpu": 1, "cuda": 2, "xpu": 3, "mps": 4}
_CAST, _ALREADY_TARGET, _FLOAT64, _NOT_FLOATING, _OTHER_DEVICE = 1, 2, 3, 4, 5
_WEIGHT, _INPUT, _ACTIVATION = 1, 2, 3
_MARK = "_castscope_overlay"  # set on every wrapper: never wrap twice


@functools.lru_cache(maxsize=None)
def _dtype_code(dtype) -> int:
    import torch

    codes = {torch.float32: 1, torch.float16: 2, torch.bfloat16: 3, torch.float64: 4, torch.int64: 5, torch.int32: 6,
             torch.int16: 7, torch.int8: 8, torch.uint8: 9, torch.bool: 10, torch.complex64: 11, torch.complex128: 12}
    if dtype in codes:
        return codes[dtype]
    return 13 if "float8" in str(dtype) else 14


def _role(tensor) -> int:
    if not tensor.is_leaf:
        return _ACTIVATION
    return _WEIGHT if tensor.requires_grad else _INPUT


class _Overlay:
    """One entry, bound to the callable it wraps."""

    def __init__(self, entry: dict, lib, parameters: list[str], skips_self: bool):
        import torch

        self.entry = entry
        self.lib = lib
        self.policy = entry["policy"]
        self.dtype = getattr(torch, entry["dtype"]) if entry.get("dtype") else None
        self.device = entry.get("device") or None
        self.output_to_input_dtype = entry.get("output") == "input_dtype"
        self.skips_self = skips_self
        self.parameters = parameters
        self.output_index = len(parameters)
        names = "\n".join(parameters + ["output"])
        self.op_id = lib.castscope_overlay_op(f'{entry["kind"]}::{entry["target"]}'.encode(), names.encode())
        self.active = True  # cleared at detach: a wrapper someone kept then calls straight through

    # Index of an argument in the op's argument names.
    def positional_index(self, position: int) -> int:
        return min(position, max(len(self.parameters) - 1, 0))

    def keyword_index(self, name: str) -> int:
        if name in self.parameters:
            return self.parameters.index(name)
        return max(len(self.parameters) - 1, 0)

    def convert(self, tensor, target):
        """tensor.to(target), recorded by record() already: not again as an explicit cast."""
        self.lib.castscope_own_conversion(1)
        try:
            return tensor.to(target)
        finally:
            self.lib.castscope_own_conversion(0)

    def record(self, tensor, target, outcome: int, arg_index: int, list_index: int, device_type: str) -> None:
        try:
            shape = tuple(int(s) for s in tensor.shape)
            sizes = (ctypes.c_longlong * len(shape))(*shape)
            self.lib.castscope_overlay_cast(self.op_id, _POLICY[self.policy], _DEVICE.get(device_type, 1),
                                            _dtype_code(tensor.dtype), _dtype_code(target), outcome, _role(tensor),
                                            arg_index, list_index, sizes, len(shape),
                                            tensor.numel() * tensor.element_size())
        except Exception:  # noqa: BLE001 - a logging failure must never reach the job
            self.count_internal_error()

    def count_internal_error(self) -> None:
        # An invalid call: the agent counts it as an internal error (agent.h).
        self.lib.castscope_overlay_cast(0, 0, 0, 0, 0, 0, 0, 0, 0, None, 0, 0)


def _tensors(args, kwargs, overlay: _Overlay):
    """(tensor, arg_index, list_index, where) for every tensor argument, one
    level into lists and tuples; `where` puts the cast one back."""
    import torch

    start = 1 if overlay.skips_self else 0
    places = [(value, overlay.positional_index(position), ("arg", start + position))
              for position, value in enumerate(args[start:])]
    places += [(value, overlay.keyword_index(name), ("kwarg", name)) for name, value in kwargs.items()]
    for value, index, (kind, key) in places:
        if isinstance(value, torch.Tensor):
            yield value, index, -1, (kind, key, None)
        elif type(value) in (list, tuple):  # not namedtuples (PackedSequence...): left as they are
            for item_index, item in enumerate(value):
                if isinstance(item, torch.Tensor):
                    yield item, index, item_index, (kind, key, item_index)


def _autocast_device(tensors, overlay: _Overlay) -> str | None:
    """The device type whose autocast governs this call: that of the first
    floating tensor argument, when autocast is on for it."""
    import torch

    for tensor, *_ in tensors:
        if tensor.is_floating_point():
            device_type = tensor.device.type
            if overlay.device is not None and overlay.device != device_type:
                return None
            if not torch.amp.is_autocast_available(device_type):  # meta, ...: no autocast to follow
                return None
            return device_type if torch.is_autocast_enabled(device_type) else None
    return None


def _eligible(tensor, device_type: str) -> bool:
    import torch

    return tensor.is_floating_point() and tensor.dtype != torch.float64 and tensor.device.type == device_type


def _target_dtype(overlay: _Overlay, tensors, device_type: str):
    import torch

    if overlay.policy == "fp32":
        return torch.float32
    if overlay.policy == "lower_precision_fp":
        return overlay.dtype or torch.get_autocast_dtype(device_type)
    widest = None  # promote
    for tensor, *_ in tensors:
        if _eligible(tensor, device_type):
            widest = tensor.dtype if widest is None else torch.promote_types(widest, tensor.dtype)
    return widest


def _outcome(tensor, target, device_type: str) -> int:
    import torch

    if tensor.dtype == torch.float64:
        return _FLOAT64
    if not tensor.is_floating_point():
        return _NOT_FLOATING
    if tensor.device.type != device_type:
        return _OTHER_DEVICE
    return _ALREADY_TARGET if tensor.dtype == target else _CAST


def _put(args: list, kwargs: dict, where, value) -> None:
    kind, key, item_index = where
    container = args if kind == "arg" else kwargs
    if item_index is None:
        container[key] = value
        return
    items = list(container[key])
    items[item_index] = value
    container[key] = tuple(items) if type(container[key]) is tuple else items


def _cast_outputs(result, to_dtype, from_dtype, overlay: _Overlay, device_type: str):
    import torch

    def back(value):
        if isinstance(value, torch.Tensor) and value.dtype == from_dtype and _eligible(value, device_type):
            overlay.record(value, to_dtype, _CAST, overlay.output_index, -1, device_type)
            return overlay.convert(value, to_dtype)
        return value

    if isinstance(result, torch.Tensor):
        return back(result)
    if isinstance(result, tuple) and not hasattr(result, "_fields"):
        return tuple(back(v) for v in result)
    if isinstance(result, list):
        return [back(v) for v in result]
    return result


def _plan(args, kwargs, overlay: _Overlay):
    """What a call does under the overlay: None to call straight through,
    else (device type, target dtype, cast args, cast kwargs, first input
    dtype). Records every decision."""
    tensors = list(_tensors(args, kwargs, overlay))
    device_type = _autocast_device(tensors, overlay)
    if device_type is None:
        return None
    target = _target_dtype(overlay, tensors, device_type)
    if target is None:
        return None
    new_args, new_kwargs = list(args), dict(kwargs)
    input_dtype = None
    for tensor, arg_index, list_index, where in tensors:
        outcome = _outcome(tensor, target, device_type)
        overlay.record(tensor, target, outcome, arg_index, list_index, device_type)
        if outcome in (_CAST, _ALREADY_TARGET) and input_dtype is None:
            input_dtype = tensor.dtype
        if outcome == _CAST:
            _put(new_args, new_kwargs, where, overlay.convert(tensor, target))
    return device_type, target, new_args, new_kwargs, input_dtype


def _wrap(original, overlay: _Overlay):
    import torch

    @functools.wraps(original)
    def castscope_overlay(*args, **kwargs):
        if not overlay.active:
            return original(*args, **kwargs)
        try:
            plan = _plan(args, kwargs, overlay)
        except Exception:  # noqa: BLE001 - castscope's own failure: the call runs as if unwrapped
            overlay.count_internal_error()
            plan = None
        if plan is None:
            return original(*args, **kwargs)
        device_type, target, new_args, new_kwargs, input_dtype = plan
        with torch.autocast(device_type, enabled=False):
            result = original(*new_args, **new_kwargs)
        if overlay.output_to_input_dtype and input_dtype is not None and input_dtype != target:
            try:
                result = _cast_outputs(result, input_dtype, target, overlay, device_type)
            except Exception:  # noqa: BLE001
                overlay.count_internal_error()
        return result

    setattr(castscope_overlay, _MARK, overlay.entry)
    return castscope_overlay


def _parameters(function, skips_self: bool) -> list[str]:
    try:
        names = list(inspect.signature(function).parameters)
    except (TypeError, ValueError):  # builtins without a signature
        return ["args"]
    return names[1:] if skips_self and names else names


class _Installer(importlib.abc.MetaPathFinder):
    """Wraps entries now or when their module is imported; undoes it all.
    Nothing here may break the job: a failure to wrap is an overlay error
    (the entry is skipped), never an exception in the user's import."""

    def __init__(self, lib):
        self.lib = lib
        self.pending: dict[str, list[tuple[dict, str]]] = {}  # module -> [(entry, attribute path)]
        # Entries whose module was still being imported at attach (castscope
        # run attaches right after `import torch`, maybe from inside it):
        # wrapped at a later import, once the module has finished.
        self.waiting: list[tuple[dict, str, str]] = []  # (entry, module, attribute path)
        self.undo: list[tuple[object, str, object, bool]] = []  # (owner, name, old value, was in owner's __dict__)
        self.overlays: list[_Overlay] = []
        self.lock = threading.RLock()

    def error(self, entry: dict, message: str) -> None:
        text = f'{entry["file"]}:{entry["line"]}: entry "{entry["target"]}": {message}; this entry is skipped'
        self.lib.castscope_overlay_error(text.encode("utf-8", "replace"))

    def add(self, entry: dict) -> None:
        module, attributes = split_target(entry["target"])
        with self.lock:
            loaded = sys.modules.get(module)
            if loaded is None:
                self.pending.setdefault(module, []).append((entry, attributes))
            elif initializing(loaded):
                self.waiting.append((entry, module, attributes))
                _look_back_after_import(loaded, self)
            else:
                self.apply(entry, loaded, attributes)

    def apply(self, entry: dict, module, attributes: str) -> None:
        try:
            self._apply(entry, module, attributes)
        except Exception as e:  # noqa: BLE001 - e.g. a lazy module whose __getattr__ raised
            self.error(entry, f"castscope could not wrap it ({type(e).__name__}: {e})")

    def _apply(self, entry: dict, module, attributes: str) -> None:
        import torch

        owner, value = None, module
        for name in attributes.split("."):
            owner, value = value, getattr(value, name, _MISSING)
            if value is _MISSING:
                self.error(entry, f"{module.__name__} has no attribute {attributes!r} (after importing {module.__name__})")
                return
        last = attributes.split(".")[-1]
        raw = None  # a staticmethod or classmethod as the class holds it
        if entry["kind"] == "module":
            if not (isinstance(value, type) and issubclass(value, torch.nn.Module)):
                self.error(entry, f"{entry['target']} is not an nn.Module class (a \"modules\" entry names one; put a "
                                  f"function under \"functions\")")
                return
            owner, last = value, "forward"
            value = value.forward
        elif isinstance(value, type):
            self.error(entry, f"{entry['target']} is a class, not a function (put an nn.Module class under "
                              f"\"modules\")")
            return
        elif not callable(value):
            self.error(entry, f"{entry['target']} is not callable")
            return
        else:
            raw = inspect.getattr_static(owner, last, None)
            if isinstance(raw, (staticmethod, classmethod)):
                value = raw.__func__
            else:
                raw = None
        if getattr(value, _MARK, None) is not None:
            first = getattr(value, _MARK)
            self.error(entry, f'the same callable is already wrapped by entry "{first["target"]}" '
                              f'({first["file"]}:{first["line"]})')
            return
        skips_self = entry["kind"] == "module"
        overlay = _Overlay(entry, self.lib, _parameters(value, skips_self), skips_self)
        if overlay.op_id == 0:
            self.error(entry, "castscope could not register it")
            return
        wrapper = _wrap(value, overlay)
        if raw is not None:
            wrapper = type(raw)(wrapper)  # staticmethod / classmethod again
        in_dict = last in getattr(owner, "__dict__", {})
        self.undo.append((owner, last, owner.__dict__[last] if in_dict else None, in_dict))
        self.overlays.append(overlay)
        setattr(owner, last, wrapper)

    def remove_all(self) -> None:
        if self in sys.meta_path:
            sys.meta_path.remove(self)
        for overlay in self.overlays:
            overlay.active = False  # wrappers someone kept a reference to call straight through
        for owner, name, old, in_dict in reversed(self.undo):
            try:
                if in_dict:
                    setattr(owner, name, old)
                else:
                    delattr(owner, name)  # the wrapper shadowed an inherited forward
            except (AttributeError, TypeError):
                pass
        self.undo.clear()
        self.pending.clear()
        self.waiting.clear()

    def retry_waiting(self) -> None:
        """Wraps the entries of modules that have finished importing since."""
        # One pass that splits the list: `w not in ready` compared every
        # waiting entry with every ready one, 20 000 entries took minutes.
        ready, still_waiting = [], []
        with self.lock:
            for w in self.waiting:
                (still_waiting if initializing(sys.modules.get(w[1])) else ready).append(w)
            self.waiting = still_waiting
        for entry, module, attributes in ready:
            if module in sys.modules:
                self.apply(entry, sys.modules[module], attributes)

    # importlib.abc.MetaPathFinder: hooks the import of a pending module.
    def find_spec(self, fullname, path, target=None):
        if self.waiting:
            self.retry_waiting()
        with self.lock:
            if fullname not in self.pending:
                return None
        return spec_after_exec(self, fullname, path, target, self.imported)

    def imported(self, module) -> None:
        with self.lock:
            entries = self.pending.pop(module.__name__, [])
        for entry, attributes in entries:
            self.apply(entry, module, attributes)


def _look_back_after_import(module, installer: _Installer) -> None:
    """A module still importing when castscope attached: its attributes are
    not there yet. The first attribute lookup on it after its import has
    finished (`from mylib.ops import fru`, `mylib.ops.fru(...)`) wraps the
    waiting entries, then the module gets its own class back. (Imports of
    other modules retry too: Installer.find_spec.)"""
    original = type(module)
    if getattr(original, "_castscope_waiting", False):
        return

    def __getattribute__(self, name):
        spec = original.__getattribute__(self, "__spec__")
        if not getattr(spec, "_initializing", False):
            object.__setattr__(self, "__class__", original)
            installer.retry_waiting()
        return original.__getattribute__(self, name)

    waiting_class = type(original.__name__, (original,), {"__getattribute__": __getattribute__,
                                                          "_castscope_waiting": True})
    try:
        module.__class__ = waiting_class
    except TypeError:  # a module type that refuses: the next import retries
        pass


_MISSING = object()
_installed: _Installer | None = None


def install(entries: list[dict], lib) -> None:
    """Wraps every entry (from the agent's status "callable_overlays")."""
    global _installed
    uninstall()
    if not entries:
        return
    installer = _Installer(lib)
    _installed = installer
    for entry in entries:
        try:
            installer.add(entry)
        except Exception as e:  # noqa: BLE001
            installer.error(entry, f"castscope could not wrap it ({type(e).__name__}: {e})")
    if installer.pending or installer.waiting:
        sys.meta_path.insert(0, installer)


def uninstall() -> None:
    """Restores every wrapped callable (detach)."""
    global _installed
    if _installed is not None:
        _installed.remove_all()
        _installed = None
