#!/bin/sh
# The cpu backend's ops (test_cpu_ops) and every layer's finite-difference
# gradient check (test_gradcheck), with OpenBLAS held to its Haswell (AVX2)
# kernels and with the core the ragtag program runs on this CPU. On an
# AVX-512 CPU the first runs ragtag's own AVX2 kernels for the small GEMMs
# (gemm_small.c, wgrad.c) and the second does not, so both code paths are
# tested on every machine, whatever OPENBLAS_CORETYPE the environment sets.
#
# First, that core: the program names one itself where OpenBLAS takes the
# CPU for an older one (backends/cpu/blas_core.c); checked here against the
# CPU's flags in /proc/cpuinfo, independently of that code's table.
set -u
top_builddir=${top_builddir:-.}
RAGTAG=${RAGTAG:-$top_builddir/src/ragtag}
fails=0

platform=$(env -u OPENBLAS_CORETYPE -u RAGTAG_BLAS_CORE_FROM "$RAGTAG" devices 2>/dev/null |
  sed -n 's/^ *platform: host, //p' | head -n 1)
echo "# the program's cpu platform: $platform"
own=
case $platform in
  OpenBLAS*)
    # openblas_get_config(): "OpenBLAS VERSION [BUILD FLAGS] CORE MAX_THREADS=N"
    own=$(echo "$platform" | sed -n 's/.* \([A-Za-z0-9_]*\) MAX_THREADS=.*/\1/p')
    flags=$(grep -m 1 '^flags' /proc/cpuinfo 2>/dev/null)
    has() { echo " $flags " | grep -q " $1 "; }
    core=$(echo "$own" | tr 'A-Z' 'a-z')
    want=""
    if has avx512f && has avx512bw && has avx512dq && has avx512vl && has avx512cd; then
      want="skylakex cooperlake sapphirerapids"
      has avx512_bf16 && want="cooperlake sapphirerapids"
    elif has avx2 && has fma; then
      want="haswell zen excavator skylakex cooperlake sapphirerapids"
    fi
    if [ -z "$want" ] || echo " $want " | grep -q " $core "; then
      echo "ok: OpenBLAS runs $own on this CPU (wanted one of: ${want:-any})"
    else
      echo "FAIL: OpenBLAS runs $own on a CPU whose flags want one of: $want"
      fails=$((fails + 1))
    fi ;;
  *) echo "# not OpenBLAS: no core to check" ;;
esac

for core in Haswell "$own"; do
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
