#!/usr/bin/env bash
# Why tessera's 16 threads fall behind on a many-core machine (issue 15, point 5; the GPU
# host's Xeon, whose device call is short): tessera alone, prebuilt binaries, nothing
# built and no llama.cpp, so that every second goes to measuring. In order, each step
# skipped (and listed) once it would end past --deadline seconds from the start:
#   1. the machine: CPU model, CPUs and their siblings, NUMA nodes, kernel, load;
#   2. a Llama-3.2-1B-shaped bf16 checkpoint (random weights, seed 1), written once;
#   3. the thread pool's hand-off (cpu_matmul_bench's BM_Handoff, 2-16 threads), for the
#      build before and after (the pool's layout is what changed between them);
#   4. at --threads (16): the build before, the build after, the build after with
#      TESSERA_BF16_DOT=0 (the f32 GEMM and decode tiles instead of AVX-512 BF16 dot
#      products), with TESSERA_SPIN_US=2000 (workers poll 2 ms before they sleep), and
#      with one thread fewer, each `tessera bench --model CKPT --prompt 512 --decode 64`;
#   5. the build after at --threads and the --sweep counts above 1 (`--prompt 256
#      --decode 32`, the same at every count, so the counts compare with each other), and
#      the build before at 2 threads;
#   6. rounds 2 to --rounds of step 4's builds and TESSERA_BF16_DOT=0, in another order;
#   7. the sweep at 1 thread, and the GEMM alone on one thread (cpu_matmul_bench's
#      BM_Gemm, f32 and bf16, and bf16 with TESSERA_BF16_DOT=0), against the FMA and bf16
#      dot-product loops.
#   tools/bench_cpu_diagnose.sh --bins DIR [--deadline 150] [--threads 16] [--rounds 2]
#     [--sweep "8 4 2 1"] [--out DIR]
# DIR (--bins) holds tessera-before, tessera-after, cpu_matmul_bench-before and
# cpu_matmul_bench-after, and lib/ with shared libraries the machine lacks (added to
# LD_LIBRARY_PATH, as .deps/ from .prev/deps.tar.xz when that is there). --out (default
# $OUT, else /tmp/bench-cpu-diagnose) gets log.txt (what is printed) and runs.txt (every
# bench run's whole output, headed by its label).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$SECONDS
bins="" deadline=150 threads=16 rounds=2 sweep="8 4 2 1" out=${OUT:-/tmp/bench-cpu-diagnose}
while (($#)); do
  case $1 in
    --bins) bins=$2 ;; --deadline) deadline=$2 ;; --threads) threads=$2 ;; --rounds) rounds=$2 ;;
    --sweep) sweep=$2 ;; --out) out=$2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
[[ -x $bins/tessera-before && -x $bins/tessera-after ]] || { echo "--bins DIR with tessera-before/-after" >&2; exit 2; }
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
left() { echo $((deadline - (SECONDS - start))); }
note() { echo "== t=$((SECONDS - start)) s: $*"; }

if [[ -f .prev/deps.tar.xz && ! -d .deps ]]; then tar -xJf .prev/deps.tar.xz; fi
libs=$bins/lib
[[ -d .deps/usr ]] && libs=$libs:$PWD/.deps/usr/lib/x86_64-linux-gnu
export LD_LIBRARY_PATH=$libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

note "machine"
grep -m1 'model name' /proc/cpuinfo
echo "cpus: nproc $(nproc), online $(cat /sys/devices/system/cpu/online 2>/dev/null)," \
  "siblings per core: $(sort -u /sys/devices/system/cpu/cpu*/topology/thread_siblings_list 2>/dev/null | head -4 | tr '\n' ' ')"
echo "numa nodes: $(ls -d /sys/devices/system/node/node* 2>/dev/null | wc -l);" \
  "$(grep -m1 -E '^(cpu MHz|siblings|cpu cores)' /proc/cpuinfo | tr '\n' ' ')"
grep -m1 -E '^siblings' /proc/cpuinfo
grep -m1 -E '^cpu cores' /proc/cpuinfo
echo "kernel $(uname -r), load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "flags: $(grep -m1 '^flags' /proc/cpuinfo | tr ' ' '\n' | grep -E '^(avx512|amx|ht$)' | tr '\n' ' ')"

ckpt=${CKPT:-/tmp/ckpt-llama-3.2-1b-bf16-seed1}
if [[ ! -f $ckpt/config.json ]]; then
  note "writing the 1B bf16 checkpoint"
  "$bins/tessera-after" random-checkpoint --config bench/shapes/llama-3.2-1b.json --seed 1 --dtype bf16 \
    --out "$ckpt" >/dev/null || exit 1
  cat "$ckpt"/*.safetensors >/dev/null
fi

# One bench run: label, binary, threads, prompt, decode, then VAR=VALUE settings.
bench() {
  local label=$1 bin=$2 t=$3 prompt=$4 decode=$5
  shift 5
  local text
  text=$(env "$@" "$bin" bench --model "$ckpt" --threads "$t" --prompt "$prompt" --decode "$decode" 2>&1)
  { echo "## $label: $t threads, --prompt $prompt --decode $decode $*"; echo "$text"; } >>"$out/runs.txt"
  echo "$label | $t threads | $* | $(echo "$text" | grep -E '^(read bandwidth|f32 FMA|bf16 dot peak|prefill|matmul alone|decode)' |
    sed -E 's/ +/ /g; s/\(1 GiB[^)]*\)//; s/\(AVX[^)]*\)//' | tr '\n' ';')"
}
# cpu_matmul_bench of one build with a filter, then VAR=VALUE settings.
micro() {
  local which=$1 filter=$2
  shift 2
  [[ -x $bins/cpu_matmul_bench-$which ]] || { echo "no cpu_matmul_bench-$which"; return; }
  echo "-- cpu_matmul_bench, build $which, $filter $*"
  timeout 20 env "$@" "$bins/cpu_matmul_bench-$which" --benchmark_filter="$filter" --benchmark_min_time=0.3 2>&1 |
    grep -E '^(BM_|Run on|CPU Caches|  L[123])'
}

if (($(left) > 10)); then
  note "thread pool hand-off, before then after"
  micro before Handoff
  micro after Handoff
fi

# One A/B run at --threads (16): a build, or the build after with a switch.
ab() {
  local r=$1 run=$2
  (($(left) > 20)) || { echo "skipped past the deadline: round $r $run"; return; }
  case $run in
    before) bench "round $r before" "$bins/tessera-before" "$threads" 512 64 ;;
    after) bench "round $r after" "$bins/tessera-after" "$threads" 512 64 ;;
    nodot) bench "round $r after, no dots" "$bins/tessera-after" "$threads" 512 64 TESSERA_BF16_DOT=0 ;;
    spin) bench "round $r after, 2 ms spin" "$bins/tessera-after" "$threads" 512 64 TESSERA_SPIN_US=2000 ;;
    fewer) bench "round $r after, one thread fewer" "$bins/tessera-after" $((threads - 1)) 512 64 ;;
  esac
}
sweep_at() {
  local t=$1
  (($(left) > 10 + 32 / t)) || { echo "skipped past the deadline: sweep at $t threads"; return; }
  bench "sweep" "$bins/tessera-after" "$t" 256 32
}

# Round 1 of every variant, the sweep down to 2 threads, round 2 of the builds (the
# other way round), then what is slowest and least needed: 1 thread and the GEMM alone.
note "at $threads threads, round 1"
for run in before after nodot spin fewer; do ab 1 "$run"; done
note "sweep"
for t in $threads $sweep; do
  ((t > 1)) && sweep_at "$t"
  # The build before at 2 threads too, where the dev VM's figures come from.
  ((t == 2 && $(left) > 25)) && bench "sweep, build before" "$bins/tessera-before" 2 256 32
done
for ((r = 2; r <= rounds; ++r)); do
  note "at $threads threads, round $r"
  for run in after before nodot; do ab "$r" "$run"; done
done
[[ " $sweep " == *" 1 "* ]] && sweep_at 1

if (($(left) > 10)); then
  note "the GEMM alone on one thread"
  micro after 'Gemm/(f32|bf16)'
  micro after 'Gemm/bf16' TESSERA_BF16_DOT=0
fi
note "done, load $(cut -d' ' -f1-3 /proc/loadavg)"
