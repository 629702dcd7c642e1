"""Comparison rows shared by the benchmarks: what users reach for today."""
import torch
from torch.utils._python_dispatch import TorchDispatchMode


class DtypeLogger(TorchDispatchMode):
    """A Python dispatch-mode logger of every op's input dtypes."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append((func, tuple(a.dtype for a in args if isinstance(a, torch.Tensor))))
        return func(*args, **(kwargs or {}))


def profiler_with_stacks():
    """torch.profiler as configured to see casts: shapes and Python stacks."""
    return torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU], record_shapes=True, with_stack=True)
