#!/bin/sh
# The opencl backend trains like the cpu backend: lenet, one epoch on 10,000
# Fashion-MNIST images, the same seed and batch order; the test accuracies
# must agree within 1 point (over seeds 1-8 they differ by 0.56 points at
# most, from float rounding); a bad RAGTAG_OPENCL_VECTOR is refused; the
# RAGTAG_OPENCL_PROFILE=1 profile names every kernel it timed. Skipped,
# saying why, when the opencl backend is absent (module not built, no OpenCL
# ICD, no device).
set -u
RAGTAG=${RAGTAG:-./src/ragtag}
top_srcdir=${top_srcdir:-.}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${RAGTAG_DATA_DIR:-}" ]; then
  echo "SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

train() { # backend
  "$RAGTAG" train "$top_srcdir/examples/lenet.cfg" --data fashion-mnist --limit 10000 --val 0 \
    --epochs 1 --batch 64 --seed 2 --progress off --backend "$1" --metrics "$tmp/$1.jsonl" \
    2>"$tmp/$1.err"
}
acc() { sed -n 's/.*"test_acc": \([0-9.e+-]*\).*/\1/p' "$tmp/$1.jsonl" | tail -n 1; }

if ! train opencl; then
  cat "$tmp/opencl.err"
  if grep -q -e "is unavailable" -e "no OpenCL platform" -e "but no device" "$tmp/opencl.err"; then
    echo "SKIP: the opencl backend is absent: $(tail -n 1 "$tmp/opencl.err")"
    exit 77
  fi
  echo "FAIL: training on the opencl backend failed"
  exit 1
fi
train cpu || { cat "$tmp/cpu.err"; echo "FAIL: training on the cpu backend failed"; exit 1; }
cat "$tmp/cpu.jsonl" "$tmp/opencl.jsonl"
a_cpu=$(acc cpu)
a_ocl=$(acc opencl)
echo "test accuracy: cpu $a_cpu, opencl $a_ocl"
awk -v a="$a_cpu" -v b="$a_ocl" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && d <= 0.01) }' ||
  { echo "FAIL: accuracies differ by more than 1 point"; exit 1; }

# a vector width the direct convolutions do not have is refused, saying so
if RAGTAG_OPENCL_VECTOR=12 "$RAGTAG" train "$top_srcdir/examples/lenet.cfg" --data fashion-mnist \
     --limit 64 --val 0 --epochs 1 --progress off --backend opencl >/dev/null 2>"$tmp/v.err" ||
   ! grep -q "RAGTAG_OPENCL_VECTOR=12: give 8 or 16" "$tmp/v.err"; then
  cat "$tmp/v.err"; echo "FAIL: RAGTAG_OPENCL_VECTOR=12 was not refused by name"; exit 1
fi
echo "RAGTAG_OPENCL_VECTOR=12 refused: $(tail -n 1 "$tmp/v.err")"

# RAGTAG_OPENCL_PROFILE=1: every kernel timed by its event (the count on
# the summary line is the sum of the kernels' calls), the spans of whole
# ops, the device's waits between kernels
RAGTAG_OPENCL_PROFILE=1 "$RAGTAG" train "$top_srcdir/examples/lenet.cfg" --data fashion-mnist \
  --limit 640 --val 0 --epochs 1 --progress off --backend opencl >/dev/null 2>"$tmp/p.err" ||
  { cat "$tmp/p.err"; echo "FAIL: training with RAGTAG_OPENCL_PROFILE=1 failed"; exit 1; }
summary='s/^ *\([0-9][0-9]*\) kernels: .* ms running, .* ms from one.s end to the next.*/\1/p'
kernels=$(sed -n "$summary" "$tmp/p.err")
calls=$(awk '$1 ~ /^rt_/ { n += $3 } END { print n + 0 }' "$tmp/p.err")
if [ -z "$kernels" ] || [ "$kernels" != "$calls" ] || [ "$calls" -lt 100 ] ||
   ! grep -q '^ *\[conv2d_fwd\] ' "$tmp/p.err" || ! grep -q '^ *rt_conv_direct' "$tmp/p.err"; then
  cat "$tmp/p.err"
  echo "FAIL: the profile lacks its kernels, spans or summary (kernels '$kernels', calls $calls)"
  exit 1
fi
echo "profile: $kernels kernels, each timed; $(grep ' kernels: ' "$tmp/p.err" | sed 's/^ *//')"
