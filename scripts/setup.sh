#!/usr/bin/env bash
# Installs the Debian 12 packages tessera needs to build, test, fuzz and format.
# Idempotent: it asks dpkg what is installed and runs apt-get only for what is
# missing, so a second run does nothing and takes well under a second.
set -euo pipefail

packages=(
  build-essential cmake ninja-build ccache pkg-config
  clang libclang-rt-14-dev  # libFuzzer and ASan/UBSan/TSan runtimes for clang 14
  clang-format
  libgtest-dev libbenchmark-dev
  nlohmann-json3-dev libcli11-dev libhwy-dev liblz4-dev libpcre2-dev libicu-dev libssl-dev
  libboost-dev  # Boost.Asio + Beast (header-only): tessera serve
  iproute2  # ip netns: multinode tests run each rank/stage in its own network namespace
  python3 python3-numpy  # tools/fixtures, reading --logits-out .npy files
  # Test material written by nobody here (docs: ../shared/docs/test-material.md):
  r-cran-janeaustenr bible-kjv bible-kjv-text  # English text for tokenizer tests and tools/train_model
  python3-jinja2                               # reference renderer of chat templates
  wamerican                                    # tools/train_model/check_words.py
)

# node and npm: the openai client tests of tessera serve (tests/serve/openai_client).
# Only when absent, so that a Node.js from elsewhere (nodesource) is left alone.
if ! command -v npm >/dev/null 2>&1; then packages+=(nodejs npm); fi

missing=()
for pkg in "${packages[@]}"; do
  status=$(dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null || true)
  if [[ "$status" != "install ok installed" ]]; then
    echo "setup: $pkg is missing"
    missing+=("$pkg")
  fi
done

if ((${#missing[@]} == 0)); then
  echo "setup: all ${#packages[@]} packages installed, nothing to do"
  exit 0
fi

if ! command -v apt-get >/dev/null 2>&1; then
  echo "setup: apt-get not found; install these packages by hand: ${missing[*]}" >&2
  exit 1
fi

sudo=()
if ((EUID != 0)); then
  if ! command -v sudo >/dev/null 2>&1; then
    echo "setup: not root and sudo not found; as root run: apt-get install ${missing[*]}" >&2
    exit 1
  fi
  sudo=(sudo)
fi

# `env` passes DEBIAN_FRONTEND through sudo, which drops the caller's environment.
apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get)
echo "setup: apt-get update"
"${apt[@]}" update -qq
echo "setup: apt-get install ${missing[*]}"
"${apt[@]}" install -y -qq --no-install-recommends "${missing[@]}"
echo "setup: installed ${#missing[@]} package(s)"
