#!/bin/sh
# Transfer learning on Fashion-MNIST (docs/transfer.md):
#  1. train lenet on classes 0-4 (T-shirt, trouser, pullover, dress, coat);
#  2. fine-tune it on classes 5-9 (sandal, shirt, sneaker, bag, ankle boot)
#     from only 1,000 labelled images, the convolutions frozen and a new
#     5-way classifier (examples/lenet-finetune.cfg);
#  3. train the same model from scratch on the same 1,000 images;
# and print both test accuracies on the 5,000 test images of classes 5-9.
#
#   examples/transfer.sh [OUTDIR]        (default: ./transfer-run)
#
# RAGTAG (default: ragtag on the PATH, else ./src/ragtag), SEEDS (default
# "1 2 3": the fine-tuning and from-scratch runs are repeated per seed),
# PRE_EPOCHS (5) and EPOCHS (10) change the runs.
set -eu
here=$(dirname "$0")
out=${1:-transfer-run}
RAGTAG=${RAGTAG:-$(command -v ragtag || echo ./src/ragtag)}
SEEDS=${SEEDS:-1 2 3}
PRE_EPOCHS=${PRE_EPOCHS:-5}
EPOCHS=${EPOCHS:-10}
mkdir -p "$out"

# 1. the model to start from: every layer trained on classes 0-4
if [ ! -f "$out/pretrained.safetensors" ]; then
  "$RAGTAG" train "$here/lenet.cfg" --data fashion-mnist --classes 0-4 --epochs "$PRE_EPOCHS" \
    --val 0.1 --progress lines --save "$out/pretrained.safetensors" 2>&1 | tee "$out/pretrain.log"
fi

# The same model as lenet-finetune.cfg with every layer trainable.
sed '/^freeze = 1/d' "$here/lenet-finetune.cfg" >"$out/lenet-scratch.cfg"

few="--data fashion-mnist --classes 5-9 --limit 1000 --val 0 --epochs $EPOCHS --progress lines"
acc() { sed -n 's/.*test_acc \([0-9.]*\)%.*/\1/p' "$1" | tail -1; }
for seed in $SEEDS; do
  # 2. fine-tuned: the convolutions from step 1, frozen; dense5/dense6 from
  #    step 1 and trained on; dense7 (5 classes here, 10 there) is new
  "$RAGTAG" train "$here/lenet-finetune.cfg" --init "$out/pretrained.safetensors" --seed "$seed" \
    $few >"$out/finetune-$seed.log" 2>&1
  # 3. from scratch: the same layers, all trainable, fresh weights
  "$RAGTAG" train "$out/lenet-scratch.cfg" --seed "$seed" $few >"$out/scratch-$seed.log" 2>&1
  echo "seed $seed: classes 5-9 test accuracy, 1,000 training images: fine-tuned" \
       "$(acc "$out/finetune-$seed.log")%, from scratch $(acc "$out/scratch-$seed.log")%"
done
