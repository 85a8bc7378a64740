#!/bin/sh
# runtime-deps.sh PREFIX — the packages (Debian or Ubuntu) that hold the
# shared libraries the installed ragtag, libragtag and its backend modules
# load, one a line. The Dockerfile's build stage runs it after `make
# install`; the runtime stage installs those of them its base lacks, so the
# same Dockerfile serves Debian 12 and the CUDA images (Ubuntu, where the
# package names differ and cuBLAS/cuDNN come with the base).
set -eu
prefix=${1:-/usr/local}
libs=$(for f in "$prefix/bin/ragtag" "$prefix"/lib/libragtag.so "$prefix"/lib/ragtag/backends/*.so; do
  [ -e "$f" ] && ldd "$f" | awk '$2 == "=>" && $3 ~ /^\// { print $3 }'
done | sort -u)
[ -n "$libs" ] || { echo "runtime-deps.sh: no ragtag installed under $prefix" >&2; exit 1; }
pkgs=
for lib in $libs; do
  case $lib in "$prefix"/*) continue ;; esac
  # the path ldd names (/lib/...) may be a merged-/usr alias or an
  # alternatives link (libopenblas): try the file it points to as well
  p=$(dpkg -S "$lib" 2>/dev/null || dpkg -S "$(readlink -f "$lib")" 2>/dev/null) ||
    { echo "runtime-deps.sh: no package holds $lib" >&2; exit 1; }
  pkgs="$pkgs ${p%%:*}"
done
printf '%s\n' $pkgs | sort -u
