#!/bin/sh
# The cuda backend module is built, loads, and either offers working devices
# or is refused in one clean line (no driver, no GPU) — never a crash or an
# abort — and the ragtag binary and libragtag link no CUDA library. This is
# what `make check` can prove on a machine with the CUDA toolkit and no GPU
# (every CI machine); tests/test_backend_ops checks the ops where a GPU is.
# Skipped, saying why, when configure did not build the module.
set -u
RAGTAG=${RAGTAG:-./src/ragtag}
top_builddir=${top_builddir:-.}
mod=$top_builddir/backends/cuda/.libs/ragtag-cuda.so
if [ ! -f "$top_builddir/backends/cuda/ragtag-cuda.la" ]; then
  echo "SKIP: the cuda module was not built (see configure's 'cuda backend' line; --with-cuda)"
  exit 77
fi
fail() { echo "FAIL: $*"; exit 1; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
[ -f "$mod" ] || fail "$mod is missing though ragtag-cuda.la was built"

# The shared objects each file needs (NEEDED entries, or ldd's list).
needed() {
  if command -v readelf >/dev/null 2>&1; then
    readelf -d "$1" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p'
  elif command -v ldd >/dev/null 2>&1; then
    ldd "$1" | awk '{ print $1 }'
  fi
}

# 1. The module links the three CUDA libraries and exports one symbol.
deps=$(needed "$mod")
if [ -n "$deps" ]; then
  for lib in libcudart libcublas libcudnn; do
    echo "$deps" | grep -q "^$lib\.so" || fail "$mod does not link $lib (it links: $(echo $deps))"
  done
  echo "ok: the module links $(echo "$deps" | grep -E '^lib(cudart|cublas|cudnn)' | tr '\n' ' ')"
else
  echo "note: neither readelf nor ldd: the module's libraries are not checked"
fi
if command -v nm >/dev/null 2>&1; then
  syms=$(nm -D --defined-only "$mod" | awk '$2 ~ /^[TDBR]$/ { print $3 }')
  [ "$syms" = rt_backend_module_ops ] ||
    fail "the module must export exactly rt_backend_module_ops, it exports: $(echo $syms)"
  echo "ok: the module exports rt_backend_module_ops only"
fi

# 2. Neither the ragtag binary nor libragtag links a CUDA library, directly
# or through another library (ldd lists the whole closure).
bin=$top_builddir/src/.libs/ragtag
[ -f "$bin" ] || bin=$top_builddir/src/ragtag
for f in "$bin" "$top_builddir/.libs/libragtag.so"; do
  [ -f "$f" ] || continue
  if command -v ldd >/dev/null 2>&1; then
    all=$(LD_LIBRARY_PATH="$top_builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ldd "$f")
  else
    all=$(needed "$f")
  fi
  echo "$all" | grep -E 'libcuda|libcudart|libcublas|libcudnn' &&
    fail "$f links a CUDA library"
  echo "ok: $(basename "$f") links no CUDA library"
done

# 3. `ragtag devices` loads the module and lists cuda: devices with a GEMM
# figure, or one line saying why there are none.
# Only this module's directory: the test is about it, and other backends'
# GEMM measurements would only cost time.
export RAGTAG_BACKEND_PATH="$top_builddir/backends/cuda/.libs"
RAGTAG_BACKEND_VERBOSE=1 "$RAGTAG" devices >"$tmp/out" 2>"$tmp/err"
rc=$?
cat "$tmp/out"
[ $rc -eq 0 ] || { cat "$tmp/err"; fail "ragtag devices exited with $rc"; }
grep -q "ragtag-cuda.so: loaded" "$tmp/err" ||
  { cat "$tmp/err"; fail "the loader did not load ragtag-cuda.so"; }
grep -q "internal error" "$tmp/err" && { cat "$tmp/err"; fail "internal error"; }
grep '^cuda ' "$tmp/out" >"$tmp/cuda"
[ -s "$tmp/cuda" ] || fail "ragtag devices lists no cuda line"
if grep -q "unavailable:" "$tmp/cuda"; then
  [ "$(wc -l <"$tmp/cuda")" -eq 1 ] || fail "a refused backend takes one line"
  why=$(sed 's/^cuda *unavailable: //' "$tmp/cuda")
  case $why in
  *driver* | *device* | *GPU*) ;;
  *) fail "the refusal does not name the driver or the device: $why" ;;
  esac
  # 4. Asking for the backend fails the same clean way: one line, no abort.
  "$RAGTAG" train "${top_srcdir:-.}/examples/lenet.cfg" --backend cuda --epochs 1 --limit 64 \
    --progress off >"$tmp/train.out" 2>"$tmp/train.err"
  rc=$?
  [ $rc -ne 0 ] && [ $rc -lt 128 ] || { cat "$tmp/train.err"; fail "train --backend cuda: exit $rc"; }
  [ "$(wc -l <"$tmp/train.err")" -eq 1 ] && grep -qF "$why" "$tmp/train.err" ||
    { cat "$tmp/train.err"; fail "train --backend cuda does not fail in one line saying why"; }
  echo "ok: no usable GPU here, refused cleanly: $why"
else
  grep -q "cannot open" "$tmp/cuda" && fail "a cuda device is listed but cannot be opened"
  grep -q "GFLOP/s" "$tmp/cuda" || fail "a cuda device has no GEMM figure"
  echo "ok: $(wc -l <"$tmp/cuda") CUDA device(s) opened and ran a GEMM"
fi
