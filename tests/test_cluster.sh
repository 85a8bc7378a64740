#!/bin/sh
# Clusters of real processes on 127.0.0.x: `ragtag coord` and `ragtag worker`
# started in every order, a worker that never comes (a clear error within
# the join timeout), --min-workers, --serve-data with the worker's cache,
# garbage sent to every listening socket during a run, and Ctrl-C on a
# `train --workers 2` run (every worker stops at the same step, the
# checkpoint is written, exit status 130) and its --resume (the weights of
# the uninterrupted run, bit for bit); kill -9 of that parent leaves no
# worker behind, and workers whose coordinator is killed exit, saying so,
# within --worker-timeout; a killed worker is seen from its closed
# connection within a second or two (in average mode, which cannot change
# members, it stops the run; sync mode goes on: tests/test_elastic.sh).
set -u
RAGTAG=${RAGTAG:-./src/ragtag}
top_srcdir=${top_srcdir:-.}
top_builddir=${top_builddir:-.}
JUNK=${JUNK:-$top_builddir/tests/net_junk}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${RAGTAG_DATA_DIR:-}" ]; then
  echo "SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"
  exit 77
fi
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
model="$top_srcdir/examples/lenet.cfg"
small="--data fashion-mnist --limit 960 --val 0.1 --epochs 1 --batch 48 --progress lines"
fails=0
# A free port for each coordinator: 20000 + a little of the pid.
# Ports: 20000-20999, this test's own block. Every test's listen ports lie
# below 32768, outside Linux's ephemeral range (32768-60999), so the kernel
# never hands one to another test's outgoing or port-0 socket meanwhile.
port=$((20000 + ($$ % 97) * 10))

ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails + 1)); }

worker() { # name address log [extra flags]
  name=$1 addr=$2 log=$3
  shift 3
  "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --advertise "$addr" --name "$name" \
    --threads 1 --connect-timeout 60 "$@" >"$log" 2>&1 &
  pids="$pids $!"
}

coord() { # log [flags]
  log=$1
  shift
  "$RAGTAG" coord "$model" --listen "tcp://127.0.0.1:$port" "$@" >"$log" 2>&1
}

wait_workers() {
  for p in $pids; do wait "$p" 2>/dev/null || true; done
  pids=""
}

training_started() { # log: wait (up to 30 s) until a run's first plan or epoch line
  i=0
  while [ $i -lt 300 ] && ! grep -q "\[plan\]\|epoch 1/" "$1"; do sleep 0.1; i=$((i + 1)); done
}

check_run() { # what log status
  if [ "$3" -eq 0 ] && grep -q "replicas identical" "$2"; then ok "$1"; else
    bad "$1 (status $3)"; tail -n 20 "$2"; fi
}

# ---- start-up in every order ----------------------------------------------------------
port=$((port + 1))
coord "$tmp/c1.log" --workers 3 $small --join-timeout 60 & c=$!
sleep 0.5
worker a 127.0.0.2 "$tmp/a1.log"; worker b 127.0.0.3 "$tmp/b1.log"; worker c 127.0.0.4 "$tmp/c1w.log"
wait $c; st=$?; wait_workers
check_run "coordinator first, then 3 workers" "$tmp/c1.log" $st

port=$((port + 1))
worker a 127.0.0.2 "$tmp/a2.log"; worker b 127.0.0.3 "$tmp/b2.log"; worker c 127.0.0.4 "$tmp/c2w.log"
sleep 1.5
coord "$tmp/c2.log" --workers 3 $small --join-timeout 60; st=$?; wait_workers
check_run "3 workers first, the coordinator 1.5 s later" "$tmp/c2.log" $st
grep -q "waiting for the coordinator\|joining" "$tmp/a2.log" || true

port=$((port + 1))
worker c 127.0.0.4 "$tmp/c3w.log"
sleep 0.3
coord "$tmp/c3.log" --workers 3 $small --join-timeout 60 --no-shm & c=$!
sleep 0.3
worker a 127.0.0.2 "$tmp/a3.log"
sleep 0.3
worker b 127.0.0.3 "$tmp/b3.log"
wait $c; st=$?; wait_workers
check_run "interleaved: worker, coordinator, worker, worker (TCP ring)" "$tmp/c3.log" $st
# ranks follow names, not the order of arrival
if grep -q "^ *0  a " "$tmp/c3.log" && grep -q "^ *2  c " "$tmp/c3.log"; then
  ok "ranks are given by name, whatever the order of arrival"
else bad "ranks by name"; cat "$tmp/c3.log"; fi

# ---- a worker that never comes -------------------------------------------------------------
port=$((port + 1))
worker a 127.0.0.2 "$tmp/a4.log"; worker b 127.0.0.3 "$tmp/b4.log"
t0=$(date +%s)
coord "$tmp/c4.log" --workers 3 $small --join-timeout 3; st=$?
t1=$(date +%s); wait_workers
# the bound only tells "gave up at its timeout" from "hung": not a speed
if [ $st -eq 1 ] && grep -q "only 2 of 3 workers joined within --join-timeout 3 s" "$tmp/c4.log" &&
   grep -q "joined: a (.*), b (.*); missing: 1 more" "$tmp/c4.log" && [ $((t1 - t0)) -le 30 ]; then
  ok "a missing worker: clear error after $((t1 - t0)) s"
else bad "missing worker (status $st, $((t1 - t0)) s)"; cat "$tmp/c4.log"; fi
if grep -q "aborted the run" "$tmp/a4.log"; then ok "the waiting workers are told why"; else
  bad "workers not told"; cat "$tmp/a4.log"; fi

# ---- --min-workers ---------------------------------------------------------------------------
port=$((port + 1))
worker a 127.0.0.2 "$tmp/a5.log"; worker b 127.0.0.3 "$tmp/b5.log"
coord "$tmp/c5.log" --workers 3 --min-workers 2 --join-timeout 2 $small; st=$?; wait_workers
if [ $st -eq 0 ] && grep -q "starting with the 2 of 3 workers" "$tmp/c5.log" &&
   grep -q "on all 2 workers" "$tmp/c5.log"; then ok "--min-workers 2 starts with 2 of 3"; else
  bad "--min-workers (status $st)"; cat "$tmp/c5.log"; fi

# ---- --serve-data and the cache ----------------------------------------------------------------
mkdir -p "$tmp/data" "$tmp/cache"
cp /usr/share/datasets/fashion-mnist/train-*-ubyte.gz "$tmp/data/" 2>/dev/null ||
  cp "${RAGTAG_DATA_DIR:-}"/fashion-mnist/train-*-ubyte.gz "$tmp/data/"
for round in 1 2; do
  port=$((port + 1))
  RAGTAG_CACHE_DIR="$tmp/cache" worker a 127.0.0.2 "$tmp/a6$round.log"
  RAGTAG_CACHE_DIR="$tmp/cache" worker b 127.0.0.3 "$tmp/b6$round.log"
  "$RAGTAG" coord "$model" --listen "tcp://127.0.0.1:$port" --workers 2 --serve-data \
    --data "fashion-mnist:$tmp/data" --limit 960 --epochs 1 --batch 48 --progress lines \
    >"$tmp/c6$round.log" 2>&1; st=$?; wait_workers
  check_run "--serve-data, round $round" "$tmp/c6$round.log" $st
done
if grep -q "fetched" "$tmp/a61.log" && grep -q "2 from the cache" "$tmp/a62.log" &&
   grep -q "0 fetched" "$tmp/a62.log"; then ok "the second run takes the data from the cache"; else
  bad "cache"; cat "$tmp/a61.log" "$tmp/a62.log"; fi

# ---- garbage to every socket during a run ----------------------------------------------
# Twice: --insecure, where every byte reaches the decoders; and with
# credentials, where a stranger is refused in the CurveZMQ handshake and an
# invited client's garbage (net_junk with the join string) still meets the
# decoders of the coordinator. Neither run may notice more than log lines.
"$RAGTAG" keygen "$tmp/keys" >/dev/null || bad "ragtag keygen"
junk_run() { # tag "coordinator flags" "worker flags"
  tag=$1 cf=$2 wf=$3
  port=$((port + 1))
  worker a 127.0.0.2 "$tmp/a7$tag.log" $wf; worker b 127.0.0.3 "$tmp/b7$tag.log" $wf
  worker c 127.0.0.4 "$tmp/c7w$tag.log" $wf
  coord "$tmp/c7$tag.log" --workers 3 --no-shm --data fashion-mnist --limit 6000 --val 0.1 \
    --epochs 3 --batch 32 --progress lines $cf & c=$!
  # the ring inboxes appear in the "joined" lines
  i=0
  joined() { cat "$tmp/c7$tag.log" 2>/dev/null | grep -c ' joined from '; }
  while [ $i -lt 600 ] && [ "$(joined)" -lt 3 ]; do sleep 0.1; i=$((i + 1)); done
  eps=$(sed -n 's/.* joined from .*, \(tcp:\/\/[0-9.]*:[0-9]*\)).*/\1/p' "$tmp/c7$tag.log")
  RAGTAG_JOIN= "$JUNK" router "tcp://127.0.0.1:$port" 2 >/dev/null 2>&1
  for e in $eps; do "$JUNK" pull "$e" 2 >/dev/null 2>&1; done
  RAGTAG_JOIN=$(cat "$tmp/keys/join") "$JUNK" router "tcp://127.0.0.1:$port" 1 >/dev/null 2>&1
  wait $c; st=$?; wait_workers
}
junk_run plain --insecure --insecure
check_run "--insecure: a run with garbage sent to the coordinator and every ring inbox" "$tmp/c7plain.log" $st
if [ -n "$eps" ] && grep -q "\[coord\] dropped a message" "$tmp/c7plain.log" &&
   cat "$tmp/a7plain.log" "$tmp/b7plain.log" "$tmp/c7wplain.log" | grep -q "dropped a message"; then
  ok "--insecure: bad messages were logged and dropped (coordinator and workers)"
else bad "no drops logged (endpoints: $eps)"; cat "$tmp/c7plain.log"; fi
junk_run curve "--keys $tmp/keys" "--join-file $tmp/keys/join"
wlogs="$tmp/a7curve.log $tmp/b7curve.log $tmp/c7wcurve.log"
check_run "CurveZMQ: a run with garbage sent to the coordinator and every ring inbox" "$tmp/c7curve.log" $st
# (junk that is not a ZMTP greeting ends the handshake early; a plain one
# is a mechanism mismatch: which one libzmq sees first varies)
if grep -q "\[coord\] refused a connection from a client of tcp://127.0.0.1:$port: \(a client without CurveZMQ\|a handshake that ended early\)" "$tmp/c7curve.log" &&
   [ "$(grep -c 'refused a connection' "$tmp/c7curve.log")" -eq 1 ] &&
   ! cat $wlogs | grep -q "dropped a message" &&
   grep -q "\[coord\] dropped a message" "$tmp/c7curve.log"; then
  ok "CurveZMQ: strangers refused in the handshake (one log line a minute), nothing reached a ring; an invited client's garbage dropped"
else bad "CurveZMQ garbage run"; grep -h "refused\|dropped" "$tmp/c7curve.log" $wlogs; fi

# ---- Ctrl-C on train --workers 2, then --resume --------------------------------------------
# A resumed run ends with the weights of an uninterrupted one, bit for bit.
# --partition static: balanced shares follow measured speeds, so two runs
# cut batches differently and agree only to float rounding.
flags8="--workers 2 --threads 1 --data fashion-mnist --limit 12000 --val 0.1 --epochs 3 --batch 32
  --progress lines --log-every 10 --partition static"
run8() { # dir [flags]
  d=$1
  shift
  "$RAGTAG" train "$model" $flags8 --metrics "$tmp/$d/m.jsonl" --checkpoint "$tmp/$d" \
    --save "$tmp/$d/final.safetensors" "$@"
}
mkdir -p "$tmp/full" "$tmp/part"
run8 full >"$tmp/c8a.log" 2>&1; st=$?
check_run "an uninterrupted run for comparison" "$tmp/c8a.log" $st
"$RAGTAG" train "$model" $flags8 --metrics "$tmp/part/m.jsonl" --checkpoint "$tmp/part" \
  --save "$tmp/part/final.safetensors" >"$tmp/c8.log" 2>&1 & c=$!
i=0
while [ $i -lt 600 ] && ! grep -q '"step": [0-9]*[6-9]0,' "$tmp/part/m.jsonl" 2>/dev/null; do
  sleep 0.05; i=$((i + 1)); done
kill -INT $c
wait $c; st=$?
if [ $st -eq 130 ] && grep -q "interrupted at step" "$tmp/c8.log" && [ -f "$tmp/part/last.safetensors" ]; then
  ok "Ctrl-C stops both workers at one step and saves the checkpoint"
else bad "Ctrl-C (status $st)"; cat "$tmp/c8.log"; fi
step=$(sed -n 's/.*interrupted at step \([0-9]*\).*/\1/p' "$tmp/c8.log" | head -n 1)
cp -r "$tmp/part" "$tmp/one" # one process trains on: a copy
if [ -n "$step" ] && "$RAGTAG" train "$model" --threads 1 --data fashion-mnist --limit 12000 --val 0.1 \
   --epochs 1 --batch 32 --progress off --checkpoint "$tmp/one" --resume >"$tmp/c9.log" 2>&1 &&
   grep -q "resumed from .* step $step" "$tmp/c9.log"; then
  ok "the checkpoint of step $step loads in one process"
else bad "one-process resume"; cat "$tmp/c9.log"; fi
run8 part --resume >"$tmp/c10.log" 2>&1; st=$?
if [ $st -eq 0 ] && grep -q "resuming from .* step $step" "$tmp/c10.log" &&
   cmp -s "$tmp/full/final.safetensors" "$tmp/part/final.safetensors"; then
  ok "2 workers resumed at step $step end bitwise like the uninterrupted run"
else bad "2-worker resume (status $st)"; tail -n 20 "$tmp/c10.log"; fi

# ---- kill -9 of the `train --workers` parent: no worker outlives it ---------------------
"$RAGTAG" train "$model" --workers 2 --threads 1 --data fashion-mnist --limit 12000 --val 0 \
  --epochs 5 --batch 32 --progress lines >"$tmp/c11.log" 2>&1 & c=$!
training_started "$tmp/c11.log"
kids=$(pgrep -P $c | tr '\n' ' ')
kill -9 $c
wait $c 2>/dev/null
alive() { for k in $kids; do st=$(ps -o stat= -p "$k" 2>/dev/null); case "$st" in ""|Z*) ;; *) echo "$k"; esac; done; }
i=0
while [ $i -lt 50 ] && [ -n "$(alive)" ]; do sleep 0.1; i=$((i + 1)); done
if [ -n "$kids" ] && [ -z "$(alive)" ]; then
  ok "kill -9 of the train --workers parent: its workers ($kids) died with it within $((i / 10)).$((i % 10)) s"
else bad "workers outlived their killed parent: kids '$kids', alive '$(alive)'"; for k in $(alive); do kill -9 "$k"; done; fi

# ---- kill -9 of a coordinator: its workers notice within --worker-timeout ---------------
port=$((port + 1))
"$RAGTAG" coord "$model" --workers 2 --listen "tcp://127.0.0.1:$port" --data fashion-mnist \
  --limit 12000 --val 0 --epochs 50 --batch 32 --progress lines --worker-timeout 4 \
  >"$tmp/c12.log" 2>&1 & c=$!
# --coord-timeout 0: no waiting for a restarted coordinator (tests/test_coord_loss.sh)
worker k1 127.0.0.2 "$tmp/k1.log" --coord-timeout 0; k1=$!
worker k2 127.0.0.3 "$tmp/k2.log" --coord-timeout 0; k2=$!
training_started "$tmp/c12.log"
sleep 1
kill -9 $c
wait $c 2>/dev/null
t0=$(date +%s)
wait $k1; s1=$?
wait $k2; s2=$?
waited=$(($(date +%s) - t0))
pids=""
if [ $s1 -ne 0 ] && [ $s2 -ne 0 ] && [ $waited -le 8 ] &&
   grep -q "lost the coordinator" "$tmp/k1.log" && grep -q "lost the coordinator" "$tmp/k2.log"; then
  ok "kill -9 of the coordinator: both workers said so and exited (status $s1, $s2) within ${waited} s (--worker-timeout 4)"
else bad "workers after their coordinator was killed: status $s1 $s2 after ${waited} s"; tail -n 3 "$tmp/k1.log" "$tmp/k2.log"; fi

# ---- below --min-workers: a killed worker, named; no joiner within --join-timeout stops the run --
port=$((port + 1))
"$RAGTAG" coord "$model" --workers 2 --min-workers 2 --join-timeout 2 \
  --listen "tcp://127.0.0.1:$port" --data fashion-mnist \
  --limit 12000 --val 0 --epochs 50 --batch 32 --progress lines --mode average \
  >"$tmp/c13.log" 2>&1 & c=$!
worker d1 127.0.0.2 "$tmp/d1.log"; d1=$!
worker d2 127.0.0.3 "$tmp/d2.log"; d2=$!
training_started "$tmp/c13.log"
sleep 1
kill -9 $d2
t0=$(date +%s)
wait $c; sc=$?
waited=$(($(date +%s) - t0))
wait $d1; s1=$?
wait $d2 2>/dev/null
pids=""
if [ $sc -ne 0 ] && [ $s1 -ne 0 ] && [ $waited -le 8 ] &&
   grep -q "lost rank [0-9] (d2, [^)]*): its connection closed" "$tmp/c13.log" &&
   grep -q "only 1 worker left (--min-workers 2) and none joined within 2 s" "$tmp/c13.log"; then
  ok "kill -9 of one of 2 workers with --min-workers 2: named at once, the run stopped after --join-timeout 2 (${waited} s)"
else bad "below --min-workers: coordinator status $sc, worker status $s1 after ${waited} s"; tail -n 3 "$tmp/c13.log"; fi

[ $fails -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all cluster checks passed"
