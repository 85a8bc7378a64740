#!/bin/sh
# Average and gossip modes keep going when members change (real processes
# on 127.0.0.1): kill -9 of one of 4 workers at a random moment, a worker
# that joins mid-run, and churn (two losses and two joins in one run).
# Both modes go back to their last agreement (average: the last averaging;
# gossip: the epoch's start or close) and walk the samples since with the
# members left (src/dist_commit.c). Each run must
# finish with status 0, name the lost worker, end with identical replicas,
# use every sample exactly once in every epoch ("samples" in the metrics),
# and (for the kill) reach the fault-free run's test accuracy within a point.
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
# Ports: 22000-22999, this test's own block. Every test's listen ports lie
# below 32768, outside Linux's ephemeral range (32768-60999), so the kernel
# never hands one to another test's outgoing or port-0 socket meanwhile.
port=$((22000 + ($$ % 97) * 10))

worker() { # name log [flags]
  name=$1 log=$2
  shift 2
  "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --name "$name" --threads 1 --connect-timeout 60 \
    "$@" >"$log" 2>&1 &
  pids="$pids $!"
}

for mode in "average --sync-every 4" gossip; do
  m=${mode%% *}
  # the fault-free run
  port=$((port + 1))
  "$RAGTAG" coord "$model" --workers 4 --listen "tcp://127.0.0.1:$port" $run --mode $mode \
    --epochs 4 --metrics "$tmp/$m-0.jsonl" >"$tmp/$m-0.log" 2>&1 & c=$!
  for n in w1 w2 w3 w4; do worker $n "$tmp/$m-$n-0.log"; done
  wait $c; s0=$?; wait_all
  acc0=$(test_acc "$tmp/$m-0.log")
  [ $s0 -eq 0 ] && samples_exact "$tmp/$m-0.jsonl" 4 || { bad "$m: the fault-free run (status $s0)"; tail -n 5 "$tmp/$m-0.log"; }

  # kill -9 one of 4 at a random moment (at half speed: the fault-free run
  # takes 2-3 s, and under make -j2 check's load this script may wake late
  # enough after the first epoch to find it over)
  port=$((port + 1))
  "$RAGTAG" coord "$model" --workers 4 --listen "tcp://127.0.0.1:$port" $run --mode $mode \
    --epochs 4 --metrics "$tmp/$m-1.jsonl" >"$tmp/$m-1.log" 2>&1 & c=$!
  for n in w1 w2 w3 w4; do worker $n "$tmp/$m-$n-1.log" --throttle 0.5; done
  set -- $pids
  victim=$(( ($$ % 4) + 1 )); vpid=$(eval echo \${$victim})
  started "$tmp/$m-1.log"
  sleep "0.$(($$ % 10))"
  kill -9 "$vpid"
  wait $c; s1=$?; wait_all
  acc1=$(test_acc "$tmp/$m-1.log")
  if [ $s1 -eq 0 ] && grep -q "lost rank [0-9] (w$victim, .*3 workers continue" "$tmp/$m-1.log" &&
     grep -q "replicas identical: parameter hash [0-9a-f]* on all 3 workers" "$tmp/$m-1.log" &&
     samples_exact "$tmp/$m-1.jsonl" 4 && same_acc "$acc0" "$acc1"; then
    ok "$m: kill -9 of w$victim of 4: 3 went on ($(grep -o "[0-9]* steps* redone" "$tmp/$m-1.log" || echo "none redone")), replicas identical, samples exact, test_acc $acc1% (fault-free $acc0%)"
  else bad "$m: kill -9 of w$victim: status $s1, test_acc $acc1 vs $acc0"; grep "members\|samples\|error\|^epoch\|hash" "$tmp/$m-1.log" | tail -n 10; fi

  # a worker joins mid-run (the first two at half speed: at full speed the
  # 6 epochs took 2.8 s, and a joiner's set-up, about as long, landed in
  # the last epoch, where the run's end left it waiting for the coordinator)
  port=$((port + 1))
  "$RAGTAG" coord "$model" --workers 2 --max-workers 3 --listen "tcp://127.0.0.1:$port" $run \
    --mode $mode --epochs 6 --metrics "$tmp/$m-3.jsonl" >"$tmp/$m-3.log" 2>&1 & c=$!
  worker j1 "$tmp/$m-j1.log" --throttle 0.5
  worker j2 "$tmp/$m-j2.log" --throttle 0.5
  started "$tmp/$m-3.log"
  worker j3 "$tmp/$m-j3.log"
  wait $c; s3=$?; wait_all
  h=$(sed -n 's/.*replicas identical: parameter hash \([0-9a-f]*\) on all 3 workers.*/\1/p' "$tmp/$m-3.log")
  if [ $s3 -eq 0 ] && grep -q "admitted j3" "$tmp/$m-3.log" && [ -n "$h" ] &&
     grep -q "done: .* parameters hash $h" "$tmp/$m-j3.log" && samples_exact "$tmp/$m-3.jsonl" 6; then
    ok "$m: a worker joined mid-run: admitted, its replica equal to the others' (hash $h), samples exact"
  else bad "$m: a worker joining: status $s3, hash '$h'"; grep "members\|error" "$tmp/$m-3.log" | tail -n 5; tail -n 3 "$tmp/$m-j3.log"; fi

  # churn: two losses and two joins within a run
  port=$((port + 1))
  "$RAGTAG" coord "$model" --workers 3 --listen "tcp://127.0.0.1:$port" $run --mode $mode \
    --epochs 8 --metrics "$tmp/$m-5.jsonl" >"$tmp/$m-5.log" 2>&1 & c=$!
  worker c1 "$tmp/$m-c1.log"
  worker c2 "$tmp/$m-c2.log"; k1=$!
  worker c3 "$tmp/$m-c3.log"; k2=$!
  started "$tmp/$m-5.log"
  kill -9 $k1; sleep 0.7
  worker c4 "$tmp/$m-c4.log"; sleep 1.5
  kill -9 $k2; sleep 0.3
  worker c5 "$tmp/$m-c5.log"
  wait $c; s5=$?; wait_all
  lost=$(grep -c "\] generation [0-9]*: lost rank" "$tmp/$m-5.log")
  if [ $s5 -eq 0 ] && [ "$lost" -eq 2 ] && grep -q "admitted c[45]" "$tmp/$m-5.log" &&
     grep -q "replicas identical" "$tmp/$m-5.log" && samples_exact "$tmp/$m-5.jsonl" 8; then
    ok "$m: churn: $lost lost and $(grep -c "admitted c[45]" "$tmp/$m-5.log") joined, replicas identical, samples exact"
  else bad "$m: churn: status $s5, $lost lost"; grep "members\|error" "$tmp/$m-5.log" | tail -n 8; fi
done

[ $fails -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all elastic checks of average and gossip passed"
