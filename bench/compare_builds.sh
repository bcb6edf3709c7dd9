#!/usr/bin/env bash
# Builds tessera at OLD_COMMIT and from the working tree, then runs `tessera bench`
# on the Llama-3.2-1B shape with each, taking turns, so load drift on a shared host
# falls on both alike (docs/benchmarks.md, issue 13).
#   bench/compare_builds.sh OLD_COMMIT [ROUNDS] [THREADS...]    (default: 3 rounds, 2 threads)
# On the GPU host, unpacked Debian packages in .deps/ (../shared/docs/gpu-machine.md) are used when present.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
old=${1:?usage: bench/compare_builds.sh OLD_COMMIT [ROUNDS] [THREADS...]}
rounds=${2:-3}
threads=("${@:3}")
((${#threads[@]})) || threads=(2)
work=$(mktemp -d /tmp/tessera-compare.XXXXXX)
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_TESTS=OFF)
if [[ -d .deps/usr ]]; then
  export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
  cmake_args+=(-DCMAKE_PREFIX_PATH=$PWD/.deps/usr)
fi
mkdir "$work/old"
git archive "$old" CMakeLists.txt src bench | tar -x -C "$work/old"
cmake -S "$work/old" -B "$work/build-old" "${cmake_args[@]}" >"$work/old.log"
cmake -S . -B "$work/build-new" "${cmake_args[@]}" >"$work/new.log"
cmake --build "$work/build-old" --target tessera >>"$work/old.log"
cmake --build "$work/build-new" --target tessera >>"$work/new.log"
for t in "${threads[@]}"; do
  for ((round = 1; round <= rounds; ++round)); do
    for build in old new; do
      echo "== threads $t round $round $build"
      "$work/build-$build/bin/tessera" bench --config bench/shapes/llama-3.2-1b.json --random-weights --seed 1 \
        --threads "$t" 2>&1 | grep -E "read bandwidth|prefill|decode "
    done
  done
done
rm -rf "$work"
