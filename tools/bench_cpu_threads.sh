#!/usr/bin/env bash
# CPU speed at several thread counts, an older build against the working tree (issue 15,
# point 5). Builds tessera at OLD (a commit) and from the working tree, then runs
# `tessera bench` with each, taking turns within every round so load drift on a shared
# host falls on both alike: the 8B shape at the --big-threads counts, then the 1B shape
# for every dtype and thread count, in the order given. Runs that would start after --deadline seconds
# (counted from the start, builds included) are skipped and listed, so a run on a
# time-limited machine always comes back with what it measured.
#   tools/bench_cpu_threads.sh --old COMMIT [--threads "1 2 4 8 16"] [--dtypes "bf16 f16"]
#     [--rounds 1] [--decode 32] [--big-threads "16"] [--big-dtypes "bf16"] [--deadline 0]
#     [--out DIR] [--jobs N] [--test]
# --test also builds backend_test from the working tree and runs it before the benches
# (the kernels' tests on this machine's instruction set).
# OLD_BIN / NEW_BIN (paths to tessera binaries) skip the builds; OLD_TAR (an .tar.xz of
# `git archive OLD CMakeLists.txt src bench`) stands in for git where the tree has none. On the GPU host the
# libraries it lacks come from .prev/deps.tar.xz (unpacked into .deps/ once).
# Writes DIR/runs.log (every bench line) and DIR/summary.tsv (one row a run).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
start=$SECONDS
old="" threads="1 2 4 8 16" dtypes="bf16 f16" rounds=1 decode=32 big_threads="16" big_dtypes="bf16" deadline=0 test=0
out=${OUT:-/tmp/bench-cpu-threads} jobs=$(nproc)
while (($#)); do
  case $1 in
    --old) old=$2 ;; --threads) threads=$2 ;; --dtypes) dtypes=$2 ;; --rounds) rounds=$2 ;;
    --decode) decode=$2 ;; --big-threads) big_threads=$2 ;; --big-dtypes) big_dtypes=$2 ;;
    --deadline) deadline=$2 ;; --out) out=$2 ;; --jobs) jobs=$2 ;;
    --test) test=1; shift; continue ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
  shift 2
done
mkdir -p "$out"
log=$out/runs.log summary=$out/summary.tsv
: >"$log"

if [[ -z ${OLD_BIN:-} || -z ${NEW_BIN:-} ]]; then
  [[ -n $old ]] || { echo "--old COMMIT is needed unless OLD_BIN and NEW_BIN are set" >&2; exit 2; }
  if [[ -f .prev/deps.tar.xz ]]; then
    [[ -d .deps ]] || tar -xJf .prev/deps.tar.xz
  fi
  cmake_args=(-G Ninja -DCMAKE_BUILD_TYPE=Release -DTESSERA_TESTS=OFF -DTESSERA_CUDA=OFF)
  if [[ -d .deps/usr ]]; then
    export PKG_CONFIG_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu/pkgconfig
    export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu
    cmake_args+=(-DCMAKE_PREFIX_PATH=$PWD/.deps/usr)
  fi
  work=${WORK:-/tmp/bench-cpu-threads-build}
  if [[ ! -d $work/old-src ]]; then
    mkdir -p "$work/old-src"
    # OLD_TAR: the same files as an archive, for a copy of the tree without git history.
    git archive "$old" CMakeLists.txt src bench | tar -x -C "$work/old-src" ||
      { [[ -n ${OLD_TAR:-} ]] && tar -xJf "$OLD_TAR" -C "$work/old-src"; } || exit 1
  fi
  half=$(((jobs + 1) / 2)) new_targets=(tessera) new_args=()
  ((test)) && new_targets+=(backend_test) new_args=(-DTESSERA_TESTS=ON)
  (cmake -S "$work/old-src" -B "$work/old" "${cmake_args[@]}" && ninja -C "$work/old" -j"$half" tessera) \
    >"$out/build-old.log" 2>&1 &
  (cmake -S . -B "$work/new" "${cmake_args[@]}" "${new_args[@]}" && ninja -C "$work/new" -j"$half" "${new_targets[@]}") \
    >"$out/build-new.log" 2>&1 &
  wait
  tail -n 2 "$out/build-old.log" "$out/build-new.log"
  OLD_BIN=$work/old/bin/tessera NEW_BIN=$work/new/bin/tessera
  if ((test)); then
    "$work/new/bin/backend_test" >"$out/backend_test.log" 2>&1
    echo "backend_test rc $?: $(grep -E "PASSED|FAILED" "$out/backend_test.log" | tr '\n' ' ')"
  fi
fi
[[ -x $OLD_BIN && -x $NEW_BIN ]] || { echo "missing binaries: $OLD_BIN $NEW_BIN" >&2; exit 1; }

{
  echo "date $(date -u +%FT%TZ); old $old ($OLD_BIN); new: the working tree of $(git rev-parse --short HEAD 2>/dev/null)"
  grep -m1 "model name" /proc/cpuinfo
  echo "cpus $(nproc); load $(cut -d' ' -f1-3 /proc/loadavg); builds took $((SECONDS - start)) s"
} | tee -a "$log"
printf "shape\tthreads\tdtype\tround\tbuild\tbandwidth_gbs\tprefill_tps\tdecode_tps\tdecode_pct_bw\tfma_gflops\tprefill_pct_fma\tmatmul_pct_fma\n" \
  >"$summary"

skipped=()
# One bench run; appends its lines to the log and a row to the summary.
run() {
  local shape=$1 t=$2 dtype=$3 round=$4 build=$5 bin
  if ((deadline > 0 && SECONDS - start > deadline)); then
    skipped+=("$shape/$t/$dtype/$round/$build")
    return
  fi
  [[ $build == old ]] && bin=$OLD_BIN || bin=$NEW_BIN
  echo "== $shape threads $t dtype $dtype round $round build $build (load $(cut -d' ' -f1 /proc/loadavg), t=$((SECONDS - start)) s)" |
    tee -a "$log"
  local text
  text=$("$bin" bench --config "bench/shapes/$shape.json" --random-weights --seed 1 --dtype "$dtype" \
    --threads "$t" --decode "$decode" 2>&1)
  echo "$text" | grep -E "device|read bandwidth|FMA peak|prefill|matmul alone|decode|kv cache|error" | tee -a "$log"
  awk -v shape="$shape" -v t="$t" -v dtype="$dtype" -v round="$round" -v build="$build" '
    /^read bandwidth/ { bw = $3 }
    /^f32 FMA peak/   { fma = $4 }
    /^prefill/        { tps = $2; for (i = 1; i <= NF; ++i) if ($i == "FMA" && $(i - 1) == "of") pf = $(i - 2) }
    /^matmul alone/   { for (i = 1; i <= NF; ++i) if ($i == "FMA") { mm = $(i - 2); break } }
    /^decode  /       { dec = $2 }
    /^decode bytes/   { pct = $6 }
    END { printf "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", shape, t, dtype, round, build, bw, tps, dec, pct,
          (fma == "" ? "-" : fma), (pf == "" ? "-" : pf), (mm == "" ? "-" : mm) }' <<<"$text" >>"$summary"
}

# The 8B shape first: it is the one a deadline must not drop.
for t in $big_threads; do
  for dtype in $big_dtypes; do
    for b in old new; do run llama-3-8b "$t" "$dtype" 1 "$b"; done
  done
done
for t in $threads; do
  for dtype in $dtypes; do
    for ((r = 1; r <= rounds; ++r)); do
      # Alternate which build goes first, so neither always runs on a warmer machine.
      if ((r % 2)); then order="old new"; else order="new old"; fi
      for b in $order; do run llama-3.2-1b "$t" "$dtype" "$r" "$b"; done
    done
  done
done

echo "== summary ($summary)"
column -t -s $'\t' "$summary" 2>/dev/null || cat "$summary"
((${#skipped[@]} == 0)) || echo "skipped past the ${deadline} s deadline: ${skipped[*]}"
echo "total $((SECONDS - start)) s"
