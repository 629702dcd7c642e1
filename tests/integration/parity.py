"""Helpers to compare a computation under native autocast and under castscope."""
from __future__ import annotations

import collections.abc

import torch

_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}


def bits_equal(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-for-bit equality (NaN payloads and signed zeros included)."""
    if a.dtype != b.dtype or a.shape != b.shape or a.device != b.device:
        return False
    if a.is_complex():
        a, b = torch.view_as_real(a.resolve_conj().resolve_neg()), torch.view_as_real(b.resolve_conj().resolve_neg())
    a, b = a.resolve_neg(), b.resolve_neg()
    if a.dtype == torch.bool or not a.is_floating_point():
        return torch.equal(a, b)
    bits = _INT_OF_SIZE[a.element_size()]
    return torch.equal(a.contiguous().view(bits), b.contiguous().view(bits))


def describe(value) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor({value.dtype}, {tuple(value.shape)})"
    return repr(type(value))


def same_result(a, b, where: str = "output") -> str | None:
    """None when identical; otherwise a message saying where they differ."""
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{where}: {describe(a)} vs {describe(b)}"
        if a.dtype != b.dtype:
            return f"{where}: dtype {a.dtype} (native) vs {b.dtype} (castscope)"
        if not bits_equal(a, b):
            return f"{where}: values differ ({describe(a)})"
        return None
    if isinstance(a, (str, bytes)) or not isinstance(a, collections.abc.Iterable):
        return None if a == b or (a != a and b != b) else f"{where}: {a!r} vs {b!r}"
    a, b = list(a), list(b)
    if len(a) != len(b):
        return f"{where}: {len(a)} vs {len(b)} elements"
    for i, (x, y) in enumerate(zip(a, b)):
        message = same_result(x, y, f"{where}[{i}]")
        if message:
            return message
    return None


def run_captured(fn, seed: int = 0):
    """Runs fn with a fixed seed; returns ("ok", result) or ("error", type, message)."""
    torch.manual_seed(seed)
    try:
        return ("ok", fn())
    except Exception as e:  # noqa: BLE001 - the exception is the result under test
        return ("error", type(e).__name__, str(e).split("\n")[0])


def compare_outcomes(native, agent) -> str | None:
    if native[0] != agent[0]:
        return f"native {native[0]} vs castscope {agent[0]}: {native[1:]} / {agent[1:]}"
    if native[0] == "error":
        return None if native[1:] == agent[1:] else f"errors differ: {native[1:]} vs {agent[1:]}"
    return same_result(native[1], agent[1])


def steady_state(windows: bool) -> dict:
    """castscope.attached's options for a parity run: as attached by default
    (the first ops inside op probe and numerics windows, where the unboxed
    kernel records every cast as it is made, through cached_cast), or with no
    window at all, so every op runs the kernels' steady state
    (casts recorded after the op, some made directly: make_cast in
    agent/src/dispatch/kernel_core.h)."""
    return {} if windows else {"probe": False, "numerics": False}
