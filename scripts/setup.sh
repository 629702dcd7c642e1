#!/usr/bin/env bash
# Installs everything castscope needs on a fresh Debian 12 machine, then
# configures and builds. Idempotent: with everything present it only checks
# and re-runs the (incremental) build.
#   scripts/setup.sh            packages, venv, build/
#   CASTSCOPE_BUILD_DIR=... CASTSCOPE_CMAKE_ARGS="..." scripts/setup.sh
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

APT_PACKAGES=(cmake ninja-build g++ pkg-config libspdlog-dev nlohmann-json3-dev libgtest-dev libgmock-dev
              libprotobuf-dev protobuf-compiler libgrpc++-dev protobuf-compiler-grpc libsqlite3-dev zlib1g-dev libcli11-dev libprotoc-dev
              clang-14 libclang-rt-14-dev
              libcpp-httplib-dev  # the collector's HTTP side (the viewer)
              libpq-dev           # the collector's fleet shipping and queries (PostgreSQL's client, libpq)
              libabsl-dev         # Abseil (gRPC's own): the fleet rollups' hash map
              postgresql-15 openssl  # the fleet tests start their own PostgreSQL server (docs/fleet.md)
              chromium)           # the viewer's browser tests (Playwright drives it; browsers are never downloaded)
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

PYTHON="${CASTSCOPE_PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv"
  "$PYTHON" -m venv .venv
fi
stamp=".venv/.castscope-requirements"
if ! cmp -s requirements.txt "$stamp"; then
  echo "setup: installing Python requirements (torch is large; pip takes it from local disk where it can)"
  .venv/bin/pip install -q -r requirements.txt
  cp requirements.txt "$stamp"
fi
# The castscope package, editable (agent/python in place) with its console
# script .venv/bin/castscope; docs/python-package.md. Reinstalled only when
# pyproject.toml or the checkout's path changes.
stamp=".venv/.castscope-package"
if ! { cat agent/python/pyproject.toml; echo "$ROOT"; } | cmp -s - "$stamp" || [ ! -x .venv/bin/castscope ]; then
  echo "setup: installing the castscope Python package (editable)"
  # Offline with the venv's setuptools when it can build wheels itself (>= 70.1); else pip fetches one.
  isolation=(--no-build-isolation)
  .venv/bin/python -c 'import setuptools.command.bdist_wheel' 2>/dev/null || isolation=()
  .venv/bin/pip install -q "${isolation[@]}" -e agent/python
  site=$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
  rm -f "$site/castscope.pth"  # written by earlier versions of this script
  { cat agent/python/pyproject.toml; echo "$ROOT"; } > "$stamp"
fi

TORCH_DIR=$(.venv/bin/python -c 'import os, torch; print(os.path.dirname(torch.__file__))' 2>/dev/null)
ABI=$(.venv/bin/python -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))' 2>/dev/null)
BUILD_DIR="${CASTSCOPE_BUILD_DIR:-build}"
# Configuring again is cheap and picks up changed CASTSCOPE_CMAKE_ARGS.
# shellcheck disable=SC2086
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCASTSCOPE_TORCH_DIR="$TORCH_DIR" -DCASTSCOPE_CXX11_ABI="$ABI" -DPython3_EXECUTABLE="$ROOT/.venv/bin/python" ${CASTSCOPE_CMAKE_ARGS:-} > "$BUILD_DIR.configure.log" \
  || { cat "$BUILD_DIR.configure.log"; exit 1; }
cmake --build "$BUILD_DIR"

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
