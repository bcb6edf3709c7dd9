#!/usr/bin/env bash
# check.sh's `serve` step (issue 17 point 10): tessera serve on the 8B shape
# (seeded random bf16 weights and Llama 3's tokenizer) at concurrency 1, 8, 32
# and 64 (tools/bench_serve.sh: TTFT, ITL, total and steady-decode tokens/s, and
# what the inference thread did, from /metrics), then `tessera generate` alone on
# the same prompt for the single-stream comparison, and `tessera bench
# --sequences 64` (the engine alone decoding as many sequences together) for the
# many-stream one. Builds nothing; logs under $OUT; at most 200 s once the
# checkpoint exists (making it first, if check.sh's peer step has not, takes longer).
#   OUT=... tools/gpu/serve_bench.sh
# Elsewhere (the dev VM): SERVE_DEVICE=cpu SERVE_MODEL=models/tessera-tiny
#   SERVE_BINARY=build-serve/bin/tessera SERVE_ARGS="--threads 2" SERVE_BENCH_ARGS="--threads 2" tools/gpu/serve_bench.sh
# SERVE_SHAPE (bench/shapes/*.json, a Llama 3 vocabulary), SERVE_CONCURRENCY and
# SERVE_TOKENS (default 256) change the run; SERVE_ARGS: more `tessera serve` flags; SERVE_BENCH_ARGS: more
# `tessera bench` flags; SERVE_TOKENIZER: a directory holding
# Llama 3's tokenizer.json and tokenizer_config.json for the random checkpoint
# (default .prev/tokenizer-llama3: copied there from the test material, which
# scripts/fetch_test_material.sh caches under ~/.cache/tessera-test-material).
set -uo pipefail
OUT=${OUT:-/tmp/gpu-check}
mkdir -p "$OUT"
device=${SERVE_DEVICE:-cuda}
binary=${SERVE_BINARY:-build-gpu/bin/tessera}
model=${SERVE_MODEL:-}
shape=${SERVE_SHAPE:-llama-3-8b} levels=${SERVE_CONCURRENCY:-1,8,32,64} tokens=${SERVE_TOKENS:-256} words=128
if [ -z "$model" ]; then
  ckpt=/tmp/ckpt-$shape  # check.sh's peer step makes the same one (seed 1, bf16)
  [ -d $ckpt ] || "$binary" random-checkpoint --config bench/shapes/$shape.json --seed 1 --dtype bf16 \
    --out $ckpt >"$OUT/serve-ckpt.log" 2>&1 || { tail -5 "$OUT/serve-ckpt.log"; exit 1; }
  # The served model: the checkpoint's files beside Llama 3's tokenizer (its vocabulary is the shape's 128256).
  tokenizer=${SERVE_TOKENIZER:-.prev/tokenizer-llama3}
  [ -f "$tokenizer/tokenizer.json" ] || { echo "serve: no $tokenizer/tokenizer.json (Llama 3's; see the header)"; exit 1; }
  model=/tmp/serve-$shape
  mkdir -p $model
  ln -sf $ckpt/config.json $ckpt/model.safetensors $model/
  cp "$tokenizer"/tokenizer.json "$tokenizer"/tokenizer_config.json $model/
fi
# The prompt bench_serve.py sends (its first request's), for generate.
prompt=$(python3 -c "import sys; sys.path.insert(0, 'tools'); import bench_serve; print(bench_serve.prompt(0, $words))")
timeout 110 tools/bench_serve.sh --model "$model" --device "$device" --binary "$binary" --concurrency $levels \
  --rounds 1 --prompt-words $words --max-tokens $tokens -- ${SERVE_ARGS:-} 2>&1 | tee "$OUT/serve-bench.log"
echo "serve bench rc ${PIPESTATUS[0]}"
timeout 40 "$binary" generate --model "$model" --device "$device" --prompt "$prompt" -n $tokens \
  >"$OUT/serve-generate.out" 2>"$OUT/serve-generate.log"
echo "generate rc $?: $(grep '^\[generate\]' "$OUT/serve-generate.log")"
# The engine alone: as many sequences as the most streams, prompts of the bench's length, decoded together
# (tessera bench --sequences: Forward::step_greedy, no scheduler, no server).
most=${levels##*,}
prompt_tokens=$(grep -o 'prompt [0-9]* tokens' "$OUT/serve-generate.log" | grep -o '[0-9]*')
timeout 90 "$binary" bench --device "$device" --model "$model" ${SERVE_BENCH_ARGS:-} --prompt ${prompt_tokens:-133} \
  --decode $tokens --sequences $most >"$OUT/serve-engine.log" 2>&1
echo "engine rc $?: $(grep '^decode x' "$OUT/serve-engine.log")"
# Single stream: serve's ITL p50 (concurrency 1) against generate's decode tok/s. Many streams: the total
# (prompts included) and the decode's steady state (every stream decoding) against the single stream's.
python3 - "$OUT/serve-bench.log" "$OUT/serve-generate.log" "$OUT/serve-engine.log" <<'PY'
import re, sys
lines = open(sys.argv[1]).read().split("\n\n")[0].splitlines()  # the first table; the second is /metrics'
rows = {int(l.split("|")[1]): l.split("|") for l in lines if re.match(r"\| \d+ \| \d+ \|", l)}
gen = re.search(r"; (\d+) tokens at ([\d.]+) tok/s \(", open(sys.argv[2]).read())  # the decode, not the prompt
engine = re.search(r"^decode x\s*(\d+)\s+([\d.]+) tok/s", open(sys.argv[3]).read(), re.M)
if 1 in rows and gen:
    itl = float(rows[1][5])  # 0 when the client reads chunks in bursts (a tiny model): then the decode window's
    serve, alone = 1000 / itl if itl > 0 else float(rows[1][9]), float(gen.group(2))
    print(f"single stream: serve {serve:.1f} tok/s (ITL p50 {itl} ms; decode window {rows[1][9].strip()} tok/s), "
          f"generate {alone:.1f} tok/s ({gen.group(1)} tokens): serve is {100 * (serve / alone - 1):+.1f} %")
if 1 in rows and len(rows) > 1:
    most = max(rows)
    total, decode = float(rows[most][7]), float(rows[most][9])
    print(f"{most} streams: {total:.1f} tok/s in total, {total / float(rows[1][7]):.1f}x serve's single stream "
          f"({rows[1][7].strip()} tok/s, prompts included)"
          + (f", {total / float(gen.group(2)):.1f}x generate's decode" if gen else ""))
    print(f"{most} streams decoding together: {decode:.1f} tok/s, {decode / float(rows[1][9]):.1f}x the single "
          f"stream's decode ({rows[1][9].strip()} tok/s)"
          + (f", {decode / float(gen.group(2)):.1f}x generate's" if gen else ""))
    if engine:
        print(f"the engine alone (tessera bench --sequences {engine.group(1)}): {engine.group(2)} tok/s; serve's "
              f"{most}-stream decode is {100 * (decode / float(engine.group(2)) - 1):+.1f} % against it")
PY
