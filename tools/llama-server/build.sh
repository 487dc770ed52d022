#!/usr/bin/env bash
# Build a real llama-server and a tiny model for tests/test_llama_server.py, idempotently:
#   1. llama.cpp source from the llama-cpp-python 0.3.36 sdist on PyPI (its vendored llama.cpp has
#      the server's reasoning_control and POST /v1/chat/completions/control)
#   2. a static, CPU-only llama-server (AVX2 baseline, no OpenSSL/curl)
#   3. a tiny random-weight qwen3 GGUF (make_model.py, gguf-py from the same tree)
#   4. a tiny random-weight projector for it, vision and audio (make_mmproj.py), for --mmproj
# Every step is skipped when its output is already there. FORCE_MODEL=1 rewrites the model.
# VERIFY=1 then starts the server on a free loopback port, runs verify.py's checks, stops it.
# Usage: bash tools/llama-server/build.sh   (ROOT=/other/dir to build elsewhere; about 20 min on 2 cores)
# Then: LLAMAFAST_LLAMA_SERVER=$ROOT/build/bin/llama-server LLAMAFAST_TEST_MODEL=$ROOT/models/tiny-qwen3.gguf
#       LLAMAFAST_TEST_MMPROJ=$ROOT/models/tiny-mmproj.gguf pytest -m llama_server
set -euo pipefail

ROOT=${ROOT:-$HOME/.cache/llamafast/llama-server}
VERSION=0.3.36
JOBS=${JOBS:-2}
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
mkdir -p "$ROOT"
cd "$ROOT"
for f in make_model.py make_mmproj.py verify.py; do [ -f "$ROOT/$f" ] || cp "$HERE/$f" "$ROOT/$f"; done

SDIST=dl/llama_cpp_python-$VERSION.tar.gz
SRC=src/llama_cpp_python-$VERSION/vendor/llama.cpp
BIN=$ROOT/build/bin/llama-server
MODEL=$ROOT/models/tiny-qwen3.gguf
MMPROJ=$ROOT/models/tiny-mmproj.gguf

# 1. source. --no-binary only for this package: `--no-binary :all:` would also make pip
#    bootstrap cmake from source for the metadata step (very slow).
if [ ! -f "$SDIST" ]; then
    pip download --no-deps --no-binary llama-cpp-python "llama-cpp-python==$VERSION" -d dl
fi
if [ ! -f "$SRC/CMakeLists.txt" ]; then
    mkdir -p src
    tar xzf "$SDIST" -C src
fi
ln -sfn "$SRC" llama.cpp
grep -q '"/v1/chat/completions/control"' llama.cpp/tools/server/server.cpp

# 2. llama-server (static; GGML_NATIVE=OFF so the binary runs on any AVX2 x86-64 machine)
if [ ! -x "$BIN" ]; then
    command -v cmake >/dev/null || pip install cmake
    start=$(date +%s)
    nice -n 19 cmake -S llama.cpp -B build -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF \
        -DGGML_NATIVE=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
        -DLLAMA_BUILD_UI=OFF
    nice -n 19 cmake --build build --target llama-server -j"$JOBS"
    echo "llama-server built in $(( $(date +%s) - start ))s"
fi
"$BIN" --version

# 3. the model (numpy etc. in a private venv; gguf-py from the same llama.cpp tree)
if [ ! -x venv/bin/python ]; then
    python3 -m venv venv
    venv/bin/pip install -q numpy tqdm pyyaml
fi
if [ ! -f "$MODEL" ] || [ "${FORCE_MODEL:-0}" = 1 ]; then
    venv/bin/python make_model.py llama.cpp "$MODEL"
fi

# 4. the projector (LLaVA-style vision, Whisper-style audio, into the model's embeddings)
if [ ! -f "$MMPROJ" ] || [ "${FORCE_MODEL:-0}" = 1 ]; then
    venv/bin/python make_mmproj.py llama.cpp "$MMPROJ"
fi

if [ "${VERIFY:-0}" = 1 ]; then
    venv/bin/python verify.py "$BIN" "$MODEL"
fi

echo "LLAMAFAST_LLAMA_SERVER=$BIN LLAMAFAST_TEST_MODEL=$MODEL LLAMAFAST_TEST_MMPROJ=$MMPROJ"
