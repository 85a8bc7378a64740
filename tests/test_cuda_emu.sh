#!/bin/sh
# The cuda backend's code, run without a GPU: its kernels (backends/cuda/
# kernels-*.cu) compiled as C++ on a CPU emulation of CUDA's execution model
# (tests/cuda-emu/emu.h: real threads per block, real barriers and warp
# shuffles), its C side (cuda.c, conv.c, nn.c) unchanged, over a mock CUDA
# runtime, cuBLAS and cuDNN (tests/cuda-emu/mock.c), linked as a stand-in
# ragtag-cuda.so; then tests/test_backend_ops compares every op of it with
# the cpu backend, twice:
#   RAGTAG_CUDA_CUDNN=0   ragtag's own kernels for everything, im2col + GEMM
#   RAGTAG_CUDA_CUDNN=1   the mock cuDNN refuses every call: the backend's
#                         fallbacks from cuDNN to its own kernels
# This checks the kernels' indexing, arithmetic, launch shapes and the C
# side's plumbing on every machine with the CUDA toolkit; it says nothing of
# a GPU's speed, memory model or math library (bench/gpu_check.sh on a GPU
# does). Skipped, saying why, without the module or a C++20 compiler.
set -u
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
if [ ! -f "$top_builddir/backends/cuda/ragtag-cuda.la" ]; then
  echo "SKIP: the cuda module was not built (see configure's 'cuda backend' line)"
  exit 77
fi
ops=$top_builddir/tests/test_backend_ops
[ -x "$ops" ] || { echo "SKIP: tests/test_backend_ops is not built"; exit 77; }
CXX=${CXX:-g++}
CC=$(sed -n 's/^CC = //p' "$top_builddir/Makefile")
CUDA_CFLAGS=$(sed -n 's/^CUDA_CFLAGS = //p' "$top_builddir/Makefile")
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
printf '#include <barrier>\nint main() { std::barrier<> b(1); b.arrive_and_wait(); }\n' >"$tmp/t.cpp"
if ! $CXX -std=c++20 -o "$tmp/t" "$tmp/t.cpp" -pthread >/dev/null 2>&1; then
  echo "SKIP: no C++20 compiler with <barrier> ($CXX)"
  exit 77
fi

src=$top_srcdir/backends/cuda
emu=$top_srcdir/tests/cuda-emu
fail() { echo "FAIL: $*"; exit 1; }
# kernel<<<grid, block, shmem, stream>>>(args) -> emu_launch(kernel, grid, ..., args)
launches='s/\([A-Za-z_][A-Za-z_0-9]*\)<<<\(.*\)>>>(/emu_launch(\1, \2, /'
for f in common.cuh kernels.h; do sed "$launches" "$src/$f" >"$tmp/$f"; done
objs=""
for k in kernels-elementwise kernels-nn kernels-conv; do
  sed "$launches" "$src/$k.cu" >"$tmp/$k.cpp"
  grep -q '<<<' "$tmp/$k.cpp" && fail "$k.cu: a launch the emulation cannot rewrite (keep <<<...>>>( on one line)"
  $CXX -std=c++20 -O1 -fPIC -include "$emu/emu.h" -I"$tmp" $CUDA_CFLAGS -c "$tmp/$k.cpp" \
    -o "$tmp/$k.o" || fail "compiling $k.cu for the emulation"
  objs="$objs $tmp/$k.o"
done
$CXX -std=c++20 -O1 -fPIC $CUDA_CFLAGS -c "$emu/emu.cpp" -o "$tmp/emu.o" || fail "compiling emu.cpp"
for c in cuda errors gemm conv nn; do
  $CC -std=c11 -D_GNU_SOURCE -O1 -fPIC -I"$top_builddir" -I"$top_srcdir/base" \
    -I"$top_srcdir/backends" -I"$src" $CUDA_CFLAGS -c "$src/$c.c" -o "$tmp/$c.o" ||
    fail "compiling $c.c"
  objs="$objs $tmp/$c.o"
done
$CC -std=c11 -D_GNU_SOURCE -O1 -fPIC -I"$top_builddir" -I"$top_srcdir/base" -I"$top_srcdir/backends" \
  -c "$top_srcdir/backends/module-util.c" -o "$tmp/module-util.o" || fail "compiling module-util.c"
objs="$objs $tmp/module-util.o"
$CC -std=c11 -fPIC $CUDA_CFLAGS -c "$emu/mock.c" -o "$tmp/mock.o" || fail "compiling mock.c"
mkdir -p "$tmp/mod"
$CXX -shared -o "$tmp/mod/ragtag-cuda.so" $objs "$tmp/emu.o" "$tmp/mock.o" -pthread -lm ||
  fail "linking the emulated module"

for cudnn in 0 1; do
  echo "=== the cuda backend on the CPU emulation, RAGTAG_CUDA_CUDNN=$cudnn"
  # only the cuda column: the cpu and opencl ones have their own run (test_backend_ops)
  RAGTAG_BACKEND_PATH="$tmp/mod" RAGTAG_CUDA_CUDNN=$cudnn RAGTAG_TEST_BACKENDS=cuda "$ops" \
    >"$tmp/ops.log" 2>&1
  rc=$?
  cat "$tmp/ops.log"
  grep -q '^=== cuda:0 (CPU emulation)' "$tmp/ops.log" || fail "the emulated cuda column did not run"
  [ $rc -eq 0 ] || fail "test_backend_ops on the emulated cuda backend (RAGTAG_CUDA_CUDNN=$cudnn)"
done
