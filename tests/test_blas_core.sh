#!/bin/sh
# The cpu backend's ops (test_cpu_ops) and every layer's finite-difference
# gradient check (test_gradcheck), with OpenBLAS held to its Haswell (AVX2)
# kernels and with the core it picks for this CPU. On an AVX-512 CPU the
# first runs ragtag's own AVX2 kernels for the small GEMMs (gemm_small.c,
# wgrad.c) and the second does not, so both code paths are tested on every
# machine, whatever OPENBLAS_CORETYPE the environment sets.
set -u
top_builddir=${top_builddir:-.}
fails=0
for core in Haswell ""; do
  label=${core:-"the CPU's own core"}
  for t in test_cpu_ops test_gradcheck; do
    if [ -n "$core" ]; then
      out=$(OPENBLAS_CORETYPE=$core "$top_builddir/tests/$t" 2>&1); st=$?
    else
      out=$(env -u OPENBLAS_CORETYPE "$top_builddir/tests/$t" 2>&1); st=$?
    fi
    echo "$out" | grep "^OPENBLAS_CORETYPE"
    if [ $st -eq 0 ]; then echo "ok: $t with $label"
    else echo "$out" | tail -n 20; echo "FAIL: $t with $label"; fails=$((fails + 1)); fi
  done
done
[ $fails -eq 0 ] || exit 1
