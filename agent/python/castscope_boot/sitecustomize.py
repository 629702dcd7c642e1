"""Attaches castscope to a Python process started by `castscope run`.

`castscope run` puts this directory first on PYTHONPATH, so Python imports
this module at startup (site.py). It does nothing unless CASTSCOPE_CONFIG is
set; then it imports the castscope package that sits beside this folder (the
one whose agent `castscope run` loads), waits for `import torch` to finish
and attaches castscope with that configuration. Finally it runs the
sitecustomize module it shadows, if there is one further down the path, so
the job sees no difference.

The package is imported from its file, not by putting its parent folder on
the path: installed from the wheel that folder is a whole site-packages,
which on PYTHONPATH would come before the job's standard library and
packages.
"""
import importlib.machinery
import importlib.util
import os
import sys


def _import_castscope_beside_this_folder():
    package = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "castscope")
    spec = importlib.util.spec_from_file_location("castscope", os.path.join(package, "__init__.py"),
                                                  submodule_search_locations=[package])
    module = importlib.util.module_from_spec(spec)
    sys.modules["castscope"] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules["castscope"]
        raise


def _watch_for_torch():
    if "CASTSCOPE_CONFIG" not in os.environ:
        return
    _import_castscope_beside_this_folder()
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
