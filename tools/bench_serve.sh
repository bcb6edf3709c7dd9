#!/usr/bin/env bash
# Starts `tessera serve` on a free port, waits for /health, measures TTFT,
# inter-token latency and tokens/s at concurrency 1, 8, 32 and 64
# (tools/bench_serve.py, Python's standard library: it runs on the GPU machine,
# which has no node), prints the table and stops the server.
#   tools/bench_serve.sh --model DIR [--device cpu|cuda] [--binary build/bin/tessera]
#                        [--concurrency 1,8,32,64] [--rounds 2] [--prompt-words 128] [--max-tokens 64]
#                        [-- more tessera serve options, e.g. --kv-memory 8GiB]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
model="" device=cpu binary="$root/build/bin/tessera" bench=() serve=()
while (($#)); do
  case "$1" in
    --model) model=$2; shift 2 ;;
    --device) device=$2; shift 2 ;;
    --binary) binary=$2; shift 2 ;;
    --concurrency | --rounds | --prompt-words | --max-tokens) bench+=("$1" "$2"); shift 2 ;;
    --) shift; serve=("$@"); break ;;
    *) echo "bench_serve.sh: unknown option $1" >&2; exit 2 ;;
  esac
done
[[ -n "$model" ]] || { echo "bench_serve.sh: --model DIR is required" >&2; exit 2; }
log=$(mktemp)
"$binary" serve --model "$model" --device "$device" --port 0 "${serve[@]}" 2>"$log" &
pid=$!
trap 'kill -TERM $pid 2>/dev/null; wait $pid 2>/dev/null; rm -f "$log"' EXIT
port=""
ready() { python3 -c 'import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=5)' "http://127.0.0.1:$port/health" 2>/dev/null; }
for _ in $(seq 600); do
  port=$(sed -n 's/.*listening on http:\/\/[^:]*:\([0-9]*\).*/\1/p' "$log")
  [[ -n "$port" ]] && ready && break
  kill -0 $pid 2>/dev/null || { cat "$log" >&2; exit 1; }
  sleep 1
done
ready || { echo "bench_serve.sh: the server is not ready" >&2; exit 1; }
echo "tessera serve --model $model --device $device ${serve[*]} (port $port); $(nproc) cores"
python3 "$root/tools/bench_serve.py" --base "http://127.0.0.1:$port" "${bench[@]}"
