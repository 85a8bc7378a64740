#!/bin/sh
# The coordinator goes away (docs/cluster.md, "The coordinator goes away"),
# real processes on 127.0.0.1, sync mode, 3 workers:
#  (a) kill -9 of the coordinator mid-run, restarted with --resume on the
#      same address within --coord-timeout: it re-adopts the live workers
#      and the run completes from their memory (status 0, identical
#      replicas, every epoch's "samples" exact, the step it went on from);
#  (b) kill -9 and no restart: every worker exits non-zero, saying so,
#      within --worker-timeout + --coord-timeout and a few seconds;
#  (c) SIGSTOP of the coordinator past the run-ahead bound (and past
#      --worker-timeout): the workers wait within the bound, and after
#      SIGCONT the run completes with every checkpoint written;
#  (d) kill -9 of the parent of `train --workers 3`: no worker outlives it;
#  (e) --resume when no worker is left to re-adopt: the file resume;
#  (f) kill -9 while the workers set up, --resume: they join the new run;
#  (g) kill -9 after the workers' last step, --resume: the run ends.
# Epochs are short (45 steps, under the 50-step run-ahead bound), so the
# steps a lost coordinator never saw always hold an epoch's close: its
# metrics and checkpoint must reach the restarted one.
set -u
RAGTAG=${RAGTAG:-./src/ragtag}
top_srcdir=${top_srcdir:-.}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${RAGTAG_DATA_DIR:-}" ]; then
  echo "SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"
  exit 77
fi
tmp=$(mktemp -d); [ -n "${KEEP_TMP:-}" ] && echo "logs in $tmp"
pids=""
cleanup() { for p in $pids; do kill -9 "$p" 2>/dev/null; done; [ -n "${KEEP_TMP:-}" ] || rm -rf "$tmp"; }
trap cleanup EXIT
model="$top_srcdir/examples/lenet.cfg"
ntrain=2160 # --limit 2400 --val 0.1; batch 48: 45 steps an epoch
run="--data fashion-mnist --limit 2400 --val 0.1 --batch 48 --partition static --progress lines"
fails=0
# Ports: 23000-23999, this test's own block. Every test's listen ports lie
# below 32768, outside Linux's ephemeral range (32768-60999), so the kernel
# never hands one to another test's outgoing or port-0 socket meanwhile.
port=$((23000 + ($$ % 97) * 10))

ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails + 1)); }

worker() { # name log [extra flags]
  name=$1 log=$2
  shift 2
  "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --name "$name" --threads 1 \
    --connect-timeout 60 "$@" >"$log" 2>&1 &
  pids="$pids $!"
}
coord() { # log [flags]: in the background, $c its pid
  log=$1
  shift
  "$RAGTAG" coord "$model" --workers 3 --listen "tcp://127.0.0.1:$port" $run "$@" >"$log" 2>&1 &
  c=$!
}
line_seen() { # pattern log: wait (up to 60 s) for a line
  i=0
  while [ $i -lt 600 ] && ! grep -q "$1" "$2"; do sleep 0.1; i=$((i + 1)); done
}
epoch_seen() { line_seen "^epoch $2/" "$1"; } # log N: epoch N's line
wait_all() { for p in $pids; do wait "$p" 2>/dev/null; done; pids=""; }
alive() { for p in "$@"; do st=$(ps -o stat= -p "$p" 2>/dev/null); case "$st" in ""|Z*) ;; *) echo "$p"; esac; done; }
samples_exact() { # metrics epochs: every epoch used each of the $ntrain samples once
  n=$(grep -c "\"samples\": $ntrain[,}]" "$1")
  [ "$n" -eq "$2" ] && ! grep "\"samples\"" "$1" | grep -vq "\"samples\": $ntrain[,}]"
}
ckpt_step() { head -c 400 "$1" | LC_ALL=C tr -c '[:print:]' ' ' | sed -n 's/.*"step":"\([0-9]*\)".*/\1/p'; }

# ---- (a) kill -9, restart with --resume within --coord-timeout: re-adopted ----------
port=$((port + 1))
mkdir -p "$tmp/a"
flags="--epochs 40 --checkpoint $tmp/a --metrics $tmp/a/m.jsonl --worker-timeout 2 --max-workers 4"
coord "$tmp/coord-a1.log" $flags
for n in a1 a2 a3; do worker $n "$tmp/$n.log" --coord-timeout 30; done
epoch_seen "$tmp/coord-a1.log" 4
kill -9 $c
wait $c 2>/dev/null
sleep 1
t0=$(date +%s)
coord "$tmp/coord-a2.log" $flags --resume
# a worker that joins the re-adopted run gets the run's options (it used
# to get none, trained with the defaults and was lost as a diverged member)
line_seen "re-adopted" "$tmp/coord-a2.log"
worker a4 "$tmp/a4.log"
wait $c; sa=$?; wait_all
from=$(sed -n 's/.*the most advanced is at step \([0-9]*\), the checkpoint file at step \([0-9]*\).*/\1 (file: \2)/p' "$tmp/coord-a2.log")
after=$(sed -n 's/.*training goes on \([0-9.]*\) s after this coordinator started.*/\1/p' "$tmp/coord-a2.log")
redone=$(grep -o "[0-9]* steps* redone" "$tmp/coord-a2.log" | head -n 1)
if [ $sa -eq 0 ] && grep -q "re-adopted 3 live workers" "$tmp/coord-a2.log" && [ -n "$from" ] &&
   grep -q "admitted a4" "$tmp/coord-a2.log" && ! grep -q "lost rank" "$tmp/coord-a2.log" &&
   grep -q "replicas identical: parameter hash [0-9a-f]* on all 4 workers" "$tmp/coord-a2.log" &&
   samples_exact "$tmp/a/m.jsonl" 40 && [ "$(ckpt_step "$tmp/a/last.safetensors")" = 1800 ]; then
  ok "kill -9 of the coordinator, restarted with --resume: re-adopted 3 workers at step $from, training went on $after s after the restart (${redone:-no step redone}), a fourth joined, replicas identical, every epoch's samples exact"
else bad "re-adoption (status $sa, from '$from')"; grep -v "plan\]\|^epoch\|^  " "$tmp/coord-a2.log" | tail -n 12; tail -n 4 "$tmp/coord-a1.log"; fi

# ---- (a') the same in average and gossip modes (they go back to their last agreement) ------
for mode in "average --sync-every 4" gossip; do
  m=${mode%% *}
  port=$((port + 1))
  mkdir -p "$tmp/$m"
  flags="--epochs 12 --checkpoint $tmp/$m --metrics $tmp/$m/m.jsonl --worker-timeout 2 --mode $mode"
  coord "$tmp/coord-$m-1.log" $flags
  for n in a1 a2 a3; do worker $n "$tmp/$m-$n.log" --coord-timeout 30; done
  epoch_seen "$tmp/coord-$m-1.log" 4
  kill -9 $c
  wait $c 2>/dev/null
  sleep 1
  coord "$tmp/coord-$m-2.log" $flags --resume
  wait $c; sm=$?; wait_all
  if [ $sm -eq 0 ] && grep -q "re-adopted 3 live workers" "$tmp/coord-$m-2.log" &&
     grep -q "replicas identical: parameter hash [0-9a-f]* on all 3 workers" "$tmp/coord-$m-2.log" &&
     samples_exact "$tmp/$m/m.jsonl" 12; then
    ok "$m mode: kill -9 of the coordinator, restarted with --resume: re-adopted, replicas identical, every epoch's samples exact"
  else bad "$m mode re-adoption (status $sm)"; grep -v "plan\]\|^epoch\|^  " "$tmp/coord-$m-2.log" | tail -n 8; fi
done

# ---- (e) --resume with nobody left to re-adopt: the file resume, for new workers ------------
# (a)'s run is over: its workers are gone; one more epoch from its checkpoint.
port=$((port + 1))
coord "$tmp/coord-e.log" --epochs 41 --checkpoint "$tmp/a" --metrics "$tmp/a/m.jsonl" --resume
sleep 1
for n in e1 e2 e3; do worker $n "$tmp/$n.log"; done
wait $c; se=$?; wait_all
if [ $se -eq 0 ] && grep -q "no worker of run [0-9a-f]* came back within 5 s: run [0-9a-f]* starts from the checkpoint" "$tmp/coord-e.log" &&
   grep -q "resuming from .* step 1800" "$tmp/coord-e.log" && samples_exact "$tmp/a/m.jsonl" 41 &&
   grep -q "replicas identical" "$tmp/coord-e.log"; then
  ok "--resume with no live worker: after 5 s, the checkpoint file's resume for 3 new workers, under a new run id"
else bad "the fall-back to the file (status $se)"; grep -v "plan\]\|^epoch\|^  " "$tmp/coord-e.log" | tail -n 8; fi

# ---- (f) kill -9 while the workers set up, restart with --resume ------------------------
# f2 is paused in its set-up (nobody trains: nothing to re-adopt); the
# restarted coordinator falls back to the file and tells the old run's
# workers, f1 waiting for its start and f2 once resumed, to join again:
# the run finishes with both.
port=$((port + 1))
mkdir -p "$tmp/f"
# (--worker-timeout 10: longer than the 5 s the restarted one waits for
# rejoins, as the default 30 s is; a worker silent to it past the timeout
# gives up before it is told to join again)
flags="--epochs 2 --checkpoint $tmp/f --metrics $tmp/f/m.jsonl --worker-timeout 10"
"$RAGTAG" coord "$model" --workers 2 --listen "tcp://127.0.0.1:$port" $run $flags \
  >"$tmp/coord-f1.log" 2>&1 & c=$!
worker f1 "$tmp/f1.log" --coord-timeout 30; f1=$!
worker f2 "$tmp/f2.log" --coord-timeout 30; f2=$!
line_seen "joined run" "$tmp/f2.log"
kill -STOP $f2
sleep 0.5
kill -9 $c
wait $c 2>/dev/null
"$RAGTAG" coord "$model" --workers 2 --listen "tcp://127.0.0.1:$port" $run $flags --resume \
  >"$tmp/coord-f2.log" 2>&1 & c=$!
sleep 1
kill -CONT $f2
wait $c; sf=$?
wait $f1; sf1=$?
wait $f2; sf2=$?
pids=""
if [ $sf -eq 0 ] && [ $sf1 -eq 0 ] && [ $sf2 -eq 0 ] &&
   grep -q "no worker of run [0-9a-f]* came back within 5 s" "$tmp/coord-f2.log" &&
   grep -q "worker f1 joined from" "$tmp/coord-f2.log" && grep -q "worker f2 joined from" "$tmp/coord-f2.log" &&
   grep -q "replicas identical: parameter hash [0-9a-f]* on all 2 workers" "$tmp/coord-f2.log" &&
   samples_exact "$tmp/f/m.jsonl" 2; then
  ok "kill -9 of the coordinator while its workers set up, restarted with --resume: both joined the new run and it finished, samples exact"
else bad "coordinator lost in the set-up (status $sf, workers $sf1 $sf2)"; grep -v "plan\]\|^epoch\|^  " "$tmp/coord-f2.log" | tail -n 8; tail -n 3 "$tmp/f1.log" "$tmp/f2.log"; fi

# ---- (g) kill -9 after the workers' last step, restart with --resume --------------------
# The coordinator paused at epoch 1 of 2 (45 steps an epoch, run-ahead 50):
# the workers reach the last step and wait for it; killed and restarted,
# it re-adopts members with nothing left to train, which never form its
# new generation: the run ends with their results (it used to wait for
# the generation for ever).
port=$((port + 1))
mkdir -p "$tmp/g"
flags="--epochs 2 --checkpoint $tmp/g --metrics $tmp/g/m.jsonl --worker-timeout 30"
coord "$tmp/coord-g1.log" $flags
for n in g1 g2 g3; do worker $n "$tmp/$n.log" --coord-timeout 30; done
epoch_seen "$tmp/coord-g1.log" 1
kill -STOP $c
line_seen "waiting at step 90" "$tmp/g1.log"
kill -9 $c
kill -CONT $c 2>/dev/null
wait $c 2>/dev/null
coord "$tmp/coord-g2.log" $flags --resume
( sleep 60; kill -9 $c 2>/dev/null ) & guard=$!
wait $c; sg=$?
kill $guard 2>/dev/null
wait_all
if [ $sg -eq 0 ] && grep -q "re-adopted 3 live workers of run [0-9a-f]* (generation [0-9]*): the most advanced is at step 90" "$tmp/coord-g2.log" &&
   grep -q "replicas identical: parameter hash [0-9a-f]* on all 3 workers" "$tmp/coord-g2.log" &&
   samples_exact "$tmp/g/m.jsonl" 2; then
  ok "kill -9 of the coordinator after the workers' last step, restarted with --resume: it re-adopted them at step 90 and the run ended with their results, samples exact"
else bad "re-adoption after the last step (status $sg)"; grep -v "plan\]\|^epoch\|^  " "$tmp/coord-g2.log" | tail -n 6; fi

# ---- (b) kill -9 and no restart: the workers give up, saying so ------------------------
# (a coordinator of another run on the address meanwhile does not take them)
port=$((port + 1))
coord "$tmp/coord-b.log" --epochs 400 --worker-timeout 2
for n in b1 b2 b3; do worker $n "$tmp/$n.log" --coord-timeout 4; done
bp=$pids
epoch_seen "$tmp/coord-b.log" 1
kill -9 $c
wait $c 2>/dev/null
t0=$(date +%s)
sleep 0.5
coord "$tmp/coord-b2.log" --epochs 1 --join-timeout 5
st=""
for p in $bp; do wait "$p"; st="$st $?"; done
wait $c
waited=$(($(date +%s) - t0))
pids=""
if ! echo "$st" | grep -q " 0" && [ $waited -le 12 ] && [ -z "$(alive $bp)" ] &&
   [ "$(grep -l "none came back within --coord-timeout 4 s" "$tmp"/b[123].log | wc -l)" -eq 3 ] &&
   grep -q "message of a foreign run" "$tmp/coord-b2.log"; then
  ok "kill -9 of the coordinator, no restart: the 3 workers waited, then exited (status$st) within ${waited} s (--worker-timeout 2 + --coord-timeout 4), saying so; another run's coordinator on the address refused them"
else bad "workers without their coordinator: status$st after ${waited} s, alive '$(alive $bp)'"; tail -n 3 "$tmp"/b1.log; fi

# ---- (c) SIGSTOP past the run-ahead bound and --worker-timeout ---------------------------
port=$((port + 1))
mkdir -p "$tmp/c"
coord "$tmp/coord-c.log" --epochs 40 --checkpoint "$tmp/c" --metrics "$tmp/c/m.jsonl" --worker-timeout 2
for n in c1 c2 c3; do worker $n "$tmp/$n.log" --coord-timeout 30; done
epoch_seen "$tmp/coord-c.log" 3
kill -STOP $c
sleep 4
kill -CONT $c
wait $c; sc=$?; wait_all
within=1 waits=0
for n in c1 c2 c3; do
  line=$(grep "waiting at step" "$tmp/$n.log" | head -n 1)
  s=$(echo "$line" | sed -n 's/.*waiting at step \([0-9]*\): the coordinator acknowledged step \([0-9]*\) (run-ahead bound \([0-9]*\).*/\1 \2 \3/p')
  [ -n "$s" ] && waits=$((waits + 1))
  set -- $s
  [ -z "$s" ] || [ $(($1 - $2)) -le $3 ] || within=0
done
# In sync mode one waiting worker holds the others in the step's allreduce.
if [ $sc -eq 0 ] && [ $waits -ge 1 ] && [ $within -eq 1 ] && grep -q "replicas identical" "$tmp/coord-c.log" &&
   grep -q "did not run for" "$tmp/coord-c.log" && ! grep -q "lost rank" "$tmp/coord-c.log" &&
   samples_exact "$tmp/c/m.jsonl" 40 && [ "$(ckpt_step "$tmp/c/last.safetensors")" = 1800 ]; then
  ok "SIGSTOP of the coordinator for 4 s: the workers waited within the run-ahead bound ($(grep -h "waiting at step" "$tmp"/c[123].log | head -n 1 | sed 's/.*waiting at //')), and after SIGCONT the run completed with every checkpoint written"
else bad "a paused coordinator: status $sc, $waits waits, within $within"; grep -v "plan\]\|^epoch\|^  " "$tmp/coord-c.log" | tail -n 8; tail -n 4 "$tmp/c1.log"; fi

# ---- (d) kill -9 of the train --workers 3 parent: no orphans --------------------------------
"$RAGTAG" train "$model" --workers 3 --threads 1 $run --epochs 400 >"$tmp/coord-d.log" 2>&1 & c=$!
epoch_seen "$tmp/coord-d.log" 1
kids=$(pgrep -P $c | tr '\n' ' ')
kill -9 $c
wait $c 2>/dev/null
i=0
while [ $i -lt 50 ] && [ -n "$(alive $kids)" ]; do sleep 0.1; i=$((i + 1)); done
if [ "$(echo $kids | wc -w)" -eq 3 ] && [ -z "$(alive $kids)" ]; then
  ok "kill -9 of the train --workers 3 parent: its 3 workers died with it within $((i / 10)).$((i % 10)) s"
else bad "train --workers 3 children outlived their parent: '$kids', alive '$(alive $kids)'"; for k in $(alive $kids); do kill -9 "$k"; done; fi

[ $fails -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all coordinator-loss checks passed"
