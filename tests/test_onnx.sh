#!/bin/sh
# ONNX export and import (docs/onnx.md), with real files and runtimes:
#  - lenet, seedcnn, resnet8 and a model of every layer type, with weights
#    trained briefly and random batch-norm statistics: `ragtag export` passes
#    onnx.checker, and onnxruntime's logits on 100 Fashion-MNIST test images
#    equal `ragtag eval --logits` within 1e-4; export then import gives the
#    same logits again;
#  - a CNN (conv + batch norm + relu + pools + residual add + dense) trained
#    briefly in PyTorch and written by torch.onnx.export: imported, its
#    `ragtag eval` logits equal PyTorch's within 1e-4; it fine-tunes with
#    --init / --freeze (when this ragtag has --freeze) and frozen weights
#    stay as they were;
#  - MatMul + Add, Reshape, Dropout, a 2-D batch norm and the other
#    operators PyTorch's CNN does not write, against numpy;
#  - an operator outside ragtag's set (Sin, LSTM) and an attribute ragtag
#    cannot express (dilations) are errors naming the node and what.
# Skips (77) saying why without protobuf-c, python3-onnx, numpy or the data;
# the onnxruntime and PyTorch parts each skip alone when their package is
# missing (onnxruntime is PyPI's: Debian 12's onnx 1.12 has no reference
# evaluator; set RAGTAG_ORT_PYTHON to a python that has it, as .ci/run does).
set -u
RAGTAG=${RAGTAG:-$top_builddir/src/ragtag}
FM=/usr/share/datasets/fashion-mnist
PY=/usr/bin/python3
CHECK="$top_srcdir/tests/onnx_check.py"
[ -f "$FM/t10k-images-idx3-ubyte.gz" ] ||
  { echo "SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"; exit 77; }
if "$RAGTAG" export /dev/null --weights /dev/null -o /dev/null 2>&1 | grep -q "without protobuf-c"; then
  echo "SKIP: ragtag built without protobuf-c (apt-get install libprotobuf-c-dev protobuf-c-compiler)"
  exit 77
fi
$PY -c 'import onnx, numpy' 2>/dev/null ||
  { echo "SKIP: no python3-onnx / python3-numpy (apt-get install python3-onnx python3-numpy)"; exit 77; }
ORT=
for p in ${RAGTAG_ORT_PYTHON:-} /usr/bin/python3 python3; do
  if "$p" -c 'import onnxruntime, numpy' 2>/dev/null; then ORT=$p; break; fi
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fails=0
bad() { echo "FAIL: $1"; fails=$((fails + 1)); }
run() { "$@" >"$tmp/cmd.log" 2>&1 || { cat "$tmp/cmd.log"; return 1; }; }
D="csv:$tmp/d.csv,$tmp/d.csv" # 100 test images (statistics from the same 100)
$PY "$CHECK" data "$FM" "$tmp/d.csv" 100 || exit 1

# a model with every layer type: ranks 4 and 2, padding, bn alone, shortcuts
cat >"$tmp/every.cfg" <<'EOF'
[net]
input = 28x28x1
classes = 10
[conv]
filters = 4
size = 3
pad = 1
batch_normalize = 1
activation = leaky
[batchnorm]
[avgpool]
size = 3
stride = 2
pad = 1
[sigmoid]
[conv]
filters = 4
size = 3
pad = 1
activation = tanh
[leaky]
alpha = 0.2
[dropout]
rate = 0.3
[shortcut]
from = -5
activation = relu
[maxpool]
size = 2
[tanh]
[flatten]
[dense]
units = 32
activation = sigmoid
[batchnorm]
[relu]
[dense]
units = 32
[shortcut]
from = -3
[globalavgpool]
[dense]
units = 10
[softmax]
EOF

# export: checker, onnxruntime, round trip
for m in lenet seedcnn resnet8 every; do
  cfg="$top_srcdir/examples/$m.cfg"
  [ "$m" = every ] && cfg="$tmp/every.cfg"
  run "$RAGTAG" train "$cfg" --data "$D" --epochs 1 --batch 50 --threads 2 --seed 2 \
    --progress off --save "$tmp/$m.trained" || { bad "$m: training"; continue; }
  $PY "$CHECK" perturb "$tmp/$m.trained" "$tmp/$m.st" || { bad "$m: perturb"; continue; }
  run "$RAGTAG" export "$cfg" --weights "$tmp/$m.st" -o "$tmp/$m.onnx" || { bad "$m: export"; continue; }
  run "$RAGTAG" eval "$cfg" --weights "$tmp/$m.st" --data "$D" --logits "$tmp/$m.ragtag.csv" ||
    { bad "$m: eval"; continue; }
  $PY "$CHECK" check "$tmp/$m.onnx" || bad "$m: onnx.checker"
  if [ -n "$ORT" ]; then
    "$ORT" "$CHECK" ort "$tmp/$m.onnx" "$tmp/d.csv" "$tmp/$m.ragtag.csv" || bad "$m: onnxruntime"
  fi
  run "$RAGTAG" import "$tmp/$m.onnx" -o "$tmp/$m.back" || { bad "$m: import of the export"; continue; }
  run "$RAGTAG" eval "$tmp/$m.back/model.cfg" --weights "$tmp/$m.back/weights.safetensors" \
    --data "$D" --logits "$tmp/$m.back.csv" || { bad "$m: eval after the round trip"; continue; }
  # the same layers come back, so the same operations give the same bits
  cmp -s "$tmp/$m.ragtag.csv" "$tmp/$m.back.csv" && echo "ok: $m: the round trip gives identical logits" ||
    { $PY "$CHECK" compare "$tmp/$m.ragtag.csv" "$tmp/$m.back.csv"; bad "$m: round trip logits not identical"; }
done
[ -n "$ORT" ] || echo "SKIP (part): no onnxruntime (pip install onnxruntime, or set RAGTAG_ORT_PYTHON)"

# PyTorch -> ONNX -> ragtag
if $PY -c 'import torch' 2>/dev/null; then
  T="$tmp/torch"
  mkdir -p "$T"
  if $PY "$CHECK" torch "$tmp/d.csv" "$T"; then
    run "$RAGTAG" import "$T/torch.onnx" -o "$T/imp" || bad "torch: import"
    cat "$T/imp/model.cfg"
    for k in 'batch_normalize = 1' '\[batchnorm\]' '\[shortcut\]' '\[avgpool\]' '\[maxpool\]' '\[dense\]'; do
      grep -q "^$k" "$T/imp/model.cfg" || bad "torch: the imported model has no $k"
    done
    run "$RAGTAG" eval "$T/imp/model.cfg" --weights "$T/imp/weights.safetensors" --data "$D" \
      --logits "$T/ragtag.csv" && $PY "$CHECK" compare "$T/torch.csv" "$T/ragtag.csv" ||
      bad "torch: ragtag's logits are not PyTorch's"
    # fine-tuning the imported model (--init/--freeze come with transfer learning)
    if "$RAGTAG" train --help 2>&1 | grep -q -- '--freeze'; then
      run "$RAGTAG" train "$T/imp/model.cfg" --data "$D" --epochs 1 --batch 50 --threads 2 \
        --init "$T/imp/weights.safetensors" --freeze conv1,bn2,conv5,conv6 --save "$T/tuned.st" ||
        bad "torch: fine-tuning with --init/--freeze"
      $PY "$CHECK" same "$T/imp/weights.safetensors" "$T/tuned.st" conv1.weight conv1.bias \
        bn2.weight bn2.bias conv5.weight conv6.weight || bad "torch: frozen weights changed"
      $PY "$CHECK" differ "$T/imp/weights.safetensors" "$T/tuned.st" dense10.weight ||
        bad "torch: fine-tuning changed nothing"
    else
      echo "SKIP (part): this ragtag has no train --freeze: fine-tuning not tested"
    fi
  else
    bad "torch: building and exporting the PyTorch model"
  fi
else
  echo "SKIP (part): no python3-torch: the PyTorch import is not tested"
fi

# MatMul + Add, Reshape, Constant, Identity, Dropout, a 2-D batch norm,
# Sigmoid, Tanh and a final Softmax, against numpy's logits
if $PY "$CHECK" matmul "$tmp/mm.onnx" "$tmp/d.csv" "$tmp/mm.numpy.csv"; then
  run "$RAGTAG" import "$tmp/mm.onnx" -o "$tmp/mm" &&
    run "$RAGTAG" eval "$tmp/mm/model.cfg" --weights "$tmp/mm/weights.safetensors" --data "$D" \
      --logits "$tmp/mm.ragtag.csv" &&
    $PY "$CHECK" compare "$tmp/mm.numpy.csv" "$tmp/mm.ragtag.csv" || bad "MatMul graph"
else
  bad "building the MatMul graph"
fi

# what ragtag cannot import: named node, operator, attribute; nothing written
expect_error() { # FILE WHAT...: import fails and its message has each WHAT
  f=$1
  shift
  "$RAGTAG" import "$f" -o "$tmp/err.out" >"$tmp/err.log" 2>&1 && { bad "$f was imported"; return; }
  for w in "$@"; do
    grep -q -- "$w" "$tmp/err.log" || { bad "import $f: no '$w' in: $(cat "$tmp/err.log")"; return; }
  done
  [ ! -e "$tmp/err.out/model.cfg" ] || bad "import $f failed but wrote a model file"
  echo "ok: $(cat "$tmp/err.log")"
}
$PY "$CHECK" unsupported "$tmp/sin.onnx" Sin && expect_error "$tmp/sin.onnx" "node 'odd_node'" "(Sin)" "not supported"
$PY "$CHECK" unsupported "$tmp/lstm.onnx" LSTM && expect_error "$tmp/lstm.onnx" "node 'the_lstm'" "(LSTM)" "not supported"
for a in dilations pads group; do
  $PY "$CHECK" badconv "$tmp/$a.onnx" $a && expect_error "$tmp/$a.onnx" "node 'odd_conv'" "(Conv)" "attribute $a"
done
$PY "$CHECK" shortdata "$tmp/short.onnx" && expect_error "$tmp/short.onnx" "tensor w holds 10 values but its dims say 36"
head -c 3000 "$tmp/lenet.onnx" >"$tmp/cut.onnx"
expect_error "$tmp/cut.onnx" "cut.onnx" "not an ONNX model"
head -c 300 "$tmp/d.csv" >"$tmp/junk.onnx"
expect_error "$tmp/junk.onnx" "junk.onnx" "not an ONNX model"
"$RAGTAG" export "$top_srcdir/examples/seedcnn.cfg" --weights "$tmp/lenet.st" -o "$tmp/x.onnx" \
  >"$tmp/err.log" 2>&1 && bad "export with another model's weights succeeded"
grep -q "lenet.st" "$tmp/err.log" && echo "ok: $(cat "$tmp/err.log")" || bad "export error: $(cat "$tmp/err.log")"
[ ! -e "$tmp/x.onnx" ] || bad "a failed export left $tmp/x.onnx"
# the command line: the format by extension, usage errors exit 2
"$RAGTAG" import "$tmp/m.pt" -o "$tmp/u" >"$tmp/err.log" 2>&1
[ $? -eq 2 ] && grep -q "unknown kind of model (accepted: .onnx" "$tmp/err.log" &&
  echo "ok: $(cat "$tmp/err.log")" || bad "import m.pt: $(cat "$tmp/err.log")"
"$RAGTAG" import "$tmp/lenet.onnx" --weights "$tmp/lenet.st" -o "$tmp/u" >"$tmp/err.log" 2>&1
[ $? -eq 2 ] && grep -q "an ONNX file holds its weights" "$tmp/err.log" &&
  echo "ok: $(cat "$tmp/err.log")" || bad "import .onnx --weights: $(cat "$tmp/err.log")"
"$RAGTAG" export "$top_srcdir/examples/lenet.cfg" -o "$tmp/u.onnx" >"$tmp/err.log" 2>&1
[ $? -eq 2 ] && grep -q "needs MODEL.cfg, --weights FILE and -o OUT" "$tmp/err.log" &&
  echo "ok: $(cat "$tmp/err.log")" || bad "export without --weights: $(cat "$tmp/err.log")"
[ $fails -eq 0 ] || { echo "$fails failure(s)"; exit 1; }
echo "all ONNX checks passed"
