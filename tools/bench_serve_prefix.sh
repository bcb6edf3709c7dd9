#!/bin/bash
# Time to first token of a long prompt over a 2-stage pipeline (tessera serve --pipeline), cold and then with its
# prefix from the stages' prefix caches (docs/serving.md). Each round starts its prompt with its own words, so the
# cold request finds nothing; the warm one is the same prompt and a few words more. Two `tessera stage` processes
# (layers [0, 2) and [2, 4), 1 thread, 256 MiB of KV each) and the server run on this host.
#   tools/bench_serve_prefix.sh --binary build/bin/tessera --model models/tessera-tiny [--rounds 3] [--chars 5000]
set -euo pipefail
BIN=build/bin/tessera MODEL=models/tessera-tiny ROUNDS=3 CHARS=5000
while [ $# -gt 0 ]; do
  case "$1" in
    --binary) BIN=$2; shift 2 ;;
    --model) MODEL=$(realpath "$2"); shift 2 ;;
    --rounds) ROUNDS=$2; shift 2 ;;
    --chars) CHARS=$2; shift 2 ;;
    *) echo "unknown option $1" >&2; exit 2 ;;
  esac
done
D=$(mktemp -d)
"$BIN" local-cluster --out "$D" --nodes coordinator,stage0,stage1 > "$D/nodes.txt"
address() { awk -v n="$1" '$1 == n {print $2}' "$D/nodes.txt"; }
cat > "$D/stages.json" <<J
{"stages": [{"name": "stage0", "model": "$MODEL", "layers": [0, 2]}, {"name": "stage1", "model": "$MODEL", "layers": [2, 4]}]}
J
pids=()
trap 'kill "${pids[@]}" 2> /dev/null; wait 2> /dev/null; rm -rf "$D"' EXIT
for s in stage0 stage1; do
  "$BIN" stage --listen "$(address $s)" --identity "$D/$s" --trust "$D/trust.json" --threads 1 --kv-memory 256MiB \
    2> "$D/$s.log" &
  pids+=($!)
done
"$BIN" serve --model "$MODEL" --pipeline "$D/stages.json" --identity "$D/coordinator" --trust "$D/trust.json" \
  --port 0 2> "$D/serve.log" &
pids+=($!)
PORT=
for _ in $(seq 1 240); do
  PORT=$(sed -n 's|.*listening on http://[^:]*:\([0-9]*\).*|\1|p' "$D/serve.log")
  [ -n "$PORT" ] && curl -sf "localhost:$PORT/health" > /dev/null && break
  sleep 0.5
done
python3 - "$PORT" "$ROUNDS" "$CHARS" <<'P'
import json, sys, time, urllib.request
port, rounds, chars = (int(a) for a in sys.argv[1:4])
text = open('/usr/share/common-licenses/GPL-3').read()[:chars]
def first_token(prompt):
    body = json.dumps({"prompt": prompt, "max_tokens": 1}).encode()
    start = time.time()
    request = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
    tokens = json.load(urllib.request.urlopen(request))["usage"]["prompt_tokens"]
    return time.time() - start, tokens
for k in range(rounds):
    prompt = f"Round {k}. " + text
    cold, n = first_token(prompt)
    warm, _ = first_token(prompt + " And then?")
    print(f"round {k}: {n} prompt tokens: cold {cold * 1000:.0f} ms, warm {warm * 1000:.0f} ms ({cold / warm:.1f}x)")
metrics = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
print("\n".join(l for l in metrics.splitlines() if l.startswith("tessera:prefix_cache")))
P
