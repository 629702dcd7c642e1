#!/usr/bin/env bash
# Builds the agent on a GPU machine whose image has torch (with CUDA), CMake,
# a compiler, CUDA's headers, spdlog, fmt, nlohmann-json and CLI11 but no
# protobuf compiler (docs/gpu.md, "Checked on a real GPU"). Debian's protobuf
# packages, downloaded beside the repository into .devkit/ (apt-get download
# protobuf-compiler libprotoc32 libprotobuf32 libprotobuf-lite32 libprotoc-dev
# libprotobuf-dev), are unpacked into a private prefix for the agent's wire
# headers; nothing is installed system-wide. The collector is left out (no
# SQLite, gRPC, Abseil or PostgreSQL needed there): the GPU checks write the
# agent's events to a file.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
PREFIX=/tmp/castscope-protobuf
mkdir -p "$PREFIX"
for deb in .devkit/*.deb; do dpkg -x "$deb" "$PREFIX"; done
LIB="$PREFIX/usr/lib/x86_64-linux-gnu"
export LD_LIBRARY_PATH="$LIB${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
PYTHON=${PYTHON:-python3}
# The system compiler, whatever CC/CXX say: the image's /opt/gcc links
# libstdc++ statically into shared libraries, and a second libstdc++ in a
# process with torch crashes in its locale code (seen: std::ostringstream
# inside c10::sha1).
COMPILERS=(-DCMAKE_C_COMPILER=/usr/bin/gcc -DCMAKE_CXX_COMPILER=/usr/bin/g++)
TORCH_DIR=$("$PYTHON" -c 'import os, torch; print(os.path.dirname(torch.__file__))')
ABI=$("$PYTHON" -c 'import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))')
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${COMPILERS[@]}" -DCASTSCOPE_TORCH_DIR="$TORCH_DIR" \
  -DCASTSCOPE_CXX11_ABI="$ABI" -DPython3_EXECUTABLE="$(command -v "$PYTHON")" \
  -DProtobuf_PROTOC_EXECUTABLE="$PREFIX/usr/bin/protoc" -DProtobuf_INCLUDE_DIR="$PREFIX/usr/include" \
  -DProtobuf_LIBRARY="$LIB/libprotobuf.so" -DProtobuf_PROTOC_LIBRARY="$LIB/libprotoc.so" \
  -DCMAKE_DISABLE_FIND_PACKAGE_SQLite3=ON -DCMAKE_DISABLE_FIND_PACKAGE_gRPC=ON > build.configure.log
cmake --build build --target castscope_agent castscope_python castscope_standin_cupti
