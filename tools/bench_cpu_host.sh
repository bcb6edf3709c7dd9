#!/usr/bin/env bash
# Issue 15 on a many-core machine in one time-limited call (the GPU host's Xeon through
# the device tool): the CPU kernels' tests on its instruction set, tessera against
# llama.cpp (tools/llama_cpp_peer/peer_bench.sh: 1B shape, bf16 and f16, prefill 512 and
# decode 128 at context 512) at each of --threads, and tessera's decode on the 8B shape
# at --big-threads. Order: the peer at the first thread count, tessera there again with
# the thread pool's spin off (TESSERA_SPIN_US=0), the 8B shape, then the peer at the
# other counts; whatever would end past --deadline seconds (counted from the
# start) is skipped and listed, so the call returns what it measured.
#   tools/bench_cpu_host.sh [--threads "16 2"] [--big-threads 16] [--rounds 1]
#     [--deadline 390] [--out DIR] [--dtypes bf16,f16] [--decode 128] [--sweep "1 4 8"] [--no-spin 1]
#     [--variants "TESSERA_AMX=0 TESSERA_BF16_DOT=0"] [--variant-rounds 1]
# --sweep: tessera alone (bf16 when in --dtypes, a 512-token prompt, 32 decode steps) at
# these thread counts too, after the peer (issue 15's point 5 with --threads' counts);
# --no-spin 0 leaves out the TESSERA_SPIN_US=0 run; --variants: tessera bf16 again at the
# first thread count with each of these settings in its environment (one run each, after
# the TESSERA_SPIN_US=0 one; a variant of several settings joins them with commas);
# --variant-rounds N > 1: N rounds of the same binary with no setting (`default`) and then
# each variant, so that the machine's drift between runs shows in every round (one run of
# the default after the peer's cannot tell a setting from a slower moment).
# GEMM_BENCH_BIN: cpu_matmul_bench's bf16 GEMM on one thread (its share of the
# instruction's loop) after the tests; several (space-separated) take turns, twice.
# MODEL_TEST_BIN: the model fixture tests (model_test, built with TESSERA_SOURCE_DIR pointing at this checkout) run after
# backend_test, MODEL_TEST_FILTER (a gtest filter) choosing which, stopped after
# MODEL_TEST_TIMEOUT seconds (90). LLAMA_BENCH: a
# llama-bench built elsewhere for this machine's instruction set (peer_bench.sh), so
# none is built here.
# Binaries: TESSERA_BIN and BACKEND_TEST_BIN when they run here, else (each that does
# not) built from the working tree into build-host/ (Release, all cores). Libraries the machine lacks come
# from .prev/deps.tar.xz (tools/gpu/make_deps.sh). llama.cpp's source: LLAMA_CPP_SRC,
# else .cache/llama-peer/llama.cpp, else LLAMA_SRC_TAR (default .cache/llama-peer/src.tar.xz,
# a tar of that folder); llama-bench is built here (GGML_NATIVE) from the start. The device
# tool carries 64 MiB with the tree, so the tar can leave out what llama-bench's build
# does not read (3.2 MB instead of 6.8, configure and `ninja -n llama-bench` checked):
#   tar -xJf src.tar.xz && rm -rf llama.cpp/{tools/ui,media,docs,scripts,tests,benches,conversion} \
#     llama.cpp/{.devops,ci,pocs,skills,requirements,grammars,licenses} llama.cpp/tools/mtmd/*.mp4 &&
#   find llama.cpp/ggml/src -maxdepth 1 -name 'ggml-*' -type d ! -name ggml-cpu -exec rm -rf {} + &&
#   tar -cJf src-slim.tar.xz llama.cpp
# DIR (default $OUT, else /tmp/bench-cpu-host) gets log.txt (everything printed),
# backend_test.log, model_test.log (with MODEL_TEST_BIN), peer-tN.md (markdown for
# docs/benchmarks.md) and peer-tN.tsv per thread count, bench-8b.txt, sweep.txt (the
# device tool brings back 8 files: two thread counts and no 8B shape, or one and it). The
# weight files' logs go to WORK (default /tmp/bench-cpu-host-work), their ends to log.txt
# when they fail.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$SECONDS
threads="16 2" big_threads=16 rounds=1 deadline=390 out=${OUT:-/tmp/bench-cpu-host}
dtypes=bf16,f16 decode=128 sweep="" no_spin=1 variants="" variant_rounds=1
while (($#)); do
  case $1 in
    --threads) threads=$2 ;; --big-threads) big_threads=$2 ;; --rounds) rounds=$2 ;;
    --deadline) deadline=$2 ;; --out) out=$2 ;; --dtypes) dtypes=$2 ;; --sweep) sweep=$2 ;;
    --no-spin) no_spin=$2 ;; --decode) decode=$2 ;; --variants) variants=$2 ;; --variant-rounds) variant_rounds=$2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
work=${WORK:-/tmp/bench-cpu-host-work}
mkdir -p "$out" "$work"
exec > >(tee -a "$out/log.txt") 2>&1
left() { echo $((deadline - (SECONDS - start))); }
note() { echo "== t=$((SECONDS - start)) s: $*"; }

note "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "avx-512 flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx512|amx)' | tr '\n' ' ')"
echo "tree: commit $(git rev-parse --short HEAD 2>/dev/null || echo '(no git history here)')"

if [[ -f .prev/deps.tar.xz && ! -d .deps ]]; then tar -xJf .prev/deps.tar.xz; fi
if [[ -d .deps/usr ]]; then
  export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
  export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig
fi
export LLAMA_PEER_DIR=${LLAMA_PEER_DIR:-$PWD/.cache/llama-peer}
src_tar=${LLAMA_SRC_TAR:-$LLAMA_PEER_DIR/src.tar.xz}
if [[ -z ${LLAMA_CPP_SRC:-} && ! -d $LLAMA_PEER_DIR/llama.cpp && -f $src_tar ]]; then
  mkdir -p "$LLAMA_PEER_DIR" && tar -xJf "$src_tar" -C "$LLAMA_PEER_DIR"
fi

# llama-bench builds in the background from the start (beside tessera's build, if any).
builder=""
if [[ -z ${LLAMA_BENCH:-} ]]; then
  note "building llama-bench"
  tools/llama_cpp_peer/build_llama_bench.sh >"$work/llama-build.log" 2>&1 &
  builder=$!
fi

tessera=${TESSERA_BIN:-} backend_test=${BACKEND_TEST_BIN:-} targets=()
"${tessera:-false}" --help >/dev/null 2>&1 || { targets+=(tessera) && tessera=$PWD/build-host/bin/tessera; }
"${backend_test:-false}" --gtest_list_tests >/dev/null 2>&1 ||
  { targets+=(backend_test) && backend_test=$PWD/build-host/bin/backend_test; }
if ((${#targets[@]})); then
  note "building ${targets[*]} into build-host/"
  cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_CUDA=OFF)
  [[ -d .deps/usr ]] && cmake_args+=(-DCMAKE_PREFIX_PATH=$PWD/.deps/usr)
  { cmake -S . -B build-host "${cmake_args[@]}" && ninja -C build-host "${targets[@]}"; } >"$work/build.log" 2>&1 ||
    { tail -n 30 "$work/build.log"; exit 1; }
  note "built"
fi

# The weight files (both dtypes at once) while the tests run.
note "writing the 1B checkpoints and GGUFs, running backend_test"
writers=()
for dtype in ${dtypes//,/ }; do
  tools/llama_cpp_peer/peer_bench.sh --tessera "$tessera" --dtypes "$dtype" --rounds 0 >/dev/null 2>"$work/files-$dtype.log" &
  writers+=($!)
done
"$backend_test" >"$out/backend_test.log" 2>&1
echo "backend_test rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$out/backend_test.log" | tr '\n' ' ')"
grep -E '^\[  SKIPPED|^\[  FAILED' "$out/backend_test.log" | sort -u
if [[ -n ${MODEL_TEST_BIN:-} ]]; then
  timeout "${MODEL_TEST_TIMEOUT:-90}" "$MODEL_TEST_BIN" --gtest_filter="${MODEL_TEST_FILTER:-*}" >"$out/model_test.log" 2>&1
  echo "model_test rc $?: $(grep -E '^\[  (PASSED|FAILED) ' "$out/model_test.log" | tr '\n' ' ')"
  grep -E '^\[  FAILED' "$out/model_test.log" | sort -u
fi
if [[ -n ${GEMM_BENCH_BIN:-} ]]; then
  # Each of the binaries in turn (a build before and one after, say), twice.
  for round in 1 2; do
    for bin in $GEMM_BENCH_BIN; do
      echo "gemm round $round: $bin"
      "$bin" --benchmark_filter='BM_Gemm/bf16' --benchmark_min_time=0.3 2>&1 | tee -a "$work/gemm.txt" |
        grep -E '^BM_Gemm'
    done
  done
fi
# By process id: a bare `wait` would also wait for the tee above, which never ends.
for pid in "${writers[@]}"; do wait "$pid" || { echo "writing weight files failed:"; tail -n 20 "$work"/files-*.log; }; done
[[ -z $builder ]] || wait "$builder" || { echo "llama-bench build failed:"; tail -n 30 "$work/llama-build.log"; }
note "files ready: $(ls "$LLAMA_PEER_DIR" | tr '\n' ' ')"

peer() {
  local t=$1
  note "peer at $t threads ($(left) s left)"
  tools/llama_cpp_peer/peer_bench.sh --tessera "$tessera" --threads "$t" --rounds "$rounds" \
    --dtypes "$dtypes" --decode "$decode" --deadline "$(left)" --results "$out/peer-t$t.tsv" >"$out/peer-t$t.md"
  cat "$out/peer-t$t.md"
}
big() {
  # About a minute at 16 threads (random weights, a 512-token prompt, 32 decode steps).
  if (($(left) < 75)); then
    echo "skipped past the deadline: 8B shape at $big_threads threads"
    return
  fi
  note "8B shape, bf16, $big_threads threads"
  "$tessera" bench --config bench/shapes/llama-3-8b.json --random-weights --seed 1 --dtype bf16 \
    --threads "$big_threads" --decode 32 >"$out/bench-8b.txt" 2>&1
  cat "$out/bench-8b.txt"
}

# What the thread pool's spin buys: decode with the workers sleeping at once between
# ops (TESSERA_SPIN_US=0), on the bf16 checkpoint, against the peer's tessera rows.
# Any other setting likewise (--variants).
variant() {
  local t=$1 setting=$2 ckpt=$LLAMA_PEER_DIR/ckpt-llama-3.2-1b-bf16-seed1
  (($(left) >= 40)) || { echo "skipped past the deadline: $setting at $t threads"; return; }
  note "tessera bf16 at $t threads with ${setting:-no setting}"
  env ${setting//,/ } "$tessera" bench --model "$ckpt" --threads "$t" --prompt 512 --decode "$decode" 2>&1 |
    grep -E "^(device|read bandwidth|f32 FMA|bf16 dot|amx bf16|prefill|matmul alone|decode)"
}

# tessera alone at one thread count: bf16 (or the first dtype), 32 decode steps.
alone() {
  local t=$1 dtype=bf16
  [[ ,$dtypes, == *,bf16,* ]] || dtype=${dtypes%%,*}
  (($(left) >= 30)) || { echo "skipped past the deadline: tessera alone at $t threads"; return; }
  note "tessera $dtype alone at $t threads"
  "$tessera" bench --model "$LLAMA_PEER_DIR/ckpt-llama-3.2-1b-$dtype-seed1" --threads "$t" --prompt 512 \
    --decode 32 >"$work/alone.txt" 2>&1
  { echo "## $t threads"; cat "$work/alone.txt"; } >>"$out/sweep.txt"
  grep -E "^(read bandwidth|f32 FMA|bf16 dot|amx bf16|prefill|matmul alone|decode)" "$work/alone.txt"
}

set -- $threads
peer "$1"
((no_spin)) && variant "$1" TESSERA_SPIN_US=0
if ((variant_rounds > 1)); then
  for ((round = 1; round <= variant_rounds; ++round)); do
    for v in default $variants; do
      echo "variant round $round: $v"
      variant "$1" "$([[ $v == default ]] || echo "$v")"
    done
  done
else
  for v in $variants; do variant "$1" "$v"; done
fi
shift
[[ -n $big_threads ]] && big
for t in "$@"; do peer "$t"; done
for t in $sweep; do alone "$t"; done
note "done, load $(cut -d' ' -f1-3 /proc/loadavg)"
