"""The ground truth for "every conversion": a TorchDispatchMode, below autocast
and autograd, counting each dtype-changing aten::_to_copy and aten::copy_ it
sees (what castscope's explicit-cast kernels must all record)."""
import collections

import torch
from torch.utils._python_dispatch import TorchDispatchMode


class ConversionCounter(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.pairs = collections.Counter()  # (src dtype, dst dtype) -> conversions

    @property
    def total(self):
        return sum(self.pairs.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func is torch.ops.aten._to_copy.default and out.dtype != args[0].dtype:
            self.pairs[(args[0].dtype, out.dtype)] += 1
        elif func is torch.ops.aten.copy_.default and args[0].dtype != args[1].dtype:
            self.pairs[(args[1].dtype, args[0].dtype)] += 1
        return out
