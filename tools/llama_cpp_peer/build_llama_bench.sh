#!/usr/bin/env bash
# Builds llama.cpp's `llama-bench` (CPU backend only, Release, -march=native) out of
# tree, from the llama.cpp source that the node-llama-cpp npm package carries as a git
# bundle (package/llama/gitRelease.bundle; its postinstall clones that bundle, we do the
# same with plain git). Nothing is vendored: the source is fetched, never committed.
#
#   tools/llama_cpp_peer/build_llama_bench.sh          # prints the path of llama-bench
#
# Where the source comes from, first match wins (so a second run reuses everything):
#   LLAMA_CPP_SRC=<dir>          an unpacked llama.cpp source tree (offline)
#   $LLAMA_PEER_DIR/llama.cpp    cloned by an earlier run
#   NODE_LLAMA_CPP_TGZ=<file>    a node-llama-cpp-*.tgz from `npm pack` (offline)
#   $LLAMA_PEER_DIR/node-llama-cpp-*.tgz
#   npm pack node-llama-cpp@$NODE_LLAMA_CPP_VERSION    (needs the npm registry)
#
# LLAMA_PEER_DIR defaults to <repo>/.cache/llama-peer (ignored by git); the build goes to
# $LLAMA_PEER_DIR/build. JOBS sets the build parallelism (default: all cores).
# LLAMA_ISA=avx2 builds for AVX2, FMA and F16C alone (no -march=native) into
# $LLAMA_PEER_DIR/build-avx2: the dev machines' kind on a CPU with AVX-512, beside tessera
# run with TESSERA_ISA=avx2.
# LLAMA_ISA=avx512 builds for AVX-512 (F, BW, VBMI, VNNI, BF16) without AMX into
# $LLAMA_PEER_DIR/build-avx512: for a CPU whose AMX llama.cpp cannot use (on session 46's
# Xeon VM its AMX matmul died of SIGILL at its first tileloadd, every run).
# Only the llama-bench target is built.
set -euo pipefail

repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
work=${LLAMA_PEER_DIR:-$repo/.cache/llama-peer}
version=${NODE_LLAMA_CPP_VERSION:-3.22.1}
jobs=${JOBS:-$(nproc)}
mkdir -p "$work"

log() { echo "[llama-peer] $*" >&2; }

find_source() {
  if [[ -n ${LLAMA_CPP_SRC:-} ]]; then
    [[ -f $LLAMA_CPP_SRC/tools/llama-bench/llama-bench.cpp ]] ||
      { log "LLAMA_CPP_SRC=$LLAMA_CPP_SRC holds no tools/llama-bench/llama-bench.cpp"; exit 1; }
    src=$(cd "$LLAMA_CPP_SRC" && pwd)
    return
  fi
  src=$work/llama.cpp
  [[ -f $src/tools/llama-bench/llama-bench.cpp ]] && return

  local tgz=${NODE_LLAMA_CPP_TGZ:-}
  if [[ -z $tgz ]]; then
    tgz=$(find "$work" -maxdepth 1 -name 'node-llama-cpp-*.tgz' | sort | tail -n 1)
  fi
  if [[ -z $tgz ]]; then
    log "fetching node-llama-cpp@$version with npm pack"
    (cd "$work" && npm pack --silent "node-llama-cpp@$version" >/dev/null)
    tgz=$work/node-llama-cpp-$version.tgz
  fi
  [[ -f $tgz ]] || { log "no package tarball at $tgz"; exit 1; }

  log "unpacking the llama.cpp git bundle from $tgz"
  local tmp=$work/unpack.$$
  rm -rf "$tmp"
  mkdir -p "$tmp"
  tar -xzf "$tgz" -C "$tmp" package/llama/gitRelease.bundle package/llama/llama.cpp.info.json package/package.json
  git clone --quiet "$tmp/package/llama/gitRelease.bundle" "$tmp/llama.cpp" 2>/dev/null
  # Record which package the source came from; the bundle's single commit is squashed.
  local pkg_version
  pkg_version=$(sed -n 's/^ *"version": *"\([^"]*\)".*/\1/p' "$tmp/package/package.json" | head -n 1)
  echo "node-llama-cpp $pkg_version, llama.cpp commit $(git -C "$tmp/llama.cpp" rev-parse --short=12 HEAD)" \
    >"$tmp/llama.cpp/PEER_SOURCE"
  mv "$tmp/llama.cpp" "$src"
  rm -rf "$tmp"
}

find_source
build=$work/build
isa_flags=(-DGGML_NATIVE=ON)
if [[ ${LLAMA_ISA:-native} == avx2 ]]; then
  build=$work/build-avx2
  isa_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
    -DGGML_AVX512=OFF -DGGML_AVX512_VBMI=OFF -DGGML_AVX512_VNNI=OFF -DGGML_AVX512_BF16=OFF -DGGML_AVX_VNNI=OFF)
elif [[ ${LLAMA_ISA:-native} == avx512 ]]; then
  build=$work/build-avx512
  isa_flags=(-DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON -DGGML_BMI2=ON
    -DGGML_AVX512=ON -DGGML_AVX512_VBMI=ON -DGGML_AVX512_VNNI=ON -DGGML_AVX512_BF16=ON -DGGML_AMX_TILE=OFF
    -DGGML_AMX_INT8=OFF -DGGML_AMX_BF16=OFF)
elif [[ ${LLAMA_ISA:-native} != native ]]; then
  log "LLAMA_ISA is native, avx2 or avx512, not ${LLAMA_ISA}"
  exit 1
fi
bench=$build/bin/llama-bench

if [[ ! -f $build/CMakeCache.txt ]]; then
  log "configuring $src into $build"
  generator=()
  command -v ninja >/dev/null && generator=(-G Ninja)
  launcher=()
  command -v ccache >/dev/null && launcher=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  cmake -S "$src" -B "$build" "${generator[@]}" "${launcher[@]}" \
    -DCMAKE_BUILD_TYPE=Release "${isa_flags[@]}" -DBUILD_SHARED_LIBS=OFF \
    -DGGML_CUDA=OFF -DGGML_VULKAN=OFF -DGGML_METAL=OFF -DGGML_HIP=OFF -DGGML_SYCL=OFF \
    -DGGML_OPENCL=OFF -DGGML_RPC=OFF -DGGML_BACKEND_DL=OFF -DGGML_CCACHE=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_OPENSSL=OFF >&2
fi
log "building llama-bench with $jobs jobs"
cmake --build "$build" --target llama-bench -j "$jobs" >&2
[[ -x $bench ]] || { log "no $bench after the build"; exit 1; }
echo "$bench"
