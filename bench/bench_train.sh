#!/bin/sh
# Training speed of ragtag next to PyTorch, same machine, same run, same
# model / batch / optimiser / threads, against two PyTorch builds:
#  - Debian's python3-torch (1.13, OpenBLAS), in /usr/bin/python3;
#  - PyTorch from PyPI (2.x, MKL and oneDNN), what a user installs today,
#    in a virtual environment this script makes once and keeps
#    (TORCH_VENV, default ~/.cache/ragtag-bench/venv: PyTorch's CPU-only
#    index when it answers, else PyPI's plain torch). Without network or
#    python3-venv that column is skipped, and the script says why.
#
#   bench/bench_train.sh            speed: lenet, seedcnn, resnet8; batch 64; 1 and 2 threads
#   bench/bench_train.sh accuracy   10 epochs of lenet and seedcnn on full Fashion-MNIST
#
# Runs are interleaved (ragtag, PyPI, Debian, for each thread count, REPS
# rounds) so that the machine's noise hits all of them; each cell keeps its
# best. Environment: RAGTAG (default ./src/ragtag), MODELS (default "lenet
# seedcnn resnet8"), LENET_IMAGES / SEEDCNN_IMAGES / RESNET8_IMAGES (images
# per timed run), REPS (rounds, default 3), TORCH_VENV, NO_PYPI=1 (skip the
# PyPI column), RAGTAG_BEFORE (another ragtag binary, e.g. a build of an
# older commit, in its own column: before/after in the same run). Speed is
# never asserted: this prints figures, with the load average before and after.
set -eu
RAGTAG=${RAGTAG:-./src/ragtag}
top=$(cd "$(dirname "$0")/.." && pwd)
TORCH_PY=$top/bench/torch/torch_fmnist.py # ../shared/bench's, plus resnet8
LENET_IMAGES=${LENET_IMAGES:-19200}    # 300 steps of 64
SEEDCNN_IMAGES=${SEEDCNN_IMAGES:-6400} # 100 steps of 64
RESNET8_IMAGES=${RESNET8_IMAGES:-3200} # 50 steps of 64
MODELS=${MODELS:-lenet seedcnn resnet8}
REPS=${REPS:-3}
TORCH_VENV=${TORCH_VENV:-$HOME/.cache/ragtag-bench/venv}
mode=${1:-speed}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# PyTorch's best configuration on these machines (../shared/bench/README.md):
# malloc keeping freed memory, and for Debian's build OpenBLAS instead of the
# reference BLAS (PyPI's wheel brings MKL).
TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736
pt() {
  env LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread GLIBC_TUNABLES=$TUNABLES \
      /usr/bin/python3 "$TORCH_PY" "$@"
}
pt_pypi() { env GLIBC_TUNABLES=$TUNABLES "$TORCH_VENV/bin/python" "$TORCH_PY" "$@"; }
have_torch() { /usr/bin/python3 -c 'import torch, numpy' 2>/dev/null; }

# The PyPI environment, made once: prints nothing when it is ready, else
# the reason it is not.
pypi_why_not() {
  [ "${NO_PYPI:-0}" = 1 ] && { echo "NO_PYPI=1"; return; }
  if "$TORCH_VENV/bin/python" -c 'import torch, numpy' 2>/dev/null; then return; fi
  mkdir -p "$(dirname "$TORCH_VENV")"
  if ! /usr/bin/python3 -m venv "$TORCH_VENV" >"$tmp/venv.log" 2>&1; then
    echo "cannot make a virtual environment (apt-get install python3-venv): $(tail -n 1 "$tmp/venv.log")"
    return
  fi
  echo "# making $TORCH_VENV: PyTorch from PyPI (once; a few minutes)" >&2
  "$TORCH_VENV/bin/pip" install -q --timeout 30 --index-url https://download.pytorch.org/whl/cpu \
    torch >"$tmp/pip.log" 2>&1 ||
    "$TORCH_VENV/bin/pip" install -q torch >>"$tmp/pip.log" 2>&1 || true
  "$TORCH_VENV/bin/pip" install -q numpy >>"$tmp/pip.log" 2>&1 || true
  if ! "$TORCH_VENV/bin/python" -c 'import torch, numpy' 2>>"$tmp/pip.log"; then
    echo "pip could not install torch from PyPI: $(grep -v '^ ' "$tmp/pip.log" | tail -n 1)"
  fi
}

torch_version() { # python: its torch's version and fast libraries
  "$1" -c 'import torch; b = torch.backends
print(torch.__version__, "MKL" if b.mkl.is_available() else "",
      "oneDNN" if b.mkldnn.is_available() else "")' 2>/dev/null
}

json_field() { grep -v '"event"' | sed -n "s/.*\"$1\": *\([0-9.e+-]*\).*/\1/p" | tail -n 1; } # not the coordinator's event lines
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }

ragtag_ips() { # binary model threads images
  bin=$1
  shift
  rm -f "$tmp/m.jsonl"
  "$bin" train "$top/examples/$1.cfg" --data fashion-mnist --val 0 --limit "$3" --epochs 1 \
    --batch 64 --lr 0.01 --momentum 0.9 --weight-decay 0 --optimizer sgd --threads "$2" \
    --progress off --metrics "$tmp/m.jsonl" >/dev/null 2>&1 || { echo "ragtag failed" >&2; echo 0; return; }
  json_field images_per_s <"$tmp/m.jsonl"
}

torch_ips() { # runner model threads images
  # OpenBLAS's own pool at 1 thread when torch uses 2 (both on 2 cores halve lenet)
  v=$("$1" --model "$2" --threads "$3" --blas-threads 1 --epochs 1 --batch 64 --lr 0.01 \
         --train-limit "$4" 2>/dev/null | grep '"kind": *"epoch"' | json_field images_per_s)
  echo "${v:-0}"
}

cell() { cat "$tmp/$1" 2>/dev/null || echo 0; }
keep() { max "$(cell "$1")" "$2" >"$tmp/$1.new" && mv "$tmp/$1.new" "$tmp/$1"; } # cell value

if [ "$mode" = speed ]; then
  why=$(pypi_why_not)
  have_torch && deb=yes || deb=no
  echo "# training images/s, batch 64, SGD lr 0.01 momentum 0.9; best of $REPS interleaved rounds"
  echo "# $(nproc) cores; OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset}; load average before: $(cut -d' ' -f1-3 /proc/loadavg)"
  # where a VM put its vCPUs: 2-thread runs lose a third when they sit on
  # two core complexes (bench/core_handoff.c)
  if [ -x "$top/bench/core_handoff" ]; then echo "# before: $("$top/bench/core_handoff")"; fi
  # A machine may pin OpenBLAS to one core's kernels (this project's
  # sessions have OPENBLAS_CORETYPE=Haswell on AVX-512 EPYCs): ragtag's and
  # Debian PyTorch's GEMMs then run AVX2 kernels, PyPI PyTorch's (MKL) do not.
  [ -z "${OPENBLAS_CORETYPE:-}" ] ||
    echo "# NOTE: OpenBLAS held to $OPENBLAS_CORETYPE kernels (ragtag, PyTorch Debian; not PyPI's MKL); env -u OPENBLAS_CORETYPE $0 gives this CPU's own"
  # the BLAS core ragtag runs (it names one where OpenBLAS takes the CPU for
  # an older one: docs/backends.md); Debian's PyTorch keeps OpenBLAS's pick
  echo "# ragtag's cpu: $("$RAGTAG" devices 2>/dev/null | sed -n 's/^ *platform: host, //p' | head -n 1)"
  [ "$deb" = yes ] && echo "# PyTorch (Debian): $(torch_version /usr/bin/python3)" ||
    echo "# PyTorch (Debian): skipped: python3-torch is not installed"
  [ -z "$why" ] && echo "# PyTorch (PyPI): $(torch_version "$TORCH_VENV/bin/python")" ||
    echo "# PyTorch (PyPI): skipped: $why"
  for model in $MODELS; do
    case $model in lenet) imgs=$LENET_IMAGES ;; seedcnn) imgs=$SEEDCNN_IMAGES ;; *) imgs=$RESNET8_IMAGES ;; esac
    for _ in $(seq "$REPS"); do
      for t in 1 2; do
        keep "r$t" "$(ragtag_ips "$RAGTAG" "$model" "$t" "$imgs")"
        if [ -n "${RAGTAG_BEFORE:-}" ]; then keep "b$t" "$(ragtag_ips "$RAGTAG_BEFORE" "$model" "$t" "$imgs")"; fi
        if [ -z "$why" ]; then keep "p$t" "$(torch_ips pt_pypi "$model" "$t" "$imgs")"; fi
        if [ "$deb" = yes ]; then keep "d$t" "$(torch_ips pt "$model" "$t" "$imgs")"; fi
      done
    done
    printf '%-8s %-7s %10s %14s %16s %14s\n' model threads ragtag "pytorch-pypi" "pytorch-debian" \
      "ragtag-before"
    for t in 1 2; do
      printf '%-8s %-7s %10.0f %14.0f %16.0f %14.0f\n' "$model" "$t" "$(cell r$t)" "$(cell p$t)" \
        "$(cell d$t)" "$(cell b$t)"
    done
    awk -v r1="$(cell r1)" -v r2="$(cell r2)" -v p1="$(cell p1)" -v p2="$(cell p2)" \
        -v d1="$(cell d1)" -v d2="$(cell d2)" -v m="$model" 'BEGIN {
      rb = (r1 > r2) ? r1 : r2; pb = (p1 > p2) ? p1 : p2; db = (d1 > d2) ? d1 : d2
      if (pb > 0) printf "%-8s ragtag best / pytorch-pypi best   = %.2fx\n", m, rb / pb
      if (db > 0) printf "%-8s ragtag best / pytorch-debian best = %.2fx\n", m, rb / db
      if (r1 > 0) printf "%-8s ragtag 2 threads / 1 thread       = %.2fx\n", m, r2 / r1 }'
    rm -f "$tmp"/r? "$tmp"/p? "$tmp"/d? "$tmp"/b?
  done
  echo "# load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
  if [ -x "$top/bench/core_handoff" ]; then echo "# after: $("$top/bench/core_handoff")"; fi
elif [ "$mode" = accuracy ]; then
  echo "# 10 epochs on the full Fashion-MNIST (60k train, no validation split), 2 threads,"
  echo "# each model file's [train] recipe (lenet: adamw cosine; seedcnn: sgd lr 0.01 momentum 0.9)"
  for model in lenet seedcnn; do
    rm -f "$tmp/a.jsonl"
    start=$(date +%s.%N)
    "$RAGTAG" train "$top/examples/$model.cfg" --data fashion-mnist --val 0 --epochs 10 \
      --threads 2 --progress off --metrics "$tmp/a.jsonl" >/dev/null 2>&1
    awk -v m="$model" -v start="$start" '
      { match($0, /"epoch": [0-9]+/); e = substr($0, RSTART + 9, RLENGTH - 9)
        match($0, /"test_acc": [0-9.e+-]+/); a = substr($0, RSTART + 12, RLENGTH - 12)
        match($0, /"seconds": [0-9.e+-]+/); s = substr($0, RSTART + 11, RLENGTH - 11)
        t += s; if (!hit && a >= 0.90) { hit = 1; printf "%s reaches 90%% test accuracy at epoch %d, %.1f s\n", m, e, t }
        printf "%s epoch %d test_acc %.4f (%.1f s)\n", m, e, a, s }
      END { if (!hit) printf "%s never reached 90%%\n", m }' "$tmp/a.jsonl"
  done
  if have_torch; then
    echo "# PyTorch (Debian), same models, lr 0.01, 2 threads"
    pt --model lenet --threads 2 --blas-threads 1 --epochs 10 --lr 0.01 --target 0.90 | grep summary || true
    pt --model seedcnn --threads 2 --blas-threads 1 --epochs 10 --lr 0.01 --target 0.915 | grep summary || true
  fi
else
  echo "usage: bench/bench_train.sh [speed|accuracy]" >&2
  exit 2
fi
