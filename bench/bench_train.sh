#!/bin/sh
# Training speed of ragtag next to PyTorch (Debian's python3-torch), same
# machine, same run, same model / batch / optimiser / threads.
#
#   bench/bench_train.sh            speed: lenet and seedcnn, batch 64, 1 and 2 threads
#   bench/bench_train.sh accuracy   10 epochs of lenet and seedcnn on full Fashion-MNIST
#
# Environment: RAGTAG (default ./src/ragtag), SHARED (default ../shared),
# LENET_IMAGES / SEEDCNN_IMAGES (images per timed run), REPS (runs per cell,
# the best is kept). Speed is never asserted: this prints figures.
set -eu
RAGTAG=${RAGTAG:-./src/ragtag}
top=$(cd "$(dirname "$0")/.." && pwd)
SHARED=${SHARED:-$top/../shared}
LENET_IMAGES=${LENET_IMAGES:-19200}    # 300 steps of 64
SEEDCNN_IMAGES=${SEEDCNN_IMAGES:-6400} # 100 steps of 64
REPS=${REPS:-2}
mode=${1:-speed}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# PyTorch's best configuration on these machines (../shared/bench/README.md):
# OpenBLAS instead of the reference BLAS, and malloc keeping freed memory.
pt() {
  env LD_LIBRARY_PATH=/usr/lib/x86_64-linux-gnu/openblas-pthread \
      GLIBC_TUNABLES=glibc.malloc.mmap_max=0:glibc.malloc.trim_threshold=68719476736 \
      /usr/bin/python3 "$SHARED/bench/torch_fmnist.py" "$@"
}
have_torch() { [ -f "$SHARED/bench/torch_fmnist.py" ] && /usr/bin/python3 -c 'import torch' 2>/dev/null; }

json_field() { grep -v '"event"' | sed -n "s/.*\"$1\": *\([0-9.e+-]*\).*/\1/p" | tail -n 1; } # not the coordinator's event lines
max() { awk -v a="$1" -v b="$2" 'BEGIN { print (a + 0 > b + 0) ? a : b }'; }

ragtag_ips() { # model threads images
  best=0
  for _ in $(seq "$REPS"); do
    rm -f "$tmp/m.jsonl"
    "$RAGTAG" train "$top/examples/$1.cfg" --data fashion-mnist --val 0 --limit "$3" --epochs 1 \
      --batch 64 --lr 0.01 --momentum 0.9 --optimizer sgd --threads "$2" --progress off \
      --metrics "$tmp/m.jsonl" >/dev/null 2>&1 || { echo "ragtag failed" >&2; echo 0; return; }
    v=$(json_field images_per_s <"$tmp/m.jsonl")
    best=$(max "$best" "$v")
  done
  echo "$best"
}

torch_ips() { # model threads images
  best=0
  blas=1
  for _ in $(seq "$REPS"); do
    v=$(pt --model "$1" --threads "$2" --blas-threads "$blas" --epochs 1 --batch 64 --lr 0.01 \
           --train-limit "$3" 2>/dev/null | grep '"kind": *"epoch"' | json_field images_per_s)
    best=$(max "$best" "${v:-0}")
  done
  echo "$best"
}

if [ "$mode" = speed ]; then
  echo "# training images/s, batch 64, SGD momentum 0.9; best of $REPS runs"
  echo "# OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-unset} $(nproc) cores"
  printf '%-8s %-7s %10s %10s\n' model threads ragtag pytorch
  for model in lenet seedcnn; do
    [ "$model" = lenet ] && imgs=$LENET_IMAGES || imgs=$SEEDCNN_IMAGES
    r1=$(ragtag_ips "$model" 1 "$imgs"); r2=$(ragtag_ips "$model" 2 "$imgs")
    if have_torch; then
      t1=$(torch_ips "$model" 1 "$imgs"); t2=$(torch_ips "$model" 2 "$imgs")
    else
      t1=0; t2=0
    fi
    printf '%-8s %-7s %10.0f %10.0f\n' "$model" 1 "$r1" "$t1"
    printf '%-8s %-7s %10.0f %10.0f\n' "$model" 2 "$r2" "$t2"
    awk -v r1="$r1" -v r2="$r2" -v t1="$t1" -v t2="$t2" -v m="$model" 'BEGIN {
      tb = (t1 > t2) ? t1 : t2; rb = (r1 > r2) ? r1 : r2
      if (tb > 0) printf "%-8s ragtag best / pytorch best = %.2fx\n", m, rb / tb
      if (r1 > 0) printf "%-8s ragtag 2 threads / 1 thread = %.2fx\n", m, r2 / r1 }'
  done
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
    echo "# PyTorch, same models, lr 0.01, 2 threads"
    pt --model lenet --threads 2 --blas-threads 1 --epochs 10 --lr 0.01 --target 0.90 | grep summary || true
    pt --model seedcnn --threads 2 --blas-threads 1 --epochs 10 --lr 0.01 --target 0.915 | grep summary || true
  fi
else
  echo "usage: bench/bench_train.sh [speed|accuracy]" >&2
  exit 2
fi
