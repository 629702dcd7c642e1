"""GradScaler updates into the agent (docs/numerics.md): after each
`GradScaler.update()`, the scale it set and whether the step before it was
skipped (inf or NaN gradients), through castscope_agent_scaler_update.

Wrapped once per process, on the class, so every scaler (torch.amp and
torch.cuda.amp) reports. No synchronisation is added: on the CPU the values
are read at once; on CUDA they are copied to the host without blocking and
read at a later update once the copy has finished (GradScaler.step() itself
waits for its found-inf values each step, so that is one update later)."""
from __future__ import annotations

import functools

_pending: list = []  # CUDA: (host tensor [scale, found_inf], event, updates), oldest first
_lib = None  # the running agent's library; None while none runs: updates are counted, not reported


def install(lib) -> None:
    """An agent started: its updates go to `lib` from now on (the class is wrapped once per process)."""
    global _lib
    from torch.amp import GradScaler

    _pending.clear()  # an earlier agent's were reported when it stopped
    _lib = lib
    if getattr(GradScaler.update, "_castscope_bracketed", False):
        return
    original = GradScaler.update

    @functools.wraps(original)
    def update(self, new_scale=None):
        reporting = new_scale is None and getattr(self, "_enabled", False) and getattr(self, "_scale", None) is not None
        if reporting:
            # Every update counts, attached or not: `updates` is this scaler's whole count.
            self._castscope_updates = getattr(self, "_castscope_updates", 0) + 1
        lib_now = _lib
        found = []
        if reporting and lib_now is not None:
            try:
                found = [found_inf for state in self._per_optimizer_states.values()
                         for found_inf in state["found_inf_per_device"].values()]
            except Exception:  # noqa: BLE001 - a GradScaler that changed shape: report nothing
                found = []
        result = original(self, new_scale)
        if found:
            try:
                _report(lib_now, self, found)
            except Exception:  # noqa: BLE001 - logging never breaks training
                pass
        return result

    update._castscope_bracketed = True
    GradScaler.update = update


def stop(lib) -> None:
    """The agent is stopping: the CUDA updates still on their way are reported
    first (waiting for their copies), then none is until an agent starts again."""
    global _lib
    try:
        drain(lib, wait=True)
    finally:
        _lib = None
        _pending.clear()


def _report(lib, scaler, found) -> None:
    import torch

    updates = scaler._castscope_updates
    scale = scaler._scale
    if scale.device.type != "cuda":
        skipped = any(float(f.sum()) > 0 for f in found)
        lib.castscope_agent_scaler_update(float(scale.reshape(-1)[0]), int(skipped), updates)
        return
    values = torch.stack([scale.reshape(-1)[0].float(),
                          sum(f.to(scale.device).float().sum() for f in found)])
    host = values.to("cpu", non_blocking=True)
    event = torch.cuda.Event()
    event.record(torch.cuda.current_stream(scale.device))  # the stream the copy was queued on
    _pending.append((host, event, updates))
    drain(lib)


def bracket_cuda_graphs(lib) -> None:
    """Tells the agent when a torch.cuda.graph capture runs (once per
    process): numerics windows then leave CUDA tensors alone."""
    import torch

    graph = getattr(getattr(torch, "cuda", None), "graph", None)
    if graph is None or getattr(graph.__enter__, "_castscope_bracketed", False):
        return
    enter, exit_ = graph.__enter__, graph.__exit__

    @functools.wraps(enter)
    def entering(self, *args, **kwargs):
        lib.castscope_agent_cuda_graph_capture(1)
        try:
            return enter(self, *args, **kwargs)
        except BaseException:
            lib.castscope_agent_cuda_graph_capture(0)
            raise

    @functools.wraps(exit_)
    def exiting(self, *args, **kwargs):
        try:
            return exit_(self, *args, **kwargs)
        finally:
            lib.castscope_agent_cuda_graph_capture(0)

    entering._castscope_bracketed = True
    graph.__enter__, graph.__exit__ = entering, exiting


def drain(lib, wait: bool = False) -> None:
    """Reports the CUDA updates whose copies have finished (all, with `wait`)."""
    while _pending:
        host, event, updates = _pending[0]
        if not wait and not event.query():
            return
        event.synchronize()
        _pending.pop(0)
        lib.castscope_agent_scaler_update(float(host[0]), int(float(host[1]) > 0), updates)
