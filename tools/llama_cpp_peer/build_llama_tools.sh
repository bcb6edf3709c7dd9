#!/usr/bin/env bash
# Builds the llama.cpp programs that the GGUF fixtures need (issue 19, point 4), in
# the same out-of-tree build as build_llama_bench.sh (which fetches the source from
# the node-llama-cpp bundle and configures it; see there): llama-quantize, and
# llama_greedy (llama_greedy.cpp beside this file, against the static libllama).
#
#   tools/llama_cpp_peer/build_llama_tools.sh     # prints the directory holding both
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
work=${LLAMA_PEER_DIR:-$repo/.cache/llama-peer}
"$here/build_llama_bench.sh" >/dev/null
build=$work/build
src=${LLAMA_CPP_SRC:-$work/llama.cpp}
cmake --build "$build" --target llama-quantize -j "${JOBS:-$(nproc)}" >&2
${CXX:-g++} -O2 -std=c++17 -I"$src/include" -I"$src/ggml/include" "$here/llama_greedy.cpp" \
  "$build/src/libllama.a" "$build/ggml/src/libggml.a" "$build/ggml/src/libggml-cpu.a" \
  "$build/ggml/src/libggml-base.a" -fopenmp -lpthread -o "$build/bin/llama_greedy"
echo "$build/bin"
