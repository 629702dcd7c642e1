"""The agent the jobs and these tests load is the one scripts/setup.sh ends
with: profile-guided where the build folder says so, never the instrumented
agent of its profile step (docs/operations.md, "Setup")."""
import pathlib
import re
import subprocess

import pytest

from castscope import _native


def _symbols(library: pathlib.Path) -> str:
    return subprocess.run(["nm", "--defined-only", str(library)], capture_output=True, text=True, check=True).stdout


def _build_cache(library: pathlib.Path) -> dict:
    """The CMake cache of the build folder that holds the library (build/agent/...), else {}."""
    cache = library.parent.parent / "CMakeCache.txt"
    if not cache.is_file():
        return {}
    return dict(re.findall(r"^(CASTSCOPE_PGO(?:_DIR)?):\w+=(.*)$", cache.read_text(), re.MULTILINE))


@pytest.mark.parametrize("name", ["libcastscope_agent.so", "libcastscope_python.so"])
def test_loaded_libraries_are_not_instrumented(name):
    # An instrumented library carries libgcov (__gcov_*): every process that
    # loads it would write a profile into the build folder when it exits.
    library = _native.agent_library_path().parent / name
    instrumented = sorted(set(re.findall(r"\b(__gcov_\w+)", _symbols(library))))
    assert not instrumented, f"{library} is instrumented (CASTSCOPE_PGO=GENERATE left behind): {instrumented[:3]}"


def test_a_profile_guided_build_has_its_profile():
    library = _native.agent_library_path()
    cache = _build_cache(library)
    if cache.get("CASTSCOPE_PGO") != "USE":
        pytest.skip(f"{library} is not from a profile-guided build folder (CASTSCOPE_PGO={cache.get('CASTSCOPE_PGO')})")
    profile = pathlib.Path(cache["CASTSCOPE_PGO_DIR"])
    # -Wno-missing-profile lets USE build without one; setup.sh checks, and so does this.
    per_library = {lib: list(profile.glob(f"*{lib}.dir*.gcda"))
                   for lib in ("castscope_dispatch", "castscope_context", "castscope_record", "castscope_python")}
    assert all(per_library.values()), f"no profile in {profile} for: {[k for k, v in per_library.items() if not v]}"


def test_profiled_units_take_profile_correction():
    # Without it GCC 12 warns "Missing counts for called function" (no -W
    # option) after an edit of a profiled function, and -Werror stops the
    # build until setup.sh takes a new profile (cmake/CastscopeProfileGuided.cmake).
    library = _native.agent_library_path()
    if _build_cache(library).get("CASTSCOPE_PGO") != "USE":
        pytest.skip(f"{library} is not from a profile-guided build folder")
    build = library.parent.parent
    commands = subprocess.run(["ninja", "-C", str(build), "-t", "commands"], capture_output=True, text=True,
                              check=True).stdout.splitlines()
    profiled = [c for c in commands if "-fprofile-use=" in c]
    assert len(profiled) >= 4, "the four per-op libraries' units"  # dispatch, context, record, frame reader
    assert all(" -fprofile-correction " in c for c in profiled), [c[-200:] for c in profiled][:2]
