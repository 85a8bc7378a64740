#!/bin/sh
# One run, workers on different backends: a cpu worker and an opencl worker
# (PoCL on CI) train lenet together through `train --workers 2 --backend
# cpu,opencl`. The optimiser runs on the host on each worker's slice, so the
# replicas stay bitwise identical (the coordinator compares their hashes and
# fails the run otherwise), and the accuracy matches a cpu-only run within
# 1 point; so does a run with --compress fp16 (16-bit gradients, rounded
# on each worker's host copy). With a CUDA device present a cpu + cuda run is checked the same
# way; without one that part is skipped and says so. Skipped as a whole when
# the multi-machine layer or the opencl backend is absent.
set -u
RAGTAG=${RAGTAG:-./src/ragtag}
top_srcdir=${top_srcdir:-.}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${RAGTAG_DATA_DIR:-}" ]; then
  echo "SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

train() { # name, then extra flags
  name=$1
  shift
  "$RAGTAG" train "$top_srcdir/examples/lenet.cfg" --data fashion-mnist --limit 10000 --val 0 \
    --epochs 1 --batch 64 --seed 2 --threads 1 --progress off --metrics "$tmp/$name.jsonl" \
    "$@" >"$tmp/$name.err" 2>&1
}
acc() { sed -n 's/.*"test_acc": \([0-9.e+-]*\).*/\1/p' "$tmp/$1.jsonl" | tail -n 1; }
close() { # a b: within 1 point
  awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a > 0 && b > 0 && d <= 0.01) }'
}

"$RAGTAG" devices >"$tmp/devices" 2>&1
if ! grep -q '^opencl  *0 ' "$tmp/devices"; then
  echo "SKIP: no opencl device: $(grep '^opencl' "$tmp/devices")"
  exit 77
fi
train cpu || { cat "$tmp/cpu.err"; fail "the cpu-only run failed"; }
if ! train mixed --workers 2 --backend cpu,opencl; then
  cat "$tmp/mixed.err"
  if grep -q "built without multi-machine training" "$tmp/mixed.err"; then
    echo "SKIP: ragtag was built without ZeroMQ/msgpack-c"
    exit 77
  fi
  fail "the cpu + opencl run failed"
fi
cat "$tmp/mixed.err"
grep -q ' cpu  ' "$tmp/mixed.err" && grep -q ' opencl  ' "$tmp/mixed.err" ||
  fail "the cluster table does not show one cpu and one opencl worker"
grep -q "replicas identical" "$tmp/mixed.err" || fail "replicas are not bitwise identical"
a=$(acc cpu)
b=$(acc mixed)
echo "test accuracy: cpu alone $a, cpu + opencl workers $b"
close "$a" "$b" || fail "accuracies differ by more than 1 point"

# 16-bit gradients: rounded on each worker's host copy, so the backends
# mix as before and the replicas stay identical
train mixed_z --workers 2 --backend cpu,opencl --compress fp16 ||
  { cat "$tmp/mixed_z.err"; fail "the cpu + opencl run with --compress fp16 failed"; }
grep -q "replicas identical" "$tmp/mixed_z.err" || fail "compressed replicas are not identical"
z=$(acc mixed_z)
echo "test accuracy: cpu alone $a, cpu + opencl workers with --compress fp16 $z"
close "$a" "$z" || fail "--compress fp16 accuracy differs by more than 1 point"

if grep -q '^cuda  *0 ' "$tmp/devices"; then
  train cuda --workers 2 --backend cpu,cuda || { cat "$tmp/cuda.err"; fail "the cpu + cuda run failed"; }
  grep -q "replicas identical" "$tmp/cuda.err" || fail "cpu + cuda replicas are not identical"
  c=$(acc cuda)
  echo "test accuracy: cpu alone $a, cpu + cuda workers $c"
  close "$a" "$c" || fail "cpu + cuda accuracy differs by more than 1 point"
else
  echo "skipped part: cpu + cuda workers (no CUDA device here: $(grep '^cuda' "$tmp/devices"))"
fi
echo "PASS"
