"""Which conversions of an AOTAutograd graph are autocast's casts.

AOTAutograd traces autocast's casts into its graphs as explicit conversion
nodes (`aten._to_copy`, or `prims.convert_element_type` after inductor's
decompositions) and runs the compiled graphs with autocast off, so no
autocast kernel sees them at run time. The graphs also hold conversions that
are not autocast's: the user's own `.float()`, and autograd's backward of a
cast (grads converted back to float32). What tells them apart is the list of
decisions autocast made while the graph was traced (castscope's kernel keeps
them during AOT's stage 1): a conversion is autocast's when one decision was
made at the same user line, in the same phase, with the same dtypes and
shape. Each decision explains one conversion (a multiset shared by the
forward and backward graphs of one compile: the partitioner may move a
backward cast into the forward graph, or recompute a forward cast in the
backward one, which then finds its decision taken), and gives the cast its
op, argument and policy; the node gives its role, shape, bytes and dtypes."""
from __future__ import annotations

from ._fx_lines import user_frame
from .callable_overlays import _dtype_code

PHASE_FORWARD, PHASE_BACKWARD = 1, 2
ROLE_WEIGHT, ROLE_INPUT, ROLE_ACTIVATION = 1, 2, 3

_CONVERSION_OPS = ("aten._to_copy.", "prims.convert_element_type.", "aten.to.", "aten._autocast_to_")


def _static_sizes(shape) -> list[int]:
    """Sizes as ints; a symbolic size gives its hint without adding a guard, -1 when it has none."""
    from torch.fx.experimental.symbolic_shapes import optimization_hint

    return [int(s) if isinstance(s, int) else optimization_hint(s, fallback=-1) for s in shape]


def _role(source) -> int:
    """The eager rule (a leaf requiring grad is a weight, another leaf an
    input, anything computed an activation) on the graph: the compiled
    function's own inputs (`primals_N`, `argN_1`; a saved one keeps its
    name in the backward graph) are the leaves. The trace's fake tensors
    cannot tell: there every argument is a functional wrapper."""
    if source.op != "placeholder" or not source.name.startswith(("primals_", "arg")):
        return ROLE_ACTIVATION
    meta = source.meta.get("tensor_meta")
    return ROLE_WEIGHT if getattr(meta, "requires_grad", False) else ROLE_INPUT


def conversions(gm) -> list[dict]:
    """The graph's floating-point conversions: user frame, phase traced in, dtype codes, shape, bytes of the source."""
    import torch

    found = []
    for node in gm.graph.nodes:
        if node.op != "call_function" or not str(node.target).startswith(_CONVERSION_OPS):
            continue
        source = node.args[0] if node.args else None
        before = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
        after = node.meta.get("val")
        if not (isinstance(before, torch.Tensor) and isinstance(after, torch.Tensor)):
            continue
        if before.dtype == after.dtype or not (before.is_floating_point() and after.is_floating_point()):
            continue
        stack_trace = node.meta.get("stack_trace")
        # The agent's rule for the user's line (innermost frame outside torch and castscope).
        file, line, function = (user_frame(stack_trace) if stack_trace else None) or ("", 0, "")
        shape = _static_sizes(before.shape)
        numel = 1
        for size in shape:
            numel *= max(size, 0)
        # AOT marks the nodes it traced from the backward; the partitioner keeps the mark.
        phase = PHASE_BACKWARD if node.meta.get("autograd_backward", False) else PHASE_FORWARD
        found.append({"file": file, "line": line, "function": function, "phase": phase,
                      "src": _dtype_code(before.dtype), "dst": _dtype_code(after.dtype), "shape": shape,
                      "bytes": numel * before.element_size(), "role": _role(source)})
    return found


def _key(item: dict) -> tuple:
    return (item.get("file", ""), int(item.get("line", 0)), int(item.get("phase", 0)), int(item["src"]),
            int(item["dst"]), tuple(int(s) for s in item.get("shape", ())))


class DecisionPool:
    """The autocast decisions of one compile's stage 1, each to be taken once.
    A decision on symbolic sizes (dynamic shapes) carries no shape: it
    matches a conversion of any shape, after the exact ones."""

    def __init__(self, decisions: list[dict]):
        self._by_key: dict[tuple, list[dict]] = {}
        for decision in decisions:
            self._by_key.setdefault(_key(decision)[:-1], []).append(decision)

    def take(self, conversion: dict) -> dict | None:
        matching = self._by_key.get(_key(conversion)[:-1], [])
        shape = _key(conversion)[-1]
        for wanted in (shape, ()):
            for index, decision in enumerate(matching):
                if _key(decision)[-1] == wanted:
                    return matching.pop(index)
        return None


def autocast_casts(gm, pool: DecisionPool) -> list[dict]:
    """The casts of `gm` that autocast decided, in graph order, each taking its
    decision from `pool`; in the form castscope_compiled_graph takes (a cast
    without a user line has no "file")."""
    casts = []
    for conversion in conversions(gm):
        decision = pool.take(conversion)
        if decision is None:
            continue  # not autocast's: the user's own conversion, or a grad converted back
        cast = {name: decision[name] for name in ("op", "arg_index", "list_index", "policy", "device")}
        cast.update(src=conversion["src"], dst=conversion["dst"], shape=conversion["shape"], bytes=conversion["bytes"],
                    role=conversion["role"], phase=conversion["phase"])
        if conversion["file"]:
            cast.update(file=conversion["file"], line=conversion["line"], function=conversion["function"])
        casts.append(cast)
    return casts
