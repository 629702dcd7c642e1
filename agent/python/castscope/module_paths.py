"""The module of an overlay target like "torchvision.ops.RoIPool", and
whether it can be imported, found without importing anything.

Standard library only: each Python process of a `castscope run` job uses it
at start-up, before torch is imported (_job_preflight.py), to refuse a module
overlay before the job's own code runs.
"""
from __future__ import annotations

import importlib.machinery
import importlib.util
import sys


def module_exists(name: str) -> bool:
    """Whether `name` can be imported, without importing it or its parents
    (importlib.util.find_spec imports the parents of a dotted name)."""
    if name in sys.modules:
        return True
    parts = name.split(".")
    try:
        spec = importlib.util.find_spec(parts[0])  # a top-level name imports nothing
    except (ImportError, ValueError):
        return False
    for depth in range(1, len(parts)):
        if spec is None or spec.submodule_search_locations is None:
            return False
        qualified = ".".join(parts[: depth + 1])
        if qualified in sys.modules:
            spec = sys.modules[qualified].__spec__
            continue
        spec = importlib.machinery.PathFinder.find_spec(qualified, list(spec.submodule_search_locations))
    return spec is not None


def split_target(target: str) -> tuple[str, str]:
    """(module, attribute path) of an overlay target: "pkg.mod.Name" is
    attribute Name of module pkg.mod; "pkg.mod:Class.method" says where the
    module ends, for an attribute of an attribute (the entry-point syntax)."""
    if ":" in target:
        module, attributes = target.split(":", 1)
        return module, attributes
    module, _, attribute = target.rpartition(".")
    return module, attribute


def missing_module_errors(entries: list[dict]) -> list[str]:
    """For each overlay entry ({"target", "kind", "file", "line"}) whose
    module cannot be found: a message naming the file, line and entry."""
    errors = []
    for entry in entries:
        module, _ = split_target(entry["target"])
        if not module_exists(module):
            errors.append(f'{entry["file"]}:{entry["line"]}: entry "{entry["target"]}": no module "{module}" can be '
                          f'imported by {sys.executable} (looked up without importing anything); check the '
                          f'spelling or install the package')
    return errors
