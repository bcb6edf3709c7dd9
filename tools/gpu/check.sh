#!/usr/bin/env bash
# On the GPU machine: builds tessera with CUDA, runs the tests labelled gpu, runs
# them again under compute-sanitizer's memcheck, and benches the CUDA device.
# Logs go to $OUT (or /tmp/gpu-check). See docs/gpu.md for what to carry.
#   tools/gpu/check.sh [tests|memcheck|bench]...   (default: all three)
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
STEPS=${*:-tests memcheck bench}

# Debian 12's libhwy and libpcre2 (the GPU machine has neither), unpacked from the carried archive.
if [ -f .prev/deps.tar.xz ] && [ ! -d .deps ]; then tar -xJf .prev/deps.tar.xz; fi
if [ -d .deps ]; then
  export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig
  export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
  PREFIX=(-DCMAKE_PREFIX_PATH=$PWD/.deps/usr)
fi
cmake -S . -B build-gpu -G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=ON "${PREFIX[@]}" >"$OUT/configure.log" 2>&1 ||
  { tail -30 "$OUT/configure.log"; exit 1; }
ninja -C build-gpu tessera gpu_test >"$OUT/build.log" 2>&1 || { grep -A5 -E "error|FAILED" "$OUT/build.log" | head -60; exit 1; }
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv,noheader | tee "$OUT/gpu.txt"

for step in $STEPS; do
  case $step in
    tests)
      ctest --test-dir build-gpu -L gpu --output-on-failure -j1 >"$OUT/tests.log" 2>&1
      echo "gpu tests rc $?"; grep -E "tests passed|tests failed|Failed|\*\*\*" "$OUT/tests.log" | tail -15 ;;
    memcheck)
      # The kernels' own tests and one fixture of each kind, under memcheck (slow: one pass).
      compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/bin/gpu_test \
        --gtest_filter='Cuda*:-*BatchTest*:*Reference*' >"$OUT/memcheck.log" 2>&1
      echo "memcheck (device tests) rc $?"; tail -4 "$OUT/memcheck.log"
      compute-sanitizer --tool memcheck --error-exitcode 9 build-gpu/bin/gpu_test \
        --gtest_filter='*Reference*llama3_bf16*:*Reference*qwen3_f32*:*BatchTest*mistral*' >"$OUT/memcheck-model.log" 2>&1
      echo "memcheck (model tests) rc $?"; tail -4 "$OUT/memcheck-model.log" ;;
    bench)
      for shape in llama-3.2-1b llama-3-8b; do
        build-gpu/bin/tessera bench --device cuda --config bench/shapes/$shape.json --random-weights --seed 1 \
          --dtype bf16 2>&1 | tee "$OUT/bench-$shape.log" | grep -E "device|prefill|decode|kv cache|model"
      done ;;
  esac
done
