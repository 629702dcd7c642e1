"""The user's line behind code torch.compile runs or traces, for the agent's
frame reader (agent/pyframes/python_location_reader.cc calls these two
functions with the GIL held; docs/compile.md).

- `tracing_line()`: while torch.compile traces a graph, the frames on the
  stack are torch's (Dynamo, the FX interpreter, autograd); the line being
  traced is in the FX node's stack trace: `torch.fx.traceback.current_meta`
  (AOTAutograd sets it per node, and during the backward trace to the forward
  op's stack trace) or Dynamo's current node.
- `graph_code_line(frame)`: a frame of an FX GraphModule's generated code
  (`<eval_with_key>.N`, e.g. `backend="eager"`) maps to a node through the
  module's line map, and the node to the user's line through its stack trace.

Both return (file, line, function) or None; they never raise into the reader.
"""
from __future__ import annotations

import functools
import re
import sys

from ._native import is_user_file

_FRAME = re.compile(r'File "([^"]+)", line (\d+), in ([^\n]+)')


@functools.lru_cache(maxsize=4096)
def user_frame(stack_trace: str) -> tuple[str, int, str] | None:
    """The innermost frame of an FX stack trace (outermost first, as
    traceback prints it) in a user file (the agent's rule, is_user_file)."""
    found = None
    for match in _FRAME.finditer(stack_trace):
        if is_user_file(match.group(1)):
            found = (match.group(1), int(match.group(2)), match.group(3).strip())
    return found


def _node_line(node) -> tuple[str, int, str] | None:
    meta = getattr(node, "meta", None)
    stack_trace = meta.get("stack_trace") if isinstance(meta, dict) else None
    return user_frame(stack_trace) if isinstance(stack_trace, str) and stack_trace else None


def tracing_line() -> tuple[str, int, str] | None:
    try:
        traceback = sys.modules.get("torch.fx.traceback")
        meta = getattr(traceback, "current_meta", None)
        stack_trace = meta.get("stack_trace") if isinstance(meta, dict) else None
        if isinstance(stack_trace, str) and stack_trace:
            return user_frame(stack_trace)
        dynamo_utils = sys.modules.get("torch._dynamo.utils")
        current_node = getattr(dynamo_utils, "get_current_node", None)
        return _node_line(current_node()) if current_node is not None else None
    except Exception:  # noqa: BLE001 - the reader falls back to the calling line
        return None


def graph_code_line(frame) -> tuple[str, int, str] | None:
    try:
        module = frame.f_locals.get("self")
        line_map = getattr(module, "_lineno_map", None)
        if not line_map:
            return None
        index = line_map.get(frame.f_lineno - getattr(module, "_prologue_start", 0))
        if index is None:
            return None
        for position, node in enumerate(module.graph.nodes):
            if position == index:
                return _node_line(node)
        return None
    except Exception:  # noqa: BLE001 - the reader skips the frame instead
        return None
