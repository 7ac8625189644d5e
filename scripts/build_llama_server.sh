#!/usr/bin/env bash
# Build llama.cpp's `llama-server` (OpenAI-compatible, parallel slots) from the llama.cpp source inside
# the llama-cpp-python sdist on PyPI — the same llama.cpp the in-process model runs, so a served model
# decodes as the in-process one does. Usage: build_llama_server.sh PIP VERSION TARGET_DIR "CMAKE ARGS"
# The binary lands in TARGET_DIR/llama-server (written under a temporary name, then renamed).
set -euo pipefail
pip_bin=$1 version=$2 target_dir=$3 cmake_args=$4
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$pip_bin" download --no-deps --no-binary :all: -d "$work" "llama-cpp-python==$version" >/dev/null
tar -xzf "$work"/llama_cpp_python-"$version".tar.gz -C "$work"
src="$work/llama_cpp_python-$version/vendor/llama.cpp"
# No web UI (nothing to fetch), no HTTPS (the server listens on 127.0.0.1), one static binary.
# shellcheck disable=SC2086
cmake -S "$src" -B "$work/build" -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_APP=OFF \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF $cmake_args >/dev/null
cmake --build "$work/build" --target llama-server -j "$(nproc)"
mkdir -p "$target_dir"
cp "$work/build/bin/llama-server" "$target_dir/.llama-server.partial"
mv "$target_dir/.llama-server.partial" "$target_dir/llama-server"
"$target_dir/llama-server" --version
