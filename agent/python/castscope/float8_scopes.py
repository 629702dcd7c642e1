"""torchao's float8 conversions into the agent (docs/events.md, "Float8
scaling"): torchao converts each Float8Linear's input, weight and
grad_output in `_ToFloat8ConstrFunc.forward(ctx, tensor, scale, float8_dtype,
linear_mm_config, gemm_input_role, axiswise_dim)`. The wrapper brackets that
call (castscope_float8_conversion_begin / _end) with the role torchao names
and, where the scale is a plain float32 tensor on the host, its address, so
the agent's record of the conversion inside carries the role, scale and amax
as powers of two. A scale on a GPU is not read: that would wait for the
device inside the step.

Under autocast a Float8TrainingTensor presents as its original dtype, and
autocast's cast of it reaches torchao's `autocast_to_copy`, which changes the
label and converts no data: the wrapper of that table entry tells the agent
(castscope_float8_relabelled), whose record of the cast says RELABELLED, not
a conversion.

Python runs once per float8 conversion, inside torchao's own Python code for
it, never per cast elsewhere. The class is wrapped once per process, when
torchao's module is imported (now, or later through an import hook). A
torchao module still running its own import when the agent attaches (an
attach from inside torchao's import) is not wrapped: its conversions keep
their maker and line, without role and scale."""
from __future__ import annotations

import functools
import importlib.abc
import sys

from .import_hooks import initializing, spec_after_exec

_CONSTR_MODULE = "torchao.float8.float8_training_tensor"
_OPS_MODULE = "torchao.float8.float8_ops"
# torchao's GemmInputRole values -> events.proto Role (ROLE_INPUT, ROLE_WEIGHT, ROLE_GRADIENT).
_ROLES = {"input": 2, "weight": 1, "grad_output": 4}
_ROLE_ARG = 4  # gemm_input_role's position after ctx
_lib = None  # the running agent's library; None: calls pass straight through
_brackets = False  # whether the conversions are bracketed (explicit_casts); relabels are told always
_finder = None


def install(lib, conversions: bool = True) -> None:
    """An agent started. `conversions`: it records explicit conversions, so
    torchao's are bracketed with their role and scale; autocast's relabels
    are told either way (they are autocast's casts)."""
    global _lib, _brackets, _finder
    _lib = lib
    _brackets = conversions
    waiting = False
    for name, wrap in _WRAPS.items():
        module = sys.modules.get(name)
        if module is not None and not initializing(module):
            wrap(module)
        else:
            waiting = True
    if waiting and _finder is None:
        _finder = _WrapAfterImport()
        sys.meta_path.insert(0, _finder)


def uninstall() -> None:
    """The agent stopped: the wrapper calls straight through (it stays in place)."""
    global _lib, _finder
    _lib = None
    if _finder is not None and _finder in sys.meta_path:
        sys.meta_path.remove(_finder)
    _finder = None


def _role(gemm_input_role) -> int:
    return _ROLES.get(getattr(gemm_input_role, "value", None), 0)


def _host_scale(scale):
    """The scale's address and size when the agent may read it: a plain
    contiguous float32 tensor on the CPU (not a fake, functional or DTensor)."""
    import torch  # imported already (torchao is); a dictionary lookup

    if type(scale) is torch.Tensor and scale.is_cpu and scale.dtype is torch.float32 and scale.is_contiguous():
        return scale.data_ptr(), scale.numel()
    return None, 0


def _wrap_conversion(module) -> None:
    constr = getattr(module, "_ToFloat8ConstrFunc", None)
    original = getattr(constr, "forward", None)
    if original is None or getattr(original, "_castscope_float8", False):
        return

    @functools.wraps(original)
    def forward(ctx, *args, **kwargs):
        lib = _lib
        if lib is None or not _brackets:
            return original(ctx, *args, **kwargs)
        try:
            role = kwargs["gemm_input_role"] if "gemm_input_role" in kwargs else \
                args[_ROLE_ARG] if len(args) > _ROLE_ARG else None
            scale = kwargs["scale"] if "scale" in kwargs else args[1] if len(args) > 1 else None
            address, numel = _host_scale(scale)
            # torchao's default role is INPUT.
            lib.castscope_float8_conversion_begin(_role(role) if role is not None else _ROLES["input"], address, numel)
        except Exception:  # noqa: BLE001 - logging never breaks training: convert unbracketed
            return original(ctx, *args, **kwargs)
        try:
            return original(ctx, *args, **kwargs)
        finally:
            lib.castscope_float8_conversion_end()

    forward._castscope_float8 = True
    constr.forward = staticmethod(forward)


def _wrap_relabel(module) -> None:
    import torch

    table = getattr(module, "FLOAT8_OPS_TABLE", None)
    op = torch.ops.aten._to_copy.default
    original = table.get(op) if isinstance(table, dict) else None
    if original is None or getattr(original, "_castscope_float8", False):
        return

    @functools.wraps(original)
    def autocast_to_copy(aten_op, args, kwargs=None):
        result = original(aten_op, args, kwargs)
        lib = _lib
        if lib is not None:
            lib.castscope_float8_relabelled()
        return result

    autocast_to_copy._castscope_float8 = True
    table[op] = autocast_to_copy


_WRAPS = {_CONSTR_MODULE: _wrap_conversion, _OPS_MODULE: _wrap_relabel}


class _WrapAfterImport(importlib.abc.MetaPathFinder):
    """Wraps torchao's functions once their modules have run."""

    def find_spec(self, fullname, path, target=None):
        if fullname not in _WRAPS:
            return None
        return spec_after_exec(self, fullname, path, target, _wrap_quietly)


def _wrap_quietly(module) -> None:
    try:
        _WRAPS[module.__name__](module)
    except Exception:  # noqa: BLE001 - torchao works unwrapped; its conversions keep maker and line
        pass
