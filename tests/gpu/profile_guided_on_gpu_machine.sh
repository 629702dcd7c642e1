#!/usr/bin/env bash
# On a GPU machine (docs/gpu.md): a profile-guided agent
# (cmake/CastscopeProfileGuided.cmake), checked and timed there. Builds
# the plain agent and sets it aside, takes the profile as setup.sh does
# (scripts/agent_profile_job.py under the instrumented agent), builds with it,
# runs every GPU check on that agent (all_checks_on_gpu_machine.sh), then
# times the two against each other per op, on the GPU and on the machine's
# CPU (bench/dispatch_ab_bench.py). Logs go to $OUT (or /tmp/castscope-gpu).
# The build is build_on_gpu_machine.sh's (file by file, CMake's default
# flags), not setup.sh's; the profile is taken as setup.sh takes it.
#   PAIRS=3 ITERS=4000 tests/gpu/profile_guided_on_gpu_machine.sh
# Needs what all_checks_on_gpu_machine.sh needs (.devkit/, .whl/).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
LOGS=${OUT:-/tmp/castscope-gpu}
mkdir -p "$LOGS"
PYTHON=${PYTHON:-python3}
PAIRS=${PAIRS:-3}
ITERS=${ITERS:-5000}
phase() { echo "== $1 ($SECONDS s)"; }
# An instrumented library exports libgcov's symbols (as test_profile_guided_build.py checks).
# grep reads all of nm's output: with pipefail, -q's early exit could fail nm with SIGPIPE.
instrumented() { nm -D "$1" | grep __gcov > /dev/null; }

phase "the plain agent"
# A warm machine keeps build/, and with it the phase an earlier run left in
# its cache (USE, or GENERATE if it was cut off): plain first.
[ -f build/CMakeCache.txt ] && cmake -S . -B build -DCASTSCOPE_PGO=OFF > /dev/null
tests/gpu/build_on_gpu_machine.sh > "$LOGS/build_plain.log" 2>&1 || { tail -30 "$LOGS/build_plain.log"; exit 1; }
grep -q '^CASTSCOPE_PGO:STRING=OFF' build/CMakeCache.txt || { echo "build/ is not configured plain"; exit 1; }
PLAIN=/tmp/castscope-plain-agent
mkdir -p "$PLAIN"
cp build/agent/libcastscope_agent.so build/agent/libcastscope_python.so "$PLAIN/" || exit 1
instrumented "$PLAIN/libcastscope_agent.so" && { echo "the plain agent is instrumented"; exit 1; }

phase "the profile (instrumented build, scripts/agent_profile_job.py)"
# protoc (build_on_gpu_machine.sh's private prefix) if the wire headers are made again.
export LD_LIBRARY_PATH="/tmp/castscope-protobuf/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PROFILE="$PWD/build/pgo/profile"
rm -rf "$PROFILE"
{ cmake -S . -B build -DCASTSCOPE_PGO=GENERATE -DCASTSCOPE_PGO_DIR="$PROFILE" &&
  cmake --build build --target castscope_profile_job_agent &&
  CASTSCOPE_AGENT_LIB="$PWD/build/agent/libcastscope_agent.so" PYTHONPATH="$PWD/agent/python" \
    "$PYTHON" scripts/agent_profile_job.py; } > "$LOGS/build_profile.log" 2>&1 \
  || { tail -30 "$LOGS/build_profile.log"; exit 1; }
[ -n "$(find "$PROFILE" -name '*.gcda' | head -n 1)" ] || { echo "the profile job wrote no profile"; exit 1; }

phase "the profile-guided agent"
{ cmake -S . -B build -DCASTSCOPE_PGO=USE && cmake --build build --target castscope_agent castscope_python; } \
  > "$LOGS/build_guided.log" 2>&1 || { tail -30 "$LOGS/build_guided.log"; exit 1; }
instrumented build/agent/libcastscope_agent.so && { echo "the agent is still instrumented"; exit 1; }

phase "every GPU check, on the profile-guided agent"
# Its own build step keeps the folder's CASTSCOPE_PGO=USE (a cache variable).
tests/gpu/all_checks_on_gpu_machine.sh 2>&1 | tail -n 15
checks=${PIPESTATUS[0]}

export PYTHONPATH="$PWD/agent/python"
status=$checks
for device in cuda cpu; do
  phase "per op, plain (before) against profile-guided (after), $device"
  "$PYTHON" bench/dispatch_ab_bench.py --before "$PLAIN/libcastscope_agent.so" \
    --after "$PWD/build/agent/libcastscope_agent.so" --pairs "$PAIRS" --iters "$ITERS" --device "$device" \
    2>&1 | tee "$LOGS/ab_$device.log"
  ((PIPESTATUS[0] == 0)) || { echo "the $device bench failed"; status=1; }
done
phase "done"
exit "$status"
