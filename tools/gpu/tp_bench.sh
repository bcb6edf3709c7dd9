#!/usr/bin/env bash
# Issue 20, point 5, on the GPU host in one time-limited call: tensor-parallel
# decode on the Llama-3-8B shape (random bf16 weights written once by
# random-checkpoint) on its 16-core Xeon, then a GPU rank pair on its one H200.
#   1. tessera bench-tp --model CKPT --ranks 2 --threads 8: one process x 16
#      threads, 2 ranks x 8 plain, 2 ranks x 8 sealed (rounds alternate them);
#      the per-token split (compute / collective; sealing = sealed collective -
#      plain collective) is bench-tp's.
#   2. the same at --ranks 4 --threads 4.
#   3. with a GPU: two processes on cuda:0 (tessera rank, and generate --tp as
#      rank 0), host-staged over TCP on loopback, plain then sealed, against one
#      process (generate --device cuda): decode tok/s and the greedy tokens.
# Whatever would start past --deadline seconds (from the start) is skipped and
# listed. Runs TESSERA_BIN, else builds tessera (with CUDA when nvcc and a GPU
# are there) into build-tp-bench/; libraries the machine lacks come from
# .prev/deps.tar.xz (tools/gpu/make_deps.sh). --pair-device cpu runs step 3 on
# the CPU (to try the script on a machine without a GPU; default: cuda when
# there is one, else none).
# Everything printed goes to DIR/log.txt (default $OUT, else /tmp/tp-bench).
#   tools/gpu/tp_bench.sh [--config bench/shapes/llama-3-8b.json] [--cores 16] [--decode 16]
#     [--rounds 1] [--gpu-tokens 64] [--deadline 190] [--ckpt /tmp/ckpt8b] [--pair-device cpu]
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
start=$SECONDS
config=bench/shapes/llama-3-8b.json cores=$(nproc) decode=16 rounds=1 gpu_tokens=64 deadline=190 ckpt=/tmp/ckpt8b
pair_device=""
while (($#)); do
  case $1 in
    --config) config=$2 ;; --cores) cores=$2 ;; --decode) decode=$2 ;; --rounds) rounds=$2 ;;
    --gpu-tokens) gpu_tokens=$2 ;; --deadline) deadline=$2 ;; --ckpt) ckpt=$2 ;; --pair-device) pair_device=$2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
out=${OUT:-/tmp/tp-bench}
mkdir -p "$out"
exec > >(tee -a "$out/log.txt") 2>&1
left() { echo $((deadline - (SECONDS - start))); }
note() { echo "== t=$((SECONDS - start)) s: $*"; }
# Runs "$@" if `need` seconds are left, bounded by what is left.
bounded() {
  local need=$1 what=$2
  shift 2
  if (($(left) < need)); then
    echo "skipped past the deadline: $what"
    return 1
  fi
  note "$what"
  timeout "$(left)" "$@"
}

note "$(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2), $(nproc) cpus, load $(cut -d' ' -f1-3 /proc/loadavg)"
if [[ -f .prev/deps.tar.xz && ! -d .deps ]]; then tar -xJf .prev/deps.tar.xz; fi
cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release)
if [[ -d .deps/usr ]]; then
  export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig
  export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
  cmake_args+=(-DCMAKE_PREFIX_PATH=$PWD/.deps/usr)
fi
gpu=0
if command -v nvcc >/dev/null && nvidia-smi >/dev/null 2>&1; then gpu=1; fi
[[ -z $pair_device && $gpu == 1 ]] && pair_device=cuda
cmake_args+=(-DTESSERA_CUDA=$([[ $gpu == 1 ]] && echo ON || echo OFF))
bin=${TESSERA_BIN:-$PWD/build-tp-bench/bin/tessera}
if ! "$bin" --help >/dev/null 2>&1; then
  note "building tessera (CUDA $gpu)"
  { cmake -S . -B build-tp-bench "${cmake_args[@]}" && ninja -C build-tp-bench tessera; } >/tmp/tp-bench-build.log 2>&1 ||
    { tail -n 40 /tmp/tp-bench-build.log; exit 1; }
  note "built"
fi
if [[ ! -f $ckpt/model.safetensors ]]; then
  bounded 30 "writing $config as $ckpt (bf16, seed 1)" \
    "$bin" random-checkpoint --config "$config" --seed 1 --dtype bf16 --out "$ckpt" || exit 1
fi

for ranks in 2 4; do
  threads=$((cores / ranks))
  ((threads >= 1)) || continue
  bounded 20 "bench-tp: $ranks ranks x $threads threads against 1 x $((ranks * threads))" \
    "$bin" bench-tp --model "$ckpt" --ranks $ranks --threads $threads --decode "$decode" --rounds "$rounds"
done

if [[ -n $pair_device ]]; then
  [[ $pair_device == cuda ]] && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  cluster=/tmp/tp-bench-cluster
  rm -f /tmp/tp-bench-gpu-*.txt
  rm -rf $cluster && "$bin" local-cluster --out $cluster --nodes rank0,rank1 >/dev/null || exit 1
  prompt=$(seq -s, 1 16)
  generate=("$bin" generate --model "$ckpt" --device "$pair_device" --kv-memory 4GiB --prompt-ids "$prompt"
    -n "$gpu_tokens")
  for mode in plain sealed; do
    flags=()
    [[ $mode == plain ]] && flags=(--plain)
    (($(left) >= 25)) || { echo "skipped past the deadline: rank pair, $mode"; continue; }
    timeout "$(left)" "$bin" rank --model "$ckpt" --device "$pair_device" --members rank0,rank1 --identity $cluster/rank1 \
      --trust $cluster/trust.json --sessions 1 --group-timeout 120 "${flags[@]}" >/tmp/tp-bench-rank1.log 2>&1 &
    rank=$!
    bounded 25 "rank pair on $pair_device, $mode: generate --tp as rank 0 beside tessera rank" \
      "${generate[@]}" --tp rank0,rank1 --identity $cluster/rank0 --trust $cluster/trust.json --group-timeout 120 \
      "${flags[@]}" 2>&1 | tee "/tmp/tp-bench-gpu-$mode.txt"
    # The rank ends after its one session; one whose group never formed is stopped.
    for _ in $(seq 50); do kill -0 $rank 2>/dev/null && sleep 0.2; done
    kill $rank 2>/dev/null
    wait $rank
    echo "rank exit $?; its log: $(grep -v '^$' /tmp/tp-bench-rank1.log | tail -n 3 | tr '\n' ' ')"
  done
  bounded 20 "one process on $pair_device" "${generate[@]}" 2>&1 | tee /tmp/tp-bench-gpu-one.txt
  for mode in plain sealed; do
    [[ -f /tmp/tp-bench-gpu-$mode.txt ]] || continue
    # The ids line (stdout) of each.
    if diff <(grep -xE '[0-9,]+' /tmp/tp-bench-gpu-one.txt) <(grep -xE '[0-9,]+' "/tmp/tp-bench-gpu-$mode.txt") \
      >/dev/null; then
      echo "rank pair $mode: the same greedy tokens as one process"
    else
      echo "rank pair $mode: greedy tokens differ from one process's"
    fi
  done
fi
note "done, load $(cut -d' ' -f1-3 /proc/loadavg)"
