#!/usr/bin/env bash
# Runs every test: unit tests (GoogleTest via ctest, -Werror build), the same
# unit tests under ASan/UBSan, and the integration tests (pytest, real torch).
# Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

CASTSCOPE_CMAKE_ARGS="-DCASTSCOPE_WERROR=ON" scripts/setup.sh

echo "== unit tests"
ctest --test-dir build --output-on-failure -j2

echo "== unit tests under ASan/UBSan"
if [ ! -f build-asan/build.ninja ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCASTSCOPE_BUILD_AGENT=OFF \
    -DCASTSCOPE_SANITIZE=ON -DCASTSCOPE_WERROR=ON
fi
cmake --build build-asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure -j2

echo "== integration tests"
.venv/bin/python -m pytest tests/integration -q "$@"
