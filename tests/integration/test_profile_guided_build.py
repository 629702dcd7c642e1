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


def test_werror_holds_everywhere_but_where_a_profile_is_used():
    # GCC warns of each edited function whose profile it drops, with no option
    # to turn that off: a build after an edit must not stop on it, so -Werror
    # leaves out exactly the units compiled with -fprofile-use (CMakeLists.txt,
    # castscope_warnings); the GENERATE build of the same sources keeps it.
    build = _native.agent_library_path().parent.parent
    cache = (build / "CMakeCache.txt").read_text() if (build / "CMakeCache.txt").is_file() else ""
    if not re.search(r"^CASTSCOPE_WERROR:BOOL=ON$", cache, re.MULTILINE):
        pytest.skip(f"{build} is not a -Werror build (scripts/test.sh configures one)")
    commands = subprocess.run(["ninja", "-C", str(build), "-t", "commands"], capture_output=True, text=True,
                              check=True).stdout.splitlines()
    ours = [c for c in commands if " -Wall " in c and (" -c " in c)]
    with_profile = [c for c in ours if "-fprofile-use=" in c]
    without = [c for c in ours if "-fprofile-use=" not in c]
    assert without and all(" -Werror " in c for c in without), [c[-160:] for c in without if " -Werror " not in c][:3]
    assert not any(" -Werror " in c for c in with_profile), [c[-160:] for c in with_profile][:3]
    if _build_cache(_native.agent_library_path()).get("CASTSCOPE_PGO") == "USE":
        assert len(with_profile) >= 4  # the four per-op libraries' units
