#!/usr/bin/env bash
# On a GPU machine (docs/gpu.md, "Checked on a real GPU"): builds the agent
# (build_on_gpu_machine.sh) and runs the real-CUPTI check of GPU timing.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
tests/gpu/build_on_gpu_machine.sh > /tmp/castscope-gpu-build.log 2>&1 || { tail -30 /tmp/castscope-gpu-build.log; exit 1; }
cmake --build build --target castscope_gpu castscope_config castscope_record > /dev/null
CUPTI_INCLUDE=$(sed -n 's/^CASTSCOPE_CUPTI_INCLUDE_DIR:PATH=//p' build/CMakeCache.txt)
nvcc -std=c++20 -O2 -I. -Ibuild/proto/wire -I"$CUPTI_INCLUDE" tests/gpu/gpu_timing_on_gpu.cu \
  build/agent/src/gpu/libcastscope_gpu.a build/agent/src/gpu/libcastscope_gpu_scope.a \
  build/agent/src/config/libcastscope_config.a build/agent/src/record/libcastscope_record.a -ldl -o build/gpu_timing_on_gpu
build/gpu_timing_on_gpu
