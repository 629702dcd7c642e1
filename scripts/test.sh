#!/usr/bin/env bash
# Runs every test: unit tests (GoogleTest via ctest, -Werror build), the same
# unit tests under ASan/UBSan, timed libFuzzer runs of the policy parser, the
# batch decoder and the spool reader, and the integration tests (pytest,
# real torch, real collector processes).
# Extra arguments go to pytest.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

# A checkout with its venv and three builds takes ~8 GiB, and the tests write
# a few hundred MiB more under /tmp: say so up front rather than fail at a link.
for dir in "$ROOT" "${TMPDIR:-/tmp}"; do
  free_gib=$(df -Pk "$dir" 2>/dev/null | awk 'NR==2 {print int($4 / 1048576)}') || continue
  if [ -n "$free_gib" ] && [ "$free_gib" -lt 10 ]; then
    echo "warning: $free_gib GiB free under $dir; setup, builds and tests need about 10 GiB" >&2
  fi
done

CASTSCOPE_CMAKE_ARGS="-DCASTSCOPE_WERROR=ON" scripts/setup.sh --tests

echo "== unit tests"
# --no-tests=error: build/ is configured without GoogleTest by the main job
# (scripts/setup.sh); a configure that left it so must not pass with no tests.
ctest --test-dir build --output-on-failure --no-tests=error -j2

echo "== unit tests under ASan/UBSan"
if [ ! -f build-asan/build.ninja ]; then
  cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCASTSCOPE_BUILD_AGENT=OFF \
    -DCASTSCOPE_SANITIZE=ON -DCASTSCOPE_WERROR=ON
fi
cmake --build build-asan
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 ctest --test-dir build-asan --output-on-failure --no-tests=error -j2

echo "== fuzzing the parsers of untrusted input (libFuzzer, ${CASTSCOPE_FUZZ_SECONDS:-20} s each)"
if [ ! -f build-fuzz/build.ninja ]; then
  cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER=clang++-14 \
    -DCMAKE_C_COMPILER=clang-14 -DCASTSCOPE_BUILD_AGENT=OFF -DCASTSCOPE_FUZZ=ON > build-fuzz.configure.log
fi
cmake --build build-fuzz --target policy_fuzzer batch_decoder_fuzzer spool_reader_fuzzer cublaslt_trace_fuzzer
# fuzzer:seed-directories pairs (directories separated by commas). New inputs
# go to a scratch directory (first argument), so the checked-in seeds stay as
# they are.
for pair in policy_fuzzer:policies,tests/fuzz/corpus/policy batch_decoder_fuzzer:tests/fuzz/corpus/batch spool_reader_fuzzer:tests/fuzz/corpus/spool \
            cublaslt_trace_fuzzer:tests/fuzz/corpus/cublaslt; do
  fuzzer=${pair%%:*}
  seeds=${pair#*:}
  corpus=$(mktemp -d)
  echo "-- $fuzzer"
  build-fuzz/tests/"$fuzzer" -max_total_time="${CASTSCOPE_FUZZ_SECONDS:-20}" -max_len=65536 \
    -artifact_prefix="$corpus/" "$corpus" ${seeds//,/ } 2>&1 | tail -n 2
  rm -rf "$corpus"
done

echo "== integration tests"
.venv/bin/python -m pytest tests/integration -q "$@"

echo "== the viewer in a real browser (Playwright, Debian's chromium)"
(cd ui && npx playwright test)
