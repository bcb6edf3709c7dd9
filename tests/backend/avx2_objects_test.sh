#!/usr/bin/env bash
# The AVX2 kernels' objects hold no AVX-512 instruction: an AVX2-only CPU (the dev
# machines' kind) would fault on one. A template takes the instructions of the attribute
# region its header is included in, so an AVX2 kernel instantiated in an AVX-512 file is
# compiled for AVX-512 without a word of warning (it happened: kmovw in column<Avx2Ops>).
# Usage: avx2_objects_test.sh LIBRARY MEMBER...   (exit 77, skipped, without objdump)
set -euo pipefail
command -v objdump >/dev/null || { echo "no objdump: skipped"; exit 77; }
library=$1
shift
status=0
for member in "$@"; do
  # objdump -d on the archive prints each member under "In archive ...", then its code.
  code=$(objdump -d --no-show-raw-insn "$library" | awk -v m="$member" '/^In archive|file format/ { on = ($1 == m ":") } on')
  [[ -n $code ]] || { echo "$member: not in $library"; status=1; continue; }
  # EVEX only: zmm registers, the mask registers k0-k7, and x/ymm16-31.
  found=$(grep -E '%zmm|%k[0-7]\b|%[xy]mm(1[6-9]|2[0-9]|3[01])\b' <<<"$code" | head -n 3 || true)
  if [[ -n $found ]]; then
    echo "$member: AVX-512 instructions in an AVX2 kernel:"
    echo "$found"
    status=1
  else
    echo "$member: AVX2 only ($(grep -c ':' <<<"$code") lines of code)"
  fi
done
exit $status
