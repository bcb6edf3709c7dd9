#!/usr/bin/env bash
# Packs the Debian 12 libraries that the GPU machine lacks (Highway, PCRE2, ICU 72)
# into ${1:-.prev/deps.tar.xz}; tools/gpu/check.sh unpacks it there as .deps/.
# Carry .prev with every device call (it is ignored by git: .git/info/exclude).
set -euo pipefail
out=$(realpath -m "${1:-.prev/deps.tar.xz}")
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
(cd "$work" && apt-get download libhwy-dev libhwy1 libpcre2-dev libpcre2-8-0 libpcre2-16-0 libpcre2-32-0 \
  libpcre2-posix3 libicu-dev libicu72 >/dev/null)
mkdir -p "$work/.deps"
for deb in "$work"/*.deb; do dpkg -x "$deb" "$work/.deps"; done
# Shared libraries and headers only (the carried tree counts against the 64 MiB a call).
find "$work/.deps" -name '*.a' -delete
rm -rf "$work/.deps/usr/share/doc" "$work/.deps/usr/share/man" "$work/.deps/usr/bin"
# pkg-config files find the folder relative to themselves, wherever it is unpacked.
sed -i 's|^prefix=.*|prefix=${pcfiledir}/../../..|' "$work"/.deps/usr/lib/x86_64-linux-gnu/pkgconfig/*.pc
mkdir -p "$(dirname "$out")"
tar -C "$work" -cJf "$out" .deps
echo "wrote $out ($(du -h "$out" | cut -f1))"
