#!/usr/bin/env bash
# The main job: set up (idempotent), then train ResNet-18 with castscope
# attached from outside (castscope run, LD_PRELOAD) and print what autocast
# did. Extra arguments go to examples/train_resnet.py.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
scripts/setup.sh
exec .venv/bin/castscope run --out out/castscope -- .venv/bin/python examples/train_resnet.py "$@"
