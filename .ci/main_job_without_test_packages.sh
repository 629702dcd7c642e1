#!/usr/bin/env bash
# The main job and the wheel, as on a machine without the test-only packages,
# before scripts/test.sh installs them (.ci/run runs this first, on a clean
# clone, so the venv has only requirements.txt's packages):
#  1. scripts/run_example.sh, the README's first command. Its configure
#     disables every test-only find_package (scripts/setup.sh,
#     TEST_ONLY_CMAKE_PACKAGES), so a test target configured outside the
#     helper that makes it fails here; then the report must be written.
#  2. The wheel built from that build (nothing compiled again), installed with
#     pip into a venv of its own, and `castscope run` of the example job from
#     that venv, outside the checkout.
# CASTSCOPE_CMAKE_ARGS is the tests' (-Werror), so that scripts/test.sh
# compiles nothing of the runtime again.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
export CASTSCOPE_CMAKE_ARGS="${CASTSCOPE_CMAKE_ARGS:--DCASTSCOPE_WERROR=ON}"

echo "== the main job, without the test-only packages (scripts/run_example.sh)"
rm -rf out/castscope
started=$SECONDS
scripts/run_example.sh
[ -s out/castscope/report.json ] || { echo "main job: exit 0 but no out/castscope/report.json" >&2; exit 1; }
echo "main job: report written (out/castscope/report.json), $((SECONDS - started)) s"

# Every package tests/requirements.txt pins, by its installed metadata.
for pkg in $(sed -n 's/^\([A-Za-z0-9_.-]*\)==.*/\1/p' tests/requirements.txt); do
  if .venv/bin/python -c 'import importlib.metadata, sys; importlib.metadata.distribution(sys.argv[1])' "$pkg" 2>/dev/null; then
    echo "main job: the test-only package '$pkg' is in .venv: this ran after the tests' setup (.ci/run is for a clean clone), so it proves nothing" >&2
    exit 1
  fi
done

echo "== the wheel in a venv of its own (pip wheel ., pip install, castscope run)"
started=$SECONDS
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# The user's venv: torch 2.14.1, pip and setuptools are the main venv's (a
# .pth line to links of its packages, castscope's own left out), so pip finds
# the torch the wheel requires installed instead of unpacking gigabytes
# again; no ensurepip, whose older setuptools would shadow the main venv's
# (as tests/integration/test_wheel.py does). scikit-build-core is this venv's
# own, installed as the README has the user do.
python=$(readlink -f .venv/bin/python)
"$python" -m venv --without-pip "$work/venv"
venv_python="$work/venv/bin/python"
main_site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
site=$("$venv_python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
mkdir "$work/main-packages"
for entry in "$main_site"/*; do
  name=$(basename "$entry")
  case "$name" in *castscope*|*.pth) continue ;; esac
  ln -s "$entry" "$work/main-packages/$name"
done
echo "$work/main-packages" > "$site/main-packages.pth"
wheel_builder=$(sed -n 's/^\(scikit-build-core==.*\|pathspec==.*\|packaging==.*\)$/\1/p' tests/requirements.txt)
# shellcheck disable=SC2086
"$venv_python" -m pip install -q $wheel_builder
# build/ is the main job's: the wheel's configure keeps its cached choices
# (test-only packages disabled) and compiles nothing again.
"$venv_python" -m pip wheel . --no-build-isolation --no-deps -q -w "$work/dist" --config-settings=build-dir=build
"$venv_python" -m pip install -q --no-index "$work"/dist/castscope-*.whl
# The job, outside the checkout, with none of this shell's castscope settings
# (CASTSCOPE_AGENT_LIB and the like would point it at build/).
mkdir "$work/job"
cp examples/train_resnet.py "$work/job/"
job_env=(env -u PYTHONPATH)
for name in $(compgen -e | grep '^CASTSCOPE_' || true); do job_env+=(-u "$name"); done
(cd "$work/job" && "${job_env[@]}" "$work/venv/bin/castscope" run --out out -- "$venv_python" -c \
  'import runpy, castscope; print("attached from", castscope.__file__, flush=True); runpy.run_path("train_resnet.py", run_name="__main__")' \
  --steps 2) | tee "$work/job.log"
[ -s "$work/job/out/report.json" ] || { echo "wheel: castscope run exited 0 but wrote no report.json" >&2; exit 1; }
grep -qxF "attached from $site/castscope/__init__.py" "$work/job.log" ||
  { echo "wheel: the job did not import castscope from the installed wheel ($site/castscope)" >&2; exit 1; }
echo "wheel: built, installed and ran the example job from its own venv, $((SECONDS - started)) s"
