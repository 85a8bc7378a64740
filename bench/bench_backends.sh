#!/bin/sh
# Every backend and device ragtag finds, side by side on this machine:
# SGEMM GFLOP/s (bench/bench_backends) and LeNet training images/s (one
# epoch of IMAGES Fashion-MNIST images, batch 64, through the ragtag binary;
# the best of REPS runs). Prints figures; never fails on speed.
#
#   make bench && bench/bench_backends.sh
#   BACKENDS="cpu opencl" IMAGES=6400 REPS=3 bench/bench_backends.sh
#
# From a build tree, point RAGTAG_BACKEND_PATH at the modules first:
#   RAGTAG_BACKEND_PATH=$PWD/backends/opencl/.libs bench/bench_backends.sh
set -eu
RAGTAG=${RAGTAG:-./src/ragtag}
BENCH=${BENCH:-./bench/bench_backends}
top=$(cd "$(dirname "$0")/.." && pwd)
IMAGES=${IMAGES:-10000}
REPS=${REPS:-2}
BACKENDS=${BACKENDS:-}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

echo "# $(nproc) cores; $(date -u +%Y-%m-%dT%H:%MZ)"
if [ -x "$BENCH" ]; then
  BENCH_BACKENDS="$BACKENDS" "$BENCH"
else
  echo "# $BENCH not built (make bench): SGEMM figures skipped"
fi

json_field() { grep -v '"event"' | sed -n "s/.*\"$1\": *\([0-9.e+-]*\).*/\1/p" | tail -n 1; } # not the coordinator's event lines

echo
echo "# lenet training, batch 64, sgd momentum 0.9, $IMAGES images, best of $REPS"
printf '%-8s %-4s %12s %10s\n' backend dev images/s test_acc
"$RAGTAG" devices | awk 'NR > 1 && $2 ~ /^[0-9]+$/ { print $1, $2 }' > "$tmp/devices"
while read -r backend dev; do
  case " ${BACKENDS:-$backend} " in *" $backend "*) ;; *) continue ;; esac
  best=0 acc=
  for _ in $(seq "$REPS"); do
    rm -f "$tmp/m.jsonl"
    if "$RAGTAG" train "$top/examples/lenet.cfg" --data fashion-mnist --val 0 --limit "$IMAGES" \
         --epochs 1 --batch 64 --lr 0.01 --momentum 0.9 --optimizer sgd --seed 1 \
         --backend "$backend" --device "$dev" --progress off --metrics "$tmp/m.jsonl" \
         >/dev/null 2>"$tmp/err"; then
      v=$(json_field images_per_s <"$tmp/m.jsonl")
      acc=$(json_field test_acc <"$tmp/m.jsonl")
      best=$(awk -v a="$best" -v b="$v" 'BEGIN { print (b + 0 > a + 0) ? b : a }')
    else
      echo "$backend:$dev failed: $(tail -n 1 "$tmp/err")" >&2
    fi
  done
  printf '%-8s %-4s %12.0f %10s\n' "$backend" "$dev" "$best" "${acc:--}"
  echo "$backend:$dev $best" >> "$tmp/best"
done < "$tmp/devices"
# how many times slower than the cpu backend each other device trains
# (issue 16 asks OpenCL on PoCL for at most 1.5x)
if [ -s "$tmp/best" ]; then
  awk '$1 == "cpu:0" { cpu = $2 } { b[NR] = $1; v[NR] = $2 }
       END { if (cpu > 0) for (i = 1; i <= NR; i++) if (b[i] != "cpu:0" && v[i] > 0)
               printf "lenet: cpu:0 images/s / %s images/s = %.2fx\n", b[i], cpu / v[i] }' "$tmp/best"
fi
