"""The castscope wheel's dependency on torch: the release the agent is built
against, taken from the torch installed beside the build (the one CMake
finds, cmake/CastscopeTorch.cmake). The agent binds to libtorch's C++ ABI,
which changes between releases, so the wheel names that release exactly;
`==2.14.1` also matches local builds such as 2.14.1+cu130. A scikit-build-core
dynamic-metadata provider (pyproject.toml)."""
from __future__ import annotations

from importlib import metadata
from typing import Any, Mapping


def torch_release() -> str:
    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:
        raise RuntimeError("castscope's wheel is built against the installed torch, and this Python has none: "
                           "install the torch you will run with (pip install torch==2.14.1) and build with "
                           "--no-build-isolation") from None
    return version.split("+", 1)[0]


def dynamic_metadata(settings: Mapping[str, Any], project: Mapping[str, Any]) -> dict[str, Any]:
    if settings:
        raise RuntimeError(f"torch_requirement takes no settings (got {sorted(settings)})")
    return {"dependencies": [f"torch=={torch_release()}"]}
