"""Running castscope's code right after a module's own (the overlays of a
module imported later, torchao's float8 functions): a meta path finder asks
the other finders for the module's spec, then puts a loader around the
module's own that runs `after(module)` once the module has run."""
from __future__ import annotations

import importlib.abc
import sys


def initializing(module) -> bool:
    """Whether `module` is still running its own code (a partial import)."""
    return bool(getattr(getattr(module, "__spec__", None), "_initializing", False))


def spec_after_exec(finder, fullname, path, target, after):
    """The spec the finders after `finder` give `fullname`, its loader wrapped
    to call `after(module)` once the module has run; None when none finds it."""
    for other in sys.meta_path:
        if other is finder or not hasattr(other, "find_spec"):
            continue
        spec = other.find_spec(fullname, path, target)
        if spec is not None:
            break
    else:
        return None
    if spec.loader is not None and hasattr(spec.loader, "exec_module"):
        spec.loader = _RunAfterExec(spec.loader, after)
    return spec


class _RunAfterExec(importlib.abc.Loader):
    """The module's own loader, then `after(module)`."""

    def __init__(self, loader, after):
        self._loader = loader
        self._after = after

    def create_module(self, spec):
        return self._loader.create_module(spec)

    def exec_module(self, module):
        self._loader.exec_module(module)
        self._after(module)

    def __getattr__(self, name):  # get_data, is_package, get_resource_reader...
        return getattr(self._loader, name)
