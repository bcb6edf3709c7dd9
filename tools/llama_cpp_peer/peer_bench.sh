#!/usr/bin/env bash
# Runs tessera and llama.cpp's llama-bench (CPU) alternately on one machine, on the same
# random weight bytes, and prints a markdown table of every round and the ratios
# tessera / llama.cpp (issue 15, point 1). See README.md beside this file.
#
#   tools/llama_cpp_peer/peer_bench.sh [--config bench/shapes/llama-3.2-1b.json] [--threads 2]
#       [--rounds 3] [--dtypes bf16,f16] [--seed 1] [--prompt 512] [--decode 128]
#       [--tessera build-peer/bin/tessera] [--llama-reps 1] [--remove-after]
#       [--deadline SECONDS] [--results FILE]
#
# Per dtype: `tessera random-checkpoint` writes the weights once, tessera_to_gguf.py
# writes the same bytes as a GGUF (both reused by a later run with the same shape, seed
# and dtype). A quantized dtype (q8_0, q4_0, q4_k_m, q5_k_m, q6_k) is `tessera quantize`
# of the f16 GGUF (llama-quantize's bytes: GgufQuantize.WritesLlamaQuantizesFileByteForByte),
# and both engines read that one file. Then each round runs
#   tessera bench --model CKPT|GGUF --threads T --prompt P --decode D
#       (prefill of a P-token prompt, then D decode steps at context P..P+D)
#   llama-bench -m GGUF -t T -p P -n 0            (prefill of P tokens)
#   llama-bench -m GGUF -t T -p 0 -n D -d P       (D decode steps after a P-token context)
# tessera first in odd rounds, llama.cpp first in even ones. Before each run the engine's
# weight file is read once, so neither reads the disk while timed. Each row notes the 1-minute
# load average when its run started (the machine's own threads count in it). Progress
# goes to stderr; stdout is only the markdown.
# --deadline S: a run (one engine, dtype and round) that would end more than S seconds
# after the script started, judged by how long that engine's last run took, is skipped
# and listed (an engine's first run starts if S is not yet past), so a time-limited machine returns
# what it measured. --results FILE keeps the rows there (appended as they come), so an
# outer time limit that kills the script loses only the run in progress.
# LLAMA_BENCH=FILE: a llama-bench built elsewhere (say, for the target's instruction set
# on a faster machine, when the target's time is short), run instead of building one; the
# source (LLAMA_CPP_SRC) is then read only for gguf-py.
set -euo pipefail

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
export LLAMA_PEER_DIR=${LLAMA_PEER_DIR:-$repo/.cache/llama-peer}
work=$LLAMA_PEER_DIR

config=$repo/bench/shapes/llama-3.2-1b.json
threads=2
rounds=3
dtypes=bf16,f16
seed=1
prompt=512
decode=128
reps=1
remove_after=0
deadline=0
results=
tessera=${TESSERA:-}

usage() { sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//' >&2; exit "${1:-2}"; }
while [[ $# -gt 0 ]]; do
  case $1 in
    --config) config=$2; shift 2 ;;
    --threads) threads=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    --dtypes) dtypes=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --prompt) prompt=$2; shift 2 ;;
    --decode) decode=$2; shift 2 ;;
    --tessera) tessera=$2; shift 2 ;;
    --llama-reps) reps=$2; shift 2 ;;
    --remove-after) remove_after=1; shift ;;
    --deadline) deadline=$2; shift 2 ;;
    --results) results=$2; shift 2 ;;
    -h|--help) usage 0 ;;
    *) echo "[peer] unknown option $1" >&2; usage ;;
  esac
done

log() { echo "[peer] $*" >&2; }

if [[ -z $tessera ]]; then
  for candidate in "$repo/build-peer/bin/tessera" "$repo/build/bin/tessera"; do
    [[ -x $candidate ]] && { tessera=$candidate; break; }
  done
fi
[[ -x ${tessera:-} ]] || { log "no tessera binary: build one (see README.md) or pass --tessera"; exit 1; }
[[ -f $config ]] || { log "no shape config $config"; exit 1; }

# A Python with numpy for the converter (Debian's python3-numpy lives under /usr/bin/python3).
python=${PYTHON:-}
if [[ -z $python ]]; then
  for candidate in python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import numpy' 2>/dev/null; then
      python=$candidate
      break
    fi
  done
fi
[[ -n $python ]] || { log "no python3 with numpy (Debian: apt-get install python3-numpy; or set PYTHON)"; exit 1; }

# llama-bench is built (or found) before its first run only, so --rounds 0 (files only)
# needs no build.
llama_bench=${LLAMA_BENCH:-}
src=${LLAMA_CPP_SRC:-$work/llama.cpp}
source_note() { cat "$src/PEER_SOURCE" 2>/dev/null || git -C "$src" rev-parse --short=12 HEAD 2>/dev/null || echo "$src"; }

shape=$(basename "$config" .json)
if [[ -z $results ]]; then
  results=$(mktemp)
  trap 'rm -f "$results"' EXIT
fi
touch "$results"

# Seconds each engine and dtype took last (for the deadline); runs skipped past it.
declare -A took=()
skipped=()
# Runs `$@` (run_tessera or run_llama, round, dtype, file) unless it would end past the
# deadline; what it took is the estimate for the next run of that engine (either dtype).
timed_run() {
  local key=$1 begin=$SECONDS engine=tessera
  [[ $1 == run_llama ]] && engine=llama.cpp
  if ((deadline > 0 && SECONDS + ${took[$key]:-0} > deadline)); then
    skipped+=("round $2 $engine $3;")
    log "skipped past the ${deadline} s deadline: round $2 $engine $3"
    return
  fi
  "$@"
  took[$key]=$((SECONDS - begin))
}

# Appends "round<TAB>engine<TAB>dtype<TAB>test<TAB>tok/s<TAB>note" rows to $results.
run_tessera() {
  local round=$1 dtype=$2 ckpt=$3 out load
  # in the page cache, as llama-bench's warm-up leaves its file
  if [[ -d $ckpt ]]; then cat "$ckpt/model.safetensors" >/dev/null; else cat "$ckpt" >/dev/null; fi
  load=$(cut -d' ' -f1 /proc/loadavg)
  log "round $round: tessera $dtype"
  out=$("$tessera" bench --model "$ckpt" --threads "$threads" --prompt "$prompt" --decode "$decode")
  local pp tg bandwidth share
  pp=$(awk '$1 == "prefill" && $3 == "tok/s" { print $2 }' <<<"$out")
  tg=$(awk '$1 == "decode" && $3 == "tok/s" { print $2 }' <<<"$out")
  bandwidth=$(awk '$1 == "read" && $2 == "bandwidth" { print $3 " " $4 }' <<<"$out")
  share=$(awk '$1 == "decode" && $2 == "bytes/s" { print $3 " " $4 " = " $6 }' <<<"$out")
  local matmuls
  matmuls=$(awk '$1 == "decode" && $2 == "matmuls" { print $3 " " $4 " = " $6 }' <<<"$out")
  [[ -n $pp && -n $tg ]] || { log "cannot read tessera bench's output:"; echo "$out" >&2; exit 1; }
  # The limits and shares bench measured beside the figures (to stderr, the progress log).
  { grep -E '^(device|f32 FMA peak|bf16 dot peak|amx bf16 peak|prefill|matmul alone|decode matmuls) ' <<<"$out" || true; } | sed 's/^/[peer]   /' >&2
  printf '%s\ttessera\t%s\tpp%s\t%s\tload %s\n' "$round" "$dtype" "$prompt" "$pp" "$load" >>"$results"
  printf '%s\ttessera\t%s\ttg%s @ d%s\t%s\tweights at %s of %s read bandwidth%s\n' \
    "$round" "$dtype" "$decode" "$prompt" "$tg" "$share" "$bandwidth" \
    "${matmuls:+; the matmuls alone at $matmuls}" >>"$results"
}

llama_log=$work/llama-bench.log
run_llama_bench() {  # prints avg tokens/s of one llama-bench run; its log goes to $llama_log
  local json
  [[ -n $llama_bench ]] || llama_bench=$("$here/build_llama_bench.sh")
  if ! json=$("$llama_bench" "$@" -t "$threads" -r "$reps" -o json 2>>"$llama_log"); then
    log "llama-bench $* failed; the end of $llama_log:"
    tail -n 20 "$llama_log" >&2
    exit 1
  fi
  "$python" -c 'import json, sys; print("%.2f" % json.loads(sys.argv[1])[0]["avg_ts"])' "$json"
}

run_llama() {
  local round=$1 dtype=$2 gguf=$3 pp tg pp_load tg_load
  log "round $round: llama.cpp $dtype"
  cat "$gguf" >/dev/null
  pp_load=$(cut -d' ' -f1 /proc/loadavg)
  pp=$(run_llama_bench -m "$gguf" -p "$prompt" -n 0)
  tg_load=$(cut -d' ' -f1 /proc/loadavg)
  tg=$(run_llama_bench -m "$gguf" -p 0 -n "$decode" -d "$prompt")
  printf '%s\tllama.cpp\t%s\tpp%s\t%s\tload %s\n' "$round" "$dtype" "$prompt" "$pp" "$pp_load" >>"$results"
  printf '%s\tllama.cpp\t%s\ttg%s @ d%s\t%s\tload %s\n' "$round" "$dtype" "$decode" "$prompt" "$tg" "$tg_load" >>"$results"
}

load_before=$(cut -d' ' -f1-3 /proc/loadavg)
IFS=, read -r -a dtype_list <<<"$dtypes"
for dtype in "${dtype_list[@]}"; do
  quant=
  case $dtype in
    q8_0 | q4_0 | q4_k_m | q5_k_m | q6_k) quant=$dtype dtype=f16 ;;
  esac
  ckpt=$work/ckpt-$shape-$dtype-seed$seed
  gguf=$work/$shape-$dtype-seed$seed.gguf
  if [[ ! -f $ckpt/model.safetensors ]]; then
    log "writing $ckpt"
    rm -rf "$ckpt.tmp"
    "$tessera" random-checkpoint --config "$config" --seed "$seed" --dtype "$dtype" --out "$ckpt.tmp" >&2
    mv "$ckpt.tmp" "$ckpt"
  fi
  if [[ ! -f $gguf || $gguf -ot $ckpt/model.safetensors ]]; then
    log "writing $gguf"
    PYTHONPATH=$src/gguf-py${PYTHONPATH:+:$PYTHONPATH} "$python" "$here/tessera_to_gguf.py" "$ckpt" "$gguf.tmp"
    mv "$gguf.tmp" "$gguf"
  fi
  if [[ -n $quant ]]; then
    quantized=$work/$shape-$quant-seed$seed.gguf
    if [[ ! -f $quantized || $quantized -ot $gguf ]]; then
      log "writing $quantized"
      "$tessera" quantize --model "$gguf" --type "$quant" --threads "$(nproc)" --out "$quantized.tmp" >&2
      mv "$quantized.tmp" "$quantized"
    fi
    ckpt=$quantized gguf=$quantized dtype=$quant
  fi
  for ((round = 1; round <= rounds; ++round)); do
    if ((round % 2 == 1)); then
      timed_run run_tessera "$round" "$dtype" "$ckpt"
      timed_run run_llama "$round" "$dtype" "$gguf"
    else
      timed_run run_llama "$round" "$dtype" "$gguf"
      timed_run run_tessera "$round" "$dtype" "$ckpt"
    fi
  done
  if ((remove_after)); then
    rm -rf "$ckpt" "$gguf"
  fi
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

cpu=$(awk -F': ' '/^model name/ { print $2; exit }' /proc/cpuinfo)
isa=AVX2
grep -qw avx512f /proc/cpuinfo && isa=AVX-512
tessera_commit=$(git -C "$repo" rev-parse --short HEAD 2>/dev/null || echo unknown)
[[ -n $(git -C "$repo" status --porcelain --untracked-files=no 2>/dev/null) ]] && tessera_commit+=" (modified)"

"$python" "$here/report.py" "$results" <<EOF
date: $(date -u +%Y-%m-%d)
machine: $cpu ($isa), $(nproc) cores; load average before $load_before, after $load_after
shape: $shape, $threads threads, $rounds rounds, llama-bench -r $reps
tessera: ${tessera#"$repo"/}, checkout at $tessera_commit (the binary may be older: rebuild it first)
llama.cpp: $(source_note), CPU backend, ${LLAMA_BENCH:+built elsewhere: $LLAMA_BENCH, }${LLAMA_BENCH_BUILD:-GGML_NATIVE}
command: tools/llama_cpp_peer/peer_bench.sh --config ${config#"$repo"/} --threads $threads --rounds $rounds --dtypes $dtypes --seed $seed --prompt $prompt --decode $decode$( ((deadline > 0)) && echo " --deadline $deadline")
skipped: ${skipped[*]:-none}
EOF
