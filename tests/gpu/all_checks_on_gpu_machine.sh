#!/usr/bin/env bash
# Every check that needs a GPU, in one go, for a GPU machine lent for a few
# minutes (docs/gpu.md, "Checked on a real GPU"): builds the agent, runs the
# CUPTI check without torch, then the CUDA rows of the integration tests that
# need no collector (numerics, GPU timing, torch's CUDA autocast lists, what
# observers see of castscope's casts on both devices) and the smoke run.
# Logs go to $OUT (or /tmp/castscope-gpu) when set.
# Needs .devkit/ (build_on_gpu_machine.sh) and, where the image lacks
# torch's test dependency expecttest, its wheel in .whl/, and torchao's for the
# float8 step (docs/gpu.md).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
LOGS=${OUT:-/tmp/castscope-gpu}
mkdir -p "$LOGS"
PYTHON=${PYTHON:-python3}
failed=()
step() {  # step NAME COMMAND...: runs it, its output into $LOGS/NAME.log and the terminal
  local name=$1; shift
  local start=$SECONDS
  echo "== $name"
  if "$@" 2>&1 | tee "$LOGS/$name.log"; then echo "== $name: ok ($((SECONDS - start)) s)"
  else echo "== $name: FAILED ($((SECONDS - start)) s)"; failed+=("$name"); fi
}
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
# Without a GPU every CUDA row would skip and the run would read as passed.
"$PYTHON" -c 'import sys, torch; print("torch", torch.__version__, "cuda", torch.version.cuda)
sys.exit(0 if torch.cuda.is_available() else "torch sees no CUDA device: nothing here would be checked")' || exit 1
step cupti tests/gpu/check_on_gpu_machine.sh
[ -f build/agent/libcastscope_agent.so ] || { echo "the agent did not build"; exit 1; }
POLICIES=$("$PYTHON" tests/gpu/policy_for_this_torch.py --dir "$(mktemp -d)") || exit 1
export PYTHONPATH=$PWD/agent/python PYTHONUNBUFFERED=1
if compgen -G ".whl/*.whl" > /dev/null; then
  "$PYTHON" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/castscope-site .whl/*.whl \
    || exit 1
  PYTHONPATH=$PYTHONPATH:/tmp/castscope-site
fi
PYTEST=("$PYTHON" -m pytest -q -rs -p no:cacheprovider)
step direct_casts env CASTSCOPE_POLICIES="$POLICIES" "${PYTEST[@]}" tests/integration/test_parity_direct_casts.py
step numerics "${PYTEST[@]}" tests/integration/test_numerics_on_device.py
step gpu_timing "${PYTEST[@]}" tests/integration/test_gpu_timing.py -k "cuda or torch_profiler or launches_the_kernels"
step autocast_lists env CASTSCOPE_POLICIES="$POLICIES" "${PYTEST[@]}" tests/integration/test_parity_autocast_lists.py -k cuda
step autocast_lists_cublaslt env CASTSCOPE_POLICIES="$POLICIES" CASTSCOPE_TEST_CUBLASLT=1 "${PYTEST[@]}" \
  tests/integration/test_parity_autocast_lists.py -k cuda
step gemm_precision "$PYTHON" tests/gpu/gemm_precision_on_gpu.py
step float8 "$PYTHON" tests/gpu/float8_on_gpu.py
step smoke "$PYTHON" tests/gpu/smoke_on_gpu.py
[ ${#failed[@]} -eq 0 ] || { echo "failed: ${failed[*]}"; exit 1; }
echo "all GPU checks passed"
