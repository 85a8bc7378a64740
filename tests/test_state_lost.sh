#!/bin/sh
# A run whose state is lost with the last member that held it (real
# processes on 127.0.0.1): one member trains with --checkpoint; a second
# joins and is admitted while the first is paused (SIGSTOP: it cannot hand
# the state over), then the first is killed. No member holds the state any
# more: the coordinator must stop at once with exit status 1 (not 0, not a
# wait for more joiners, who would bring no state either), say that the
# run's state is lost and name its last checkpoint, whole; the joiner must
# exit too. `coord --resume` with a new worker then finishes the run from
# that checkpoint, every epoch's samples used once.
set -u
RAGTAG=${RAGTAG:-./src/ragtag}
top_srcdir=${top_srcdir:-.}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${RAGTAG_DATA_DIR:-}" ]; then
  echo "SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"
  exit 77
fi
. "$top_srcdir/tests/elastic-lib.sh"
model="$top_srcdir/examples/lenet.cfg"
ntrain=10800
run="--data fashion-mnist --limit 12000 --val 0.1 --batch 48 --partition static --progress lines"
# Ports: 32000-32699, this test's own block (below Linux's ephemeral range).
port=$((32000 + ($$ % 60) * 10))
ck="$tmp/ck"

worker() { # name log
  "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --name "$1" --threads 1 --connect-timeout 60 \
    >"$2" 2>&1 &
  pids="$pids $!"
  echo $! >>"$tmp/pids"
}
# nothing of this test may outlive 180 s (the list in a file: it grows)
( sleep 180 & s=$!; trap 'kill $s; exit 0' TERM; wait $s; kill -9 $(cat "$tmp/pids") 2>/dev/null ) &
watchdog=$!

"$RAGTAG" coord "$model" --workers 1 --max-workers 3 --listen "tcp://127.0.0.1:$port" $run \
  --epochs 4 --checkpoint "$ck" >"$tmp/c1.log" 2>&1 & c=$!
pids="$pids $c"; echo $c >>"$tmp/pids"
worker a1 "$tmp/a1.log"; a1=$!
until_there -f "$ck/last.safetensors" # epoch 1 closed: a checkpoint to go back to
kill -STOP "$a1"
worker b1 "$tmp/b1.log"; b1=$!
until_there "admitted b1" "$tmp/c1.log"
# a second joiner, held (SIGSTOP) while it sets up, so that it is still
# joining when the state is found lost: the coordinator must not wait for
# it (it brings no state) nor take the run for finished
worker b2 "$tmp/b2.log"; b2=$!
until_there "worker b2 joining" "$tmp/c1.log"
kill -STOP "$b2"
kill -9 "$a1"
wait "$c"; s1=$?
wait "$b1"; sb1=$?
kill -9 "$b2"
if [ $s1 -eq 1 ] && [ $sb1 -ne 0 ] &&
   grep -q "the run's state is lost: every member that held it is gone (b1, rank 0: no member of the new group holds the run's state (all 1 just joined)); its last checkpoint, $ck/last.safetensors, is whole: run the coordinator again with --resume" "$tmp/c1.log" &&
   ! grep -q "^ragtag: done" "$tmp/c1.log"; then
  ok "the last holder of the state lost before the joiner got it, another joiner on its way: the run stopped (status 1), naming the checkpoint"
else
  bad "state lost: coordinator status $s1, joiner's status $sb1"
  grep "members\|lost\|error\|done" "$tmp/c1.log" | tail -n 6
fi

# the run goes on from the checkpoint named, with a new worker
port=$((port + 1))
"$RAGTAG" coord "$model" --workers 1 --listen "tcp://127.0.0.1:$port" $run --epochs 4 \
  --checkpoint "$ck" --resume --metrics "$tmp/m2.jsonl" >"$tmp/c2.log" 2>&1 & c=$!
pids="$pids $c"; echo $c >>"$tmp/pids"
worker r1 "$tmp/r1.log"
wait "$c"; s2=$?
wait_all
if [ $s2 -eq 0 ] && grep -q "resuming from $ck/last.safetensors at epoch [1-3]" "$tmp/c2.log" &&
   grep -q "^epoch 4/4: " "$tmp/c2.log" && grep -q "\"samples\": $ntrain[,}]" "$tmp/m2.jsonl" &&
   ! grep "\"samples\"" "$tmp/m2.jsonl" | grep -vq "\"samples\": $ntrain[,}]"; then
  ok "coord --resume finished the run from that checkpoint ($(grep -o "at epoch [0-9]*, step [0-9]*" "$tmp/c2.log" | head -n 1)), samples exact"
else
  bad "the resume: status $s2"
  tail -n 5 "$tmp/c2.log"
fi
kill "$watchdog" 2>/dev/null

[ $fails -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all checks of a lost state passed"
