#!/bin/sh
# nvcc-libtool.sh NVCC ARGS... — nvcc as the compiler of `libtool
# --mode=compile` (Makefile.am's .cu.lo rule). libtool gives the compiler
# gcc's flag for position-independent code; nvcc wants it passed on to the
# host compiler, so -fPIC / -fpic become -Xcompiler -fPIC / -fpic. Every
# other argument (libtool's -DPIC and -o .libs/NAME.o among them) goes to
# nvcc unchanged.
nvcc=$1
shift
for arg; do
  shift
  case $arg in
  -fPIC | -fpic) set -- "$@" -Xcompiler "$arg" ;;
  *) set -- "$@" "$arg" ;;
  esac
done
exec "$nvcc" "$@"
