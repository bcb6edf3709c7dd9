#!/usr/bin/env bash
# `make demo`: the shipped model split over two local stage processes and a
# coordinator, every connection mutual TLS 1.3 (hidden states and logits travel
# sealed with AES-256-GCM). Prints the layout, streams the text, ends with tokens/s.
# Safe to run twice: it makes a fresh cluster directory each time and stops its
# stages on exit. docs/distributed.md shows the same across real hosts.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
tessera=build/bin/tessera
model=${DEMO_MODEL:-models/tessera-tiny}
dir=build/demo-cluster
rm -rf "$dir"
nodes=$("$tessera" local-cluster --out "$dir" --nodes coordinator,stage0,stage1)  # "name address" lines
stage0=$(awk '$1 == "stage0" {print $2}' <<<"$nodes")
stage1=$(awk '$1 == "stage1" {print $2}' <<<"$nodes")
layers=$(python3 -c "import json,sys; print(json.load(open('$model/config.json'))['num_hidden_layers'])")
half=$((layers / 2))
cat > "$dir/stages.json" <<JSON
{"stages": [{"name": "stage0", "model": "$PWD/$model", "layers": [0, $half]},
            {"name": "stage1", "model": "$PWD/$model", "layers": [$half, $layers]}]}
JSON
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true' EXIT
"$tessera" stage --listen "$stage0" --identity "$dir/stage0" --trust "$dir/trust.json" --threads 1 2>"$dir/stage0.log" &
pids+=($!)
"$tessera" stage --listen "$stage1" --identity "$dir/stage1" --trust "$dir/trust.json" --threads 1 2>"$dir/stage1.log" &
pids+=($!)
echo "demo: $model split over two stage processes (logs in $dir), sealed with mutual TLS 1.3"
"$tessera" generate --model "$model" --prompt "It is a truth universally acknowledged" -n 60 \
  --temperature 0.8 --top-k 40 --seed 1 \
  --pipeline "$dir/stages.json" --identity "$dir/coordinator" --trust "$dir/trust.json"
