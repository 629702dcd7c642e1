"""Attaches castscope to a Python process started by `castscope run`.

`castscope run` puts this directory first on PYTHONPATH, so Python imports
this module at startup (site.py). It does nothing unless CASTSCOPE_CONFIG is
set; then it waits for `import torch` to finish and attaches castscope with
that configuration. Finally it runs the sitecustomize module it shadows, if
there is one further down the path, so the job sees no difference.
"""
import importlib.machinery
import importlib.util
import os
import sys


def _watch_for_torch():
    if "CASTSCOPE_CONFIG" not in os.environ:
        return
    import castscope._autoattach

    castscope._autoattach.install()


def _run_shadowed_sitecustomize():
    # Every castscope_boot folder is skipped, not only this one: with two on
    # the path (two castscope trees) each would run the other's, forever.
    others = [p for p in sys.path if os.path.basename(os.path.abspath(p or os.curdir)) != "castscope_boot"]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", others)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


try:
    _watch_for_torch()
except Exception as e:  # never break the job's start-up
    print(f"[castscope] not attached: {e}", file=sys.stderr)
_run_shadowed_sitecustomize()
