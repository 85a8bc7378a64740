#!/bin/sh
# End to end: lenet trained for one epoch on 10,000 Fashion-MNIST images
# reaches at least 80% test accuracy (on the full 10,000-image test set).
# Adam with a cosine schedule after a short warm-up gets the most out of the
# 313 steps one epoch gives (82-83% over seeds 1-3; plain SGD at lr 0.01
# gives 78%, PyTorch's SGD 65-69% on the same slice).
set -u
RAGTAG=${RAGTAG:-./src/ragtag}
top_srcdir=${top_srcdir:-.}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${RAGTAG_DATA_DIR:-}" ]; then
  echo "SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"
  exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$RAGTAG" train "$top_srcdir/examples/lenet.cfg" --data fashion-mnist --limit 10000 --val 0 \
  --epochs 1 --batch 32 --optimizer adam --lr 0.004 --weight-decay 0 --schedule cosine --warmup 0.1 --seed 1 --progress lines --metrics "$tmp/m.jsonl" || exit 1
cat "$tmp/m.jsonl"
acc=$(sed -n 's/.*"test_acc": \([0-9.e+-]*\).*/\1/p' "$tmp/m.jsonl" | tail -n 1)
echo "test accuracy: $acc"
awk -v a="$acc" 'BEGIN { exit !(a >= 0.80) }' || { echo "FAIL: test accuracy $acc < 0.80"; exit 1; }
