#!/bin/sh
# Workers come and go, the run goes on (sync mode, real processes on
# 127.0.0.x): kill -9 of one of 4 joined workers at a random moment, of
# local workers of `train --workers 3` (started again), a worker that joins mid-run, one
# paused past --worker-timeout (dropped, then back as a new member), and
# churn (two losses and two joins in one run), a worker on standby leaving
# the ring, a run that ends while a worker on standby is outside it, and a
# worker whose training thread hangs. Each run must finish with
# status 0, name what happened, end with identical replicas, use every
# training sample exactly once in every epoch ("samples" in the metrics),
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
# Ports: 21000-21999, this test's own block. Every test's listen ports lie
# below 32768, outside Linux's ephemeral range (32768-60999), so the kernel
# never hands one to another test's outgoing or port-0 socket meanwhile.
port=$((21000 + ($$ % 97) * 10))

# The most steps redone in EPOCH that any line of a metrics file reports.
redone_in_epoch() { # metrics epoch
  grep "^{\"epoch\": $2," "$1" | sed -n 's/.*"steps_redone": \([0-9]*\).*/\1/p' | sort -n | tail -n 1 | grep . || echo 0
}

worker() { # name address log [extra flags]
  name=$1 addr=$2 log=$3
  shift 3
  "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --advertise "$addr" --name "$name" \
    --threads 1 --connect-timeout 60 "$@" >"$log" 2>&1 &
  pids="$pids $!"
}

# ---- the fault-free run, to compare with --------------------------------------------
port=$((port + 1))
"$RAGTAG" coord "$model" --workers 4 --listen "tcp://127.0.0.1:$port" $run --epochs 6 \
  --metrics "$tmp/m0.jsonl" >"$tmp/c0.log" 2>&1 & c=$!
for n in w1 w2 w3 w4; do worker $n 127.0.0.1 "$tmp/$n-0.log"; done
wait $c; s0=$?; wait_all
acc0=$(test_acc "$tmp/c0.log")
[ $s0 -eq 0 ] && samples_exact "$tmp/m0.jsonl" 6 && ok "fault-free run: 4 workers, test_acc $acc0%" ||
  { bad "the fault-free run (status $s0)"; tail -n 5 "$tmp/c0.log"; }

# ---- kill -9 one of 4 workers at a random moment --------------------------------------
port=$((port + 1))
"$RAGTAG" coord "$model" --workers 4 --listen "tcp://127.0.0.1:$port" $run --epochs 6 \
  --metrics "$tmp/m1.jsonl" >"$tmp/c1.log" 2>&1 & c=$!
for n in w1 w2 w3 w4; do worker $n 127.0.0.1 "$tmp/$n-1.log"; done
set -- $pids
victim=$(( ($$ % 4) + 1 )); vpid=$(eval echo \${$victim})
started "$tmp/c1.log"
sleep "0.$(($$ % 10))"
kill -9 "$vpid"
wait $c; s1=$?; wait_all
acc1=$(test_acc "$tmp/c1.log")
if [ $s1 -eq 0 ] && grep -q "lost rank [0-9] (w$victim, .*its connection closed.*3 workers continue" "$tmp/c1.log" &&
   grep -q "replicas identical: parameter hash [0-9a-f]* on all 3 workers" "$tmp/c1.log" &&
   samples_exact "$tmp/m1.jsonl" 6 && grep -q '"event": "lost"' "$tmp/m1.jsonl" && same_acc "$acc0" "$acc1"; then
  ok "kill -9 of w$victim of 4: 3 workers went on ($(grep -o "[0-9]* step[s]* redone" "$tmp/c1.log" || echo "no step redone")), replicas identical, every epoch's samples exact, test_acc $acc1% (fault-free $acc0%)"
else bad "kill -9 of w$victim: status $s1, test_acc $acc1 vs $acc0"; grep "members\|samples\|FAIL\|error" "$tmp/c1.log" | tail -n 8; fi

# ---- kill -9 a worker the moment training starts (its ring half formed) -------------------
port=$((port + 1))
"$RAGTAG" coord "$model" --workers 3 --listen "tcp://127.0.0.1:$port" $run --epochs 2 \
  --worker-timeout 4 --metrics "$tmp/m8.jsonl" >"$tmp/c8.log" 2>&1 & c=$!
worker b1 127.0.0.1 "$tmp/b1.log"
worker b2 127.0.0.1 "$tmp/b2.log"; b2=$!
worker b3 127.0.0.1 "$tmp/b3.log"
i=0
while [ $i -lt 6000 ] && ! grep -q "cluster of 3" "$tmp/c8.log"; do sleep 0.01; i=$((i + 1)); done
kill -9 $b2
wait $c; s8=$?; wait_all
if [ $s8 -eq 0 ] && grep -q "lost rank [0-9] (b2, " "$tmp/c8.log" &&
   grep -q "replicas identical: parameter hash [0-9a-f]* on all 2 workers" "$tmp/c8.log" &&
   samples_exact "$tmp/m8.jsonl" 2; then
  ok "kill -9 of a worker as training started: the other 2 formed the next generation and went on, samples exact"
else bad "a worker lost at the start: status $s8"; grep "members\|error" "$tmp/c8.log" | tail -n 5; tail -n 3 "$tmp/b1.log"; fi

# ---- local workers of train --workers 3 that die are started again ------------------------
# children of $1 that have not exited (pgrep -P lists zombies too: a killed
# worker is one until its coordinator reaps it)
living_children() { ps -o pid=,stat= --ppid "$1" | awk '$2 !~ /^Z/ { print $1 }'; }
# one killed: a new one takes its place and joins; all killed (one by one,
# within 1.4 s): the run goes on from its checkpoint with 3 new ones (when
# the last to die is the one that had just joined, the run says its state
# is lost rather than every worker: the same restart); --max-restarts 2 used up, one
# more killed: the other 2 finish (throttled so that each step has time)
"$RAGTAG" train "$model" --workers 3 --threads 1 --throttle 0.3 $run --epochs 6 --max-restarts 2 \
  --checkpoint "$tmp/ck2" --metrics "$tmp/m2.jsonl" >"$tmp/c2.log" 2>&1 & c=$!
started "$tmp/c2.log"
kill -9 $(pgrep -P $c -f -- "--name local-1 ") # its own: another test may run a local-1
until_there "admitted local-3 " "$tmp/c2.log"
# all killed, each 0.7 s after the last: a loaded host sees killed workers
# die that far apart, and the first must not spend a restart on its own
for p in $(living_children $c); do kill -9 $p; sleep 0.7; done
until_there "restart 2 of" "$tmp/c2.log"
# the 3 new workers train (an epoch line after the restart's), then one dies
n=$(grep -c "^epoch [0-9]*/6:" "$tmp/c2.log")
i=0
while [ $i -lt 600 ] && [ "$(grep -c "^epoch [0-9]*/6:" "$tmp/c2.log")" -le "$n" ]; do sleep 0.1; i=$((i + 1)); done
kill -9 $(living_children $c | head -n 1)
wait $c; s2=$?
if [ $s2 -eq 0 ] && grep -q "lost rank [0-9] (local-1, .*connection closed\|lost rank [0-9] (local-1, .*killed by signal 9" "$tmp/c2.log" &&
   grep -q "starting local-3 in place of local-1 (restart 1 of --max-restarts 2)" "$tmp/c2.log" &&
   grep -q "admitted local-3 " "$tmp/c2.log" &&
   grep -q "\(every worker was lost\|the run's state is lost\).*instead the run goes on from that checkpoint with 3 new local workers (restart 2 of --max-restarts 2)" "$tmp/c2.log" &&
   grep -q "local-[0-9] is not started again: --max-restarts 2 used up" "$tmp/c2.log" &&
   grep -q "on all 2 workers" "$tmp/c2.log" && samples_exact "$tmp/m2.jsonl" 6 &&
   grep -q "\"event\": \"restart\", \"from\": \"[a-z]*\", .*\"workers\": 3, \"restarts\": 2}" "$tmp/m2.jsonl" &&
   ! pgrep -f -- "--parent $c" >/dev/null; then
  ok "local workers that died: one replaced and admitted, all lost: 3 new ones from the checkpoint, --max-restarts used up: 2 finished, samples exact, none left behind"
else bad "local workers that died: status $s2"; grep "members\|coord\] \(start\|local\)\|error\|^epoch\|hash\|restart" "$tmp/c2.log" | tail -n 16; fi

# ---- a worker joins mid-run --------------------------------------------------------
port=$((port + 1))
"$RAGTAG" coord "$model" --workers 2 --max-workers 3 --listen "tcp://127.0.0.1:$port" $run \
  --epochs 8 --metrics "$tmp/m3.jsonl" >"$tmp/c3.log" 2>&1 & c=$!
worker j1 127.0.0.1 "$tmp/j1.log"
worker j2 127.0.0.1 "$tmp/j2.log"
started "$tmp/c3.log"
worker j3 127.0.0.1 "$tmp/j3.log"
wait $c; s3=$?; wait_all
h=$(sed -n 's/.*replicas identical: parameter hash \([0-9a-f]*\) on all 3 workers.*/\1/p' "$tmp/c3.log")
share=$(awk '/generation 2:/ { t = 1; next } t && $2 == "j3" { print $(NF - 3); exit }' "$tmp/c3.log")
if [ $s3 -eq 0 ] && grep -q "admitted j3" "$tmp/c3.log" && [ -n "$h" ] &&
   grep -q "done: .* parameters hash $h" "$tmp/j3.log" && [ "${share:-0}" -gt 0 ] &&
   samples_exact "$tmp/m3.jsonl" 8; then
  ok "a worker joined mid-run: admitted with a share of $share, its replica equal to the others' (hash $h), samples exact"
else bad "a worker joining: status $s3, hash '$h', share '$share'"; grep "members\|error" "$tmp/c3.log" | tail -n 5; tail -n 3 "$tmp/j3.log"; fi

# ---- standby leaves the ring, joins again and waits out its back-off idle --------------------
# (the run ends first: the worker, told so, ends with the run)
"$RAGTAG" train "$model" --workers 2 --threads 1 --throttle 1,0.02 --min-share 0.2 \
  --data fashion-mnist --limit 12000 --val 0.1 --batch 48 --progress lines --epochs 3 \
  --metrics "$tmp/m6.jsonl" >"$tmp/c6.log" 2>&1
s6=$?
if [ $s6 -eq 0 ] && grep -q "rank 1 (local-1, [^)]*) left the ring: on standby" "$tmp/c6.log" &&
   grep -q "worker local-1 back from standby (1 time) from .*: it waits [0-9]* s, then sets up" "$tmp/c6.log" &&
   grep -q '"event": "standby"' "$tmp/m6.jsonl" && grep -q "on all 1 worker" "$tmp/c6.log" &&
   samples_exact "$tmp/m6.jsonl" 3; then
  ok "a worker on standby left the ring, joined again and waited out its back-off before setting up; samples exact"
else bad "standby leaving the ring: status $s6"; grep "members\|error" "$tmp/c6.log" | tail -n 5; fi

# ---- the run ends while a worker on standby is outside it ---------------------------------
# It left the ring at the first plan and the run ends 20 steps later,
# before (or as) it joins again: nobody may be left waiting. Local
# (train --workers): the run ends at once, the worker stopped or told; the
# old code waited 30 s for it, then killed it. Joined: the worker ends by
# itself within its --coord-timeout (3 s) of leaving, saying why, or, told
# by the coordinator, with it; it used to try to join the finished run for
# good.
t0=$(date +%s)
"$RAGTAG" train "$model" --workers 2 --threads 1 --throttle 1,0.02 --min-share 0.2 \
  --data fashion-mnist --limit 1280 --val 0 --batch 64 --progress off --epochs 1 >"$tmp/c10.log" 2>&1
s10=$? t10=$(($(date +%s) - t0))
if [ $s10 -eq 0 ] && [ $t10 -lt 20 ] && grep -q "left the ring: on standby" "$tmp/c10.log" &&
   grep -q "local worker local-1 not in the run when it ended (on standby, or joining): stopped\|worker local-1 back from standby" "$tmp/c10.log"; then
  ok "train --workers: the run ended ${t10} s after it began, its worker on standby stopped or told"
else bad "train --workers with a worker on standby at its end: status $s10 after $t10 s"; tail -n 4 "$tmp/c10.log"; fi
port=$((port + 1))
"$RAGTAG" coord "$model" --workers 2 --listen "tcp://127.0.0.1:$port" --data fashion-mnist \
  --limit 1280 --val 0 --batch 64 --epochs 1 --min-share 0.2 --progress off >"$tmp/c11.log" 2>&1 & c=$!
worker a11 127.0.0.1 "$tmp/a11.log"
worker b11 127.0.0.1 "$tmp/b11.log" --throttle 0.02 --coord-timeout 3
b=$!
wait $c; s11=$?
t0=$(date +%s) sb=124
while [ $(($(date +%s) - t0)) -lt 30 ]; do
  if ! kill -0 $b 2>/dev/null; then wait $b; sb=$?; break; fi
  sleep 0.2
done
t11=$(($(date +%s) - t0))
kill -9 $b 2>/dev/null; wait_all
if [ $s11 -eq 0 ] && grep -q "(b11, [^)]*) left the ring: on standby" "$tmp/c11.log" &&
   [ $sb -ne 124 ] && { [ $sb -eq 0 ] ||
   grep -q "within 3 s of this worker leaving the run (--coord-timeout): the run has ended, or its coordinator is gone" "$tmp/b11.log"; }; then
  ok "a joined worker on standby when the run ended: it ended ${t11} s after the run (status $sb), saying why"
else bad "a joined worker on standby when the run ended: run status $s11, the worker's $sb after $t11 s"; tail -n 3 "$tmp/b11.log"; fi

# ---- paused past --worker-timeout: dropped, then back as a new member ---------------------
port=$((port + 1))
"$RAGTAG" coord "$model" --workers 3 --listen "tcp://127.0.0.1:$port" $run --epochs 14 \
  --worker-timeout 3 --metrics "$tmp/m4.jsonl" >"$tmp/c4.log" 2>&1 & c=$!
worker p1 127.0.0.1 "$tmp/p1.log"
worker p2 127.0.0.1 "$tmp/p2.log"; p2=$!
worker p3 127.0.0.1 "$tmp/p3.log"
started "$tmp/c4.log"
kill -STOP $p2; sleep 5; kill -CONT $p2
wait $c; s4=$?; wait_all
if [ $s4 -eq 0 ] && grep -q "lost rank [0-9] (p2, .*nothing heard from it" "$tmp/c4.log" &&
   grep -q "the run goes on without this worker" "$tmp/p2.log" &&
   grep -q "joining .* again, as a new member" "$tmp/p2.log" && samples_exact "$tmp/m4.jsonl" 14; then
  ok "SIGSTOP past the timeout: dropped, the run went on; after SIGCONT it rejoined as a new member$(grep -q 'admitted p2' "$tmp/c4.log" && echo ' and was admitted')"
else bad "a paused worker: status $s4"; grep "members\|error" "$tmp/c4.log" | tail -n 8
  grep '"samples"' "$tmp/m4.jsonl" | grep -v "\"samples\": $ntrain[,}]"; cat "$tmp/p2.log"; fi

# ---- a training thread that hangs: its heartbeats stop, it is dropped, it comes back -------------
port=$((port + 1))
"$RAGTAG" coord "$model" --workers 3 --listen "tcp://127.0.0.1:$port" $run --epochs 14 \
  --worker-timeout 5 --metrics "$tmp/m7.jsonl" >"$tmp/c7.log" 2>&1 & c=$!
worker h1 127.0.0.1 "$tmp/h1.log"
worker h2 127.0.0.1 "$tmp/h2.log" --stall-at 100:14
worker h3 127.0.0.1 "$tmp/h3.log"
wait $c; s7=$?; wait_all
# (the loss is usually "nothing heard from it"; on a loaded machine its
# link may fail first: any reason will do, the worker says why it stopped)
if [ $s7 -eq 0 ] && grep -q "lost rank [0-9] (h2, " "$tmp/c7.log" &&
   grep -q "the training thread made no progress for [0-9]* s" "$tmp/h2.log" &&
   grep -q "the run goes on without this worker: " "$tmp/h2.log" &&
   grep -q "replicas identical" "$tmp/c7.log" && samples_exact "$tmp/m7.jsonl" 14 &&
   [ "$(redone_in_epoch "$tmp/m7.jsonl" 1)" -le 1 ]; then
  # (at most the step it hung in redone, in epoch 1 where it hung at step
  # 100: the others gave up a step whose sum the hung worker had not begun,
  # so nobody updated the host's shared weights in it, and went on from the
  # shared copy as it was. Its admission later is another change of
  # members: seen by some worker after its step's sum began, it goes back to
  # the last write-back like any such change, which the run survives too)
  ok "a hung training thread (comm thread alive): its heartbeats stopped, it was dropped, the run went on ($(redone_in_epoch "$tmp/m7.jsonl" 1) step(s) redone for it)$(grep -q 'admitted h2' "$tmp/c7.log" && echo "; it came back as a new member")"
else bad "a hung training thread: status $s7, epoch 1 redid $(redone_in_epoch "$tmp/m7.jsonl" 1) steps"
  grep "lost rank\|error\|redone" "$tmp/c7.log"
  grep "members\|error" "$tmp/c7.log" | tail -n 5; cat "$tmp/h2.log"
  grep '"samples"' "$tmp/m7.jsonl" | grep -v "\"samples\": $ntrain[,}]"; fi

# ---- churn: two losses and two joins within one run ----------------------------------------
port=$((port + 1))
"$RAGTAG" coord "$model" --workers 3 --listen "tcp://127.0.0.1:$port" $run --epochs 10 \
  --metrics "$tmp/m5.jsonl" >"$tmp/c5.log" 2>&1 & c=$!
worker c1 127.0.0.1 "$tmp/x1.log"
worker c2 127.0.0.1 "$tmp/x2.log"; k1=$!
worker c3 127.0.0.1 "$tmp/x3.log"; k2=$!
started "$tmp/c5.log"
kill -9 $k1; sleep 0.7
worker c4 127.0.0.1 "$tmp/x4.log"; sleep 1.5
kill -9 $k2; sleep 0.3
worker c5 127.0.0.1 "$tmp/x5.log"
wait $c; s5=$?; wait_all
lost=$(grep -c "\] generation [0-9]*: lost rank" "$tmp/c5.log")
joined=$(grep -c "admitted c[45]" "$tmp/c5.log")
if [ $s5 -eq 0 ] && [ "$lost" -eq 2 ] && [ "$joined" -ge 1 ] && grep -q "replicas identical" "$tmp/c5.log" &&
   samples_exact "$tmp/m5.jsonl" 10; then
  ok "churn: $lost lost and $joined joined in one run, replicas identical, every epoch's samples exact"
else bad "churn: status $s5, $lost lost, $joined joined"; grep -v "^epoch\|plan\]\|^  " "$tmp/c5.log" | tail -n 12; fi

[ $fails -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all elastic checks passed"
