#!/bin/sh
# Transfer learning from the command line, with real processes
# (docs/transfer.md):
#  - a truncated --init file is an error naming the file;
#  - --init lists what it loaded and what it skipped, and why;
#  - --lr-scale prints the effective learning rate;
#  - eval --classes evaluates a fine-tuned model on its labels;
#  - a 2-worker sync cluster (`ragtag coord` + 2 `ragtag worker`) started
#    from --init with --freeze conv1,conv3: the replicas stay identical, the
#    frozen tensors come out bit for bit as --init gave them while the
#    others change, and a step exchanges fewer bytes than the same run
#    without --freeze;
#  - 3 gossip workers leave the frozen tensors bit for bit too.
# Ports: 30000-30999 (TRANSFER_PORT overrides the base), below 32768,
# outside Linux's ephemeral range, as every test's.
set -u
RAGTAG=${RAGTAG:-./src/ragtag}
top_srcdir=${top_srcdir:-.}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${RAGTAG_DATA_DIR:-}" ]; then
  echo "SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"
  exit 77
fi
if ! "$RAGTAG" worker --help >/dev/null 2>&1; then
  echo "SKIP: built without ZeroMQ (no ragtag worker)"
  exit 77
fi
if ! command -v python3 >/dev/null 2>&1; then
  echo "SKIP: python3 not installed (it compares the tensors of two files)"
  exit 77
fi
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
lenet="$top_srcdir/examples/lenet.cfg"
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails + 1)); }
port=${TRANSFER_PORT:-$((30000 + ($$ % 80) * 12))}

# tensors NAME... of two safetensors files: "same" or "differ" for each
compare() { # a b names...
  python3 - "$@" <<'EOF'
import json, struct, sys
def read(path):
    with open(path, 'rb') as f:
        b = f.read()
    n = struct.unpack('<Q', b[:8])[0]
    h = json.loads(b[8:8 + n])
    return {k: b[8 + n + v['data_offsets'][0]:8 + n + v['data_offsets'][1]]
            for k, v in h.items() if k != '__metadata__'}
a, b = read(sys.argv[1]), read(sys.argv[2])
print(' '.join('same' if a[k] == b[k] else 'differ' for k in sys.argv[3:]))
EOF
}

small="--classes 5-9 --limit 960 --val 0.1 --epochs 1 --batch 48 --progress lines"

# a model trained on classes 0-4 to start from
if "$RAGTAG" train "$lenet" --classes 0-4 --limit 960 --val 0 --epochs 1 --progress off \
     --save "$tmp/pre.safetensors" >"$tmp/pre.log" 2>&1; then
  ok "a lenet trained on classes 0-4"
else
  bad "pretraining failed: $(tail -3 "$tmp/pre.log")"
fi

# a truncated --init file: an error naming it, before any training
head -c 3000 "$tmp/pre.safetensors" >"$tmp/cut.safetensors"
if "$RAGTAG" train "$lenet" --init "$tmp/cut.safetensors" $small >"$tmp/cut.log" 2>&1; then
  bad "a truncated --init file was accepted"
elif grep -q -- "--init.*$tmp/cut.safetensors" "$tmp/cut.log" && ! grep -q "^epoch" "$tmp/cut.log"; then
  ok "a truncated --init file: $(grep -- --init "$tmp/cut.log" | head -1)"
else
  bad "a truncated --init file: $(cat "$tmp/cut.log")"
fi

# --init into the 5-class model, and --lr-scale, in one process
"$RAGTAG" train "$top_srcdir/examples/lenet-finetune.cfg" --init "$tmp/pre.safetensors" $small \
  --batch 96 --lr-scale linear --warmup 0 --save "$tmp/one.safetensors" >"$tmp/one.log" 2>&1
if grep -q "loaded 8 tensors (60856 values): conv1.weight" "$tmp/one.log" &&
   grep -q "skipped 2 tensors of the model, which keep their initialisation: dense7.weight (shape \[10, 84\] in the file, \[5, 84\] here)" "$tmp/one.log"; then
  ok "--init names what it loaded and what it skipped"
else
  bad "--init's log: $(grep -- --init "$tmp/one.log")"
fi
if grep -q "effective learning rate 0.0045 = --lr 0.003 x 1.5 (--lr-scale linear: batch 96, base batch 64)" "$tmp/one.log"; then
  ok "--lr-scale linear: $(grep "effective learning rate" "$tmp/one.log")"
else
  bad "--lr-scale's line: $(grep -i "learning rate" "$tmp/one.log")"
fi

# eval selects and renumbers the labels as training did
if "$RAGTAG" eval "$top_srcdir/examples/lenet-finetune.cfg" --weights "$tmp/one.safetensors" \
     --classes 5-9 >"$tmp/eval.log" 2>&1 && grep -q "test set: 5000 images" "$tmp/eval.log" &&
   ! "$RAGTAG" eval "$top_srcdir/examples/lenet-finetune.cfg" --weights "$tmp/one.safetensors" \
     >"$tmp/eval2.log" 2>&1 && grep -q "has 5 classes" "$tmp/eval2.log"; then
  ok "eval --classes 5-9: $(head -1 "$tmp/eval.log")"
else
  bad "eval --classes: $(cat "$tmp/eval.log" "$tmp/eval2.log")"
fi

# shards keep their labels on disk: --classes is refused, pack selects them
if "$RAGTAG" pack --data fashion-mnist --classes 5-9 --limit 300 -o "$tmp/sh" >"$tmp/pack.log" 2>&1 &&
   grep -q "300 train records" "$tmp/pack.log" &&
   ! "$RAGTAG" train "$lenet" --data "shards:$tmp/sh" --classes 0-2 --epochs 1 >"$tmp/sh.log" 2>&1 &&
   grep -q -- "--classes 0-2: not available with shards:DIR" "$tmp/sh.log"; then
  ok "pack --classes; train --classes on shards is refused, saying why"
else
  bad "pack --classes / shards: $(cat "$tmp/pack.log" "$tmp/sh.log")"
fi

cluster() { # name [flags]: coord + 2 workers, lenet from --init
  name=$1
  shift
  "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --ring-port $((port + 1)) --name a \
    --threads 1 --connect-timeout 60 >"$tmp/$name.w0" 2>&1 &
  pids="$pids $!"
  "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --ring-port $((port + 2)) --name b \
    --threads 1 --connect-timeout 60 >"$tmp/$name.w1" 2>&1 &
  pids="$pids $!"
  "$RAGTAG" coord "$lenet" --workers 2 --listen "tcp://127.0.0.1:$port" \
    --init "$tmp/pre.safetensors" $small --save "$tmp/$name.safetensors" "$@" \
    >"$tmp/$name.log" 2>&1
  rc=$?
  for p in $pids; do wait "$p" 2>/dev/null; done
  pids=""
  return $rc
}
cluster3() { # name [flags]: coord + 3 workers
  name=$1
  shift
  for i in 0 1 2; do
    "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --ring-port $((port + 1 + i)) --name "w$i" \
      --threads 1 --connect-timeout 60 >"$tmp/$name.w$i" 2>&1 &
    pids="$pids $!"
  done
  "$RAGTAG" coord "$lenet" --workers 3 --listen "tcp://127.0.0.1:$port" \
    --init "$tmp/pre.safetensors" $small --save "$tmp/$name.safetensors" "$@" \
    >"$tmp/$name.log" 2>&1
  rc=$?
  for p in $pids; do wait "$p" 2>/dev/null; done
  pids=""
  return $rc
}
bytes() { sed -n 's/.*gradient exchange: [0-9]* of [0-9]* parameters (\([0-9]*\) bytes a step.*/\1/p' "$1" | head -1; }

if cluster frozen --freeze conv1,conv3 && grep -q "replicas identical" "$tmp/frozen.log"; then
  ok "2 workers with conv1,conv3 frozen: $(grep "replicas identical" "$tmp/frozen.log")"
else
  bad "the frozen cluster run: $(tail -5 "$tmp/frozen.log")"
fi
got=$(compare "$tmp/pre.safetensors" "$tmp/frozen.safetensors" conv1.weight conv1.bias \
      conv3.weight conv3.bias dense5.weight dense7.weight)
if [ "$got" = "same same same same differ differ" ]; then
  ok "frozen tensors bit for bit as --init gave them, the others trained"
else
  bad "frozen conv1 conv1.b conv3 conv3.b / trained dense5 dense7, against --init: $got"
fi
port=$((port + 3))
if cluster whole && grep -q "replicas identical" "$tmp/whole.log"; then
  ok "the same run without --freeze"
else
  bad "the cluster run without --freeze: $(tail -5 "$tmp/whole.log")"
fi
bf=$(bytes "$tmp/frozen.log")
bw=$(bytes "$tmp/whole.log")
if [ -n "$bf" ] && [ -n "$bw" ] && [ "$bf" -lt "$bw" ] && [ "$bf" -eq $(((61706 - 2572 + 27) * 4)) ]; then
  ok "a step reduces $bf bytes with the convolutions frozen, $bw without"
else
  bad "bytes a step: frozen '$bf', not frozen '$bw'"
fi

# gossip averages whole replicas, and the mean of three equal floats need
# not be that float: the frozen layers stay out of the epoch's averaging
port=$((port + 3))
cluster3 gossip --freeze conv1,conv3 --mode gossip
got=$(compare "$tmp/pre.safetensors" "$tmp/gossip.safetensors" conv1.weight conv1.bias \
      conv3.weight conv3.bias dense5.weight)
if grep -q "replicas identical" "$tmp/gossip.log" && [ "$got" = "same same same same differ" ]; then
  ok "3 gossip workers: the frozen tensors bit for bit as --init gave them"
else
  bad "3 gossip workers with conv1,conv3 frozen, against --init: $got; $(tail -3 "$tmp/gossip.log")"
fi

[ "$fails" -eq 0 ] && echo "all transfer checks passed"
[ "$fails" -eq 0 ]
