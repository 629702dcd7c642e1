#!/usr/bin/env bash
# Installs what castscope needs on a fresh Debian 12 machine, then configures
# and builds. Idempotent: with everything present it only checks and re-runs
# the (incremental) build.
#   scripts/setup.sh            the main job's needs: packages, venv, the runtime targets in build/, the viewer
#   scripts/setup.sh --tests    everything the tests need too (test-only packages, every target)
#   CASTSCOPE_BUILD_DIR=... CASTSCOPE_CMAKE_ARGS="..." scripts/setup.sh
# The main job's configure never finds the test-only CMake packages, even
# where they are installed (TEST_ONLY_CMAKE_PACKAGES below).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

FOR_TESTS=0
case "${1:-}" in
  "") ;;
  --tests) FOR_TESTS=1 ;;
  *) echo "setup: unknown argument '$1' (usage: scripts/setup.sh [--tests])" >&2; exit 2 ;;
esac

APT_PACKAGES=(cmake ninja-build g++ pkg-config python3-venv libspdlog-dev nlohmann-json3-dev
              libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc libsqlite3-dev zlib1g-dev libcli11-dev libprotoc-dev
              libcpp-httplib-dev  # the collector's HTTP side (the viewer)
              libpq-dev           # the collector's fleet shipping and queries (PostgreSQL's client, libpq)
              libabsl-dev)        # Abseil (gRPC's own): the fleet rollups' hash map
# Only the tests need these: GoogleTest, clang for the fuzzers, a PostgreSQL
# server the fleet tests start themselves (docs/fleet.md), openssl for their
# certificates, and chromium for the viewer's browser tests (Playwright drives
# it; browsers are never downloaded).
((FOR_TESTS)) && APT_PACKAGES+=(libgtest-dev libgmock-dev clang-14 libclang-rt-14-dev postgresql-15 openssl chromium)
# node and npm build the viewer (ui/): Debian's unless a node is already installed.
command -v npm >/dev/null 2>&1 || APT_PACKAGES+=(nodejs npm)
missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -q
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -q "${missing[@]}"
fi

# What CMake finds only for the tests (GoogleTest). The main job configures
# with each one disabled, so a test target touched outside the helper that
# makes it fails the main job's configure on every machine, not only on a
# fresh one; the tests' configure enables them again (cmake caches the choice).
TEST_ONLY_CMAKE_PACKAGES=(GTest)
find_test_packages=ON; ((FOR_TESTS)) && find_test_packages=OFF
TEST_PACKAGE_ARGS=()
for pkg in "${TEST_ONLY_CMAKE_PACKAGES[@]}"; do
  TEST_PACKAGE_ARGS+=("-DCMAKE_DISABLE_FIND_PACKAGE_$pkg=$find_test_packages")
done

PYTHON="${CASTSCOPE_PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  command -v "$PYTHON" > /dev/null || { echo "setup: no $PYTHON (CASTSCOPE_PYTHON names the Python to use)" >&2; exit 1; }
  "$PYTHON" -c 'import ensurepip' 2>/dev/null ||
    { echo "setup: $PYTHON cannot make a venv with pip: no ensurepip (Debian's is in python3-venv)" >&2; exit 1; }
  # A venv made again over an old one (its Python gone) keeps nothing of it.
  rm -f .venv/.castscope-requirements .venv/.castscope-test-requirements .venv/.castscope-package
  # pip itself comes with the requirements below, beside the build (ensurepip
  # is seconds of one core that nothing else would use).
  "$PYTHON" -m venv --without-pip .venv
fi
BUILD_DIR="${CASTSCOPE_BUILD_DIR:-build}"
# Configuring again is cheap and picks up changed CASTSCOPE_CMAKE_ARGS.
# Both choices below are for build time (docs/performance.md, "First run"):
# - a unity build: each library's files compiled as one (up to CMake's
#   batches of 8), so libtorch's, protobuf's and gRPC's headers are parsed
#   once per batch, not per file (the ASan and fuzzing builds of
#   scripts/test.sh compile the torch-free libraries file by file);
# - -g1 (line tables: backtraces and profiles keep file:line) instead of -g:
#   full debug info of libtorch's headers made every agent file a third slower.
# Its warnings (no CUPTI headers, ...) go to the terminal, except while the
# venv has no torch yet: those would be about the wheel not yet installed.
# CASTSCOPE_CMAKE_ARGS come after the caller's options (the user's choices
# win, as cmake keeps the last -D), except for --torch-free, whose options
# must hold while pip replaces torch.
configure() {
  local log="$BUILD_DIR.configure.log" torch_free=0
  [ "$1" = "--torch-free" ] && { torch_free=1; shift; }
  local args=(-S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG"
              -DCMAKE_UNITY_BUILD=ON -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" "${TEST_PACKAGE_ARGS[@]}")
  # shellcheck disable=SC2206
  local user=(${CASTSCOPE_CMAKE_ARGS:-})
  if ((torch_free)); then
    cmake "${args[@]}" "${user[@]}" "$@" > "$log" 2>&1 || { cat "$log"; return 1; }
  else
    cmake "${args[@]}" "$@" "${user[@]}" > "$log" || { cat "$log"; return 1; }
  fi
}
# The main job needs only the runtime (agent, preload shim, frame reader,
# forwarder, collector); tests, benches and examples are built for the tests.
build_targets=(--target castscope_runtime)
((FOR_TESTS)) && build_targets=()

# The castscope package, editable (agent/python in place) with its console
# script .venv/bin/castscope; docs/python-package.md. Reinstalled only when
# pyproject.toml or the checkout's path changes.
install_package() {
  local stamp=".venv/.castscope-package"
  if ! { cat agent/python/pyproject.toml; echo "$ROOT"; } | cmp -s - "$stamp" || [ ! -x .venv/bin/castscope ]; then
    echo "setup: installing the castscope Python package (editable)"
    # Offline with the venv's setuptools when it can build wheels itself (>= 70.1); else pip fetches one.
    local isolation=(--no-build-isolation)
    .venv/bin/python -c 'import setuptools.command.bdist_wheel' 2>/dev/null || isolation=()
    .venv/bin/pip install -q "${isolation[@]}" -e agent/python
    local site
    site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
    rm -f "$site/castscope.pth"  # written by earlier versions of this script
    { cat agent/python/pyproject.toml; echo "$ROOT"; } > "$stamp"
  fi
}

# The main job's Python packages (requirements.txt: torch, torchvision) and,
# for the tests only, tests/requirements.txt (pytest and the packages the
# tests read results with); each file has its stamp in the venv.
requirement_files=(requirements.txt)
((FOR_TESTS)) && requirement_files+=(tests/requirements.txt)
# The tests' stamp holds both files: a changed requirements.txt (a torch
# bump the main job installed first) resolves the tests' packages again.
stamp_of() { [ "$1" = requirements.txt ] && echo .venv/.castscope-requirements || echo .venv/.castscope-test-requirements; }
stamped() { if [ "$1" = requirements.txt ]; then cat requirements.txt; else cat requirements.txt "$1"; fi; }
requirements_changed=0
for file in "${requirement_files[@]}"; do
  stamped "$file" | cmp -s - "$(stamp_of "$file")" || requirements_changed=1
done
pip_requirements=()
for file in "${requirement_files[@]}"; do pip_requirements+=(-r "$file"); done
if ((requirements_changed)); then
  echo "setup: installing Python requirements (${requirement_files[*]}; torch is large, pip takes it from local disk where it can);"
  echo "setup: meanwhile building what does not include libtorch (collector, forwarder, ...)"
  # pip into the venv, the requirements, then the castscope package (it needs
  # the requirements' setuptools), all beside the build. In a process group of
  # its own (set -m), so that stopping the group stops the pip running inside
  # it, not only its shell.
  set -m
  { { [ -x .venv/bin/pip ] || .venv/bin/python -m ensurepip --default-pip; } &&
    .venv/bin/pip install -q "${pip_requirements[@]}" && install_package; } > .venv/pip-install.log 2>&1 < /dev/null &
  pip_pid=$!
  set +m
  # A failed configure or build, or Ctrl-C, must not leave pip writing into
  # .venv (a background job ignores SIGINT): it is stopped on the way out.
  # (A SIGKILL of this script runs no trap: the job's group is then left.)
  trap 'kill -- -"$pip_pid" 2>/dev/null || true' EXIT
  trap 'exit 130' INT TERM
  # Most of the build (the collector and the forwarder) needs no torch: it
  # compiles while pip unpacks torch, and the configure below adds the agent.
  build_status=0
  { configure --torch-free -DCASTSCOPE_BUILD_AGENT=OFF && cmake --build "$BUILD_DIR" "${build_targets[@]}"; } || build_status=$?
  ((build_status == 0)) || exit "$build_status"
  if ! wait "$pip_pid"; then
    cat .venv/pip-install.log
    echo "setup: pip install ${pip_requirements[*]} or the castscope package failed (its output above)" >&2
    exit 1
  fi
  trap - EXIT INT TERM
  for file in "${requirement_files[@]}"; do stamped "$file" > "$(stamp_of "$file")"; done
fi
install_package  # done above, beside the build, when the requirements were installed
TORCH_DIR=$(.venv/bin/python -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
ABI=$(.venv/bin/python -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>/dev/null)
configure_agent() {
  configure -DCASTSCOPE_BUILD_AGENT=ON -DCASTSCOPE_TORCH_DIR="$TORCH_DIR" -DCASTSCOPE_CXX11_ABI="$ABI" "$@"
}
# A profile-guided agent (cmake/CastscopeProfileGuided.cmake; docs/performance.md,
# "profile-guided"): the per-op libraries built instrumented, a few seconds of
# scripts/agent_profile_job.py under them, then built with that profile. The
# profile is taken again only when what it was taken of changes (the key:
# the sources those libraries compile, the job, the compiler, torch, the
# build folder). Not CASTSCOPE_CMAKE_ARGS: the tests' -Werror changes no code,
# and options that do (a build type) only cost the profile of the functions
# they change (GCC drops a function's profile whose code differs).
# CASTSCOPE_PGO=0 (or off) builds a plain agent; -DCASTSCOPE_PGO=... among
# CASTSCOPE_CMAKE_ARGS is the caller's to drive.
case "${CASTSCOPE_PGO:-1}" in
  0|off|OFF|false|no) pgo=0 ;;
  1|on|ON|true|yes) pgo=1 ;;
  *) echo "setup: CASTSCOPE_PGO='${CASTSCOPE_PGO}': 1 (the default, a profile-guided agent) or 0 (plain)" >&2; exit 2 ;;
esac
if ((pgo == 0)); then
  configure_agent -DCASTSCOPE_PGO=OFF
elif [[ " ${CASTSCOPE_CMAKE_ARGS:-} " == *" -DCASTSCOPE_PGO="* ]]; then
  configure_agent
else
  pgo_dir="$(mkdir -p "$BUILD_DIR/pgo" && cd "$BUILD_DIR/pgo" && pwd)"
  pgo_compiler=$(sed -n 's/^CMAKE_CXX_COMPILER:[A-Z]*=//p' "$BUILD_DIR/CMakeCache.txt" 2>/dev/null || true)
  pgo_key=$( { find agent/src agent/include agent/pyframes proto cmake CMakeLists.txt agent/CMakeLists.txt \
                 scripts/agent_profile_job.py -type f ! -name '*_test.cc' ! -name '*_fuzzer.cc' -print0 |
                 sort -z | xargs -0 sha256sum
               "${pgo_compiler:-${CXX:-c++}}" --version | head -n 1; echo "$TORCH_DIR $ABI $pgo_dir"
               cat "$TORCH_DIR/version.py"; } | sha256sum | cut -d' ' -f1)
  if [ "$(cat "$pgo_dir/key" 2>/dev/null)" != "$pgo_key" ]; then
    echo "setup: taking the agent's profile for a profile-guided build (instrumented build, a few seconds' job; again only when the agent changes)"
    rm -rf "$pgo_dir/key" "$pgo_dir/profile" "$pgo_dir/job.log"
    # Stopped or failed before the profile is in, the folder must not keep an
    # instrumented agent (every job under it would write a profile): it is
    # configured plain on the way out, and the next run takes the profile again.
    trap 'configure_agent -DCASTSCOPE_PGO=OFF > /dev/null 2>&1 || true
          echo "setup: the profile step did not finish; $BUILD_DIR is configured without a profile (the next scripts/setup.sh takes it)" >&2' EXIT
    trap 'exit 130' INT TERM
    configure_agent -DCASTSCOPE_PGO=GENERATE -DCASTSCOPE_PGO_DIR="$pgo_dir/profile"
    cmake --build "$BUILD_DIR" --target castscope_profile_job_agent
    if ! CASTSCOPE_AGENT_LIB="$(cd "$BUILD_DIR/agent" && pwd)/libcastscope_agent.so" \
         .venv/bin/python scripts/agent_profile_job.py > "$pgo_dir/job.log" 2>&1; then
      cat "$pgo_dir/job.log"
      echo "setup: scripts/agent_profile_job.py failed under the instrumented agent (its output above;" \
           "CASTSCOPE_PGO=0 scripts/setup.sh builds without a profile)" >&2
      exit 1
    fi
    # -Wno-missing-profile would otherwise hide a job that wrote no profile.
    if [ -z "$(find "$pgo_dir/profile" -name '*.gcda' 2>/dev/null | head -n 1)" ]; then
      echo "setup: the profile job wrote no profile into $pgo_dir/profile (its output: $pgo_dir/job.log)" >&2
      exit 1
    fi
    configure_agent -DCASTSCOPE_PGO=USE -DCASTSCOPE_PGO_DIR="$pgo_dir/profile"
    echo "$pgo_key" > "$pgo_dir/key"
    trap - EXIT INT TERM
  else
    configure_agent -DCASTSCOPE_PGO=USE -DCASTSCOPE_PGO_DIR="$pgo_dir/profile"
  fi
fi
cmake --build "$BUILD_DIR" "${build_targets[@]}"

# The viewer (ui/): npm ci from the lockfile (again only when it changed),
# then the bundle in ui/dist, which the collector serves.
if [ -f ui/package-lock.json ]; then
  stamp="ui/node_modules/.castscope-lock"
  if ! cmp -s ui/package-lock.json "$stamp"; then
    echo "setup: installing the viewer's npm packages"
    (cd ui && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --no-audit --no-fund --loglevel=error)
    cp ui/package-lock.json "$stamp"
  fi
  (cd ui && npm run --silent build)
fi
