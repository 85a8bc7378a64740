#!/bin/sh
# A run whose state is lost with the last member that held it (real
# processes on 127.0.0.1): one member trains; a second joins and is
# admitted while the first is paused (SIGSTOP: it cannot hand the state
# over), a third is held while it sets up, then the first is killed. No
# member holds the state any more.
#  - With --checkpoint DIR the coordinator starts the run again from
#    DIR/last.safetensors on its address and the workers still here join
#    again: the run finishes (status 0), every epoch's samples used once.
#    Here the third is paused once admitted: it is lost after
#    --worker-timeout; resumed, it is told to join again while it forms a
#    ring that cannot form, and does.
#  - Without one it stops at once with status 1 (not 0, not a wait for
#    more joiners, who would bring no state either), saying the run's state
#    is lost and that there is no checkpoint to go on from.
#  - Every worker lost (two, killed): the run goes on from its checkpoint
#    with two new workers (before the first checkpoint: from its
#    beginning); with none joining within --join-timeout it stops with
#    status 1 and the checkpoint as it was; with one it starts with it.
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

worker() { # name log [flags]
  n=$1 l=$2
  shift 2
  "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --name "$n" --threads 1 --connect-timeout 60 \
    "$@" >"$l" 2>&1 &
  pids="$pids $!"
  echo $! >>"$tmp/pids"
}
# nothing of this test may outlive 300 s (the list in a file: it grows)
( sleep 300 & s=$!; trap 'kill $s; exit 0' TERM; wait $s; kill -9 $(cat "$tmp/pids") 2>/dev/null ) &
watchdog=$!

# lose_state TAG B2-STOP-AT COORD-FLAGS...: the coordinator ($c) and a1,
# b1, b2 of that tag, a1 killed once b1 is admitted and b2 is paused at
# B2-STOP-AT of the coordinator's log: "worker b2 joining" (then b2 is
# held in its set-up, however fast that is: --stall-setup), or "admitted
# b2" (then, with a1 gone, its ring cannot form: b2 is lost after
# --worker-timeout and, resumed, is told to join again while it forms it)
lose_state() {
  tag=$1
  b2_at=$2
  shift 2
  b2_flags=""
  [ "$b2_at" = "worker b2 joining" ] && b2_flags="--stall-setup 60"
  "$RAGTAG" coord "$model" --workers 1 --max-workers 3 --listen "tcp://127.0.0.1:$port" $run \
    --epochs 4 --metrics "$tmp/$tag.jsonl" "$@" >"$tmp/$tag.log" 2>&1 & c=$!
  pids="$pids $c"; echo $c >>"$tmp/pids"
  worker a1 "$tmp/$tag.a1.log"; a1=$!
  started "$tmp/$tag.log" # epoch 1 closed (with --checkpoint: a checkpoint to go back to)
  kill -STOP "$a1"
  worker b1 "$tmp/$tag.b1.log"; b1=$!
  until_there "admitted b1" "$tmp/$tag.log"
  worker b2 "$tmp/$tag.b2.log" $b2_flags; b2=$!
  until_there "$b2_at" "$tmp/$tag.log"
  kill -STOP "$b2"
  kill -9 "$a1"
}

lose_state ck "admitted b2" --checkpoint "$ck"
until_there "instead the run goes on from that checkpoint" "$tmp/ck.log"
kill -CONT "$b2"
wait "$c"; s1=$?
wait "$b1"; sb1=$?
wait "$b2"; sb2=$?
# the first of the case's expectations that does not hold ("": all do)
ck_unmet() {
  [ $s1 -eq 0 ] && [ $sb1 -eq 0 ] && [ $sb2 -eq 0 ] || { echo "a status not 0"; return; }
  grep -q "lost rank [0-9] (b2, .*): nothing heard from it for" "$tmp/ck.log" ||
    { echo "b2 not lost after --worker-timeout"; return; }
  grep -q "the run's state is lost: every member that held it is gone (b1, rank 0: no member of the new group holds the run's state (all 1 just joined)); its last checkpoint, $ck/last.safetensors, is whole: run the coordinator again with --resume; instead the run goes on from that checkpoint on tcp://127.0.0.1:$port: the 1 worker still here joins again" "$tmp/ck.log" ||
    { echo "no 'the run's state is lost ... goes on from that checkpoint' line"; return; }
  grep -q "joined run .* as rank 1 of 2" "$tmp/ck.b2.log" || { echo "b2 did not join again"; return; }
  grep -q "resuming from $ck/last.safetensors at epoch [1-3]" "$tmp/ck.log" ||
    { echo "no 'resuming from' line"; return; }
  grep -q "^epoch 4/4: " "$tmp/ck.log" || { echo "no epoch 4/4 line"; return; }
  grep -q "replicas identical" "$tmp/ck.log" || { echo "no 'replicas identical'"; return; }
  samples_exact "$tmp/ck.jsonl" 4 ||
    { echo "samples not exact: $(grep -o '"epoch": [0-9]*\|"samples": [0-9]*' "$tmp/ck.jsonl" | tr '\n' ' ')"; return; }
}
unmet=$(ck_unmet)
if [ -z "$unmet" ]; then
  ok "the last holder of the state lost before the joiners got it (b2, admitted, paused, lost after --worker-timeout, was told to join again while it formed its ring, and did): the run went on from its checkpoint ($(grep -o "at epoch [0-9]*, step [0-9]*" "$tmp/ck.log" | head -n 1)) with both joiners, 4 epochs, samples exact"
else
  bad "state lost, with a checkpoint: $unmet (coordinator status $s1, joiners $sb1 / $sb2)"
  grep -v "^epoch\|^ragtag: \[plan\]" "$tmp/ck.log" | cut -c1-300
  tail -n 12 "$tmp/ck.b1.log" "$tmp/ck.b2.log"
fi

port=$((port + 1))
lose_state none "worker b2 joining"
wait "$c"; s2=$?
wait "$b1"; sb1=$?
kill -9 "$b2"
if [ $s2 -eq 1 ] && [ $sb1 -ne 0 ] &&
   grep -q "the run's state is lost: every member that held it is gone (b1, rank 0: no member of the new group holds the run's state (all 1 just joined)); no checkpoint to go on from" "$tmp/none.log" &&
   ! grep -q "^ragtag: done" "$tmp/none.log"; then
  ok "without a checkpoint the run stopped at once (status 1), saying why, another joiner on its way"
else
  bad "state lost, no checkpoint: coordinator status $s2, joiner's status $sb1"
  grep "members\|lost\|error\|done" "$tmp/none.log" | tail -n 6
fi

# every worker lost (both killed once epoch 1's checkpoint is there): with
# nobody left either, the run goes on from its checkpoint with the workers
# that join within --join-timeout (here two new ones) ...
lose_all() { # TAG COORD-FLAGS...: the coordinator ($c) and a1, a2, both killed
  tag=$1
  shift
  port=$((port + 1))
  "$RAGTAG" coord "$model" --workers 2 --listen "tcp://127.0.0.1:$port" $run --epochs 4 \
    --checkpoint "$tmp/$tag.ck" --metrics "$tmp/$tag.jsonl" "$@" >"$tmp/$tag.log" 2>&1 & c=$!
  pids="$pids $c"; echo $c >>"$tmp/pids"
  worker a1 "$tmp/$tag.a1.log"; a1=$!
  worker a2 "$tmp/$tag.a2.log"; a2=$!
  until_there -f "$tmp/$tag.ck/last.safetensors"
  kill -9 "$a1" "$a2"
  until_there "instead the run goes on from that checkpoint" "$tmp/$tag.log"
  cp "$tmp/$tag.ck/last.safetensors" "$tmp/$tag.kept"
}
lose_all all
worker c1 "$tmp/all.c1.log"; c1=$!
worker c2 "$tmp/all.c2.log"; c2=$!
wait "$c"; s3=$?
wait "$c1"; sc1=$?
wait "$c2"; sc2=$?
if [ $s3 -eq 0 ] && [ $sc1 -eq 0 ] && [ $sc2 -eq 0 ] &&
   grep -q "every worker was lost (the last: a[12], .*); its last checkpoint, $tmp/all.ck/last.safetensors, is whole: run the coordinator again with --resume; instead the run goes on from that checkpoint on tcp://127.0.0.1:$port with the workers that join within --join-timeout ([0-9]* s)" "$tmp/all.log" &&
   grep -q "resuming from $tmp/all.ck/last.safetensors at epoch [1-3]" "$tmp/all.log" &&
   grep -q "^epoch 4/4: " "$tmp/all.log" && grep -q "replicas identical" "$tmp/all.log" &&
   grep -q "\"event\": \"restart\", \"from\": \"checkpoint\", \"checkpoint\": \"$tmp/all.ck/last.safetensors\", \"reason\": \"every worker was lost .*\"workers\": 0}" "$tmp/all.jsonl" &&
   samples_exact "$tmp/all.jsonl" 4; then
  ok "every worker lost: the run went on from its checkpoint ($(grep -o "at epoch [0-9]*, step [0-9]*" "$tmp/all.log" | head -n 1)) with two new workers, 4 epochs, samples exact"
else
  bad "every worker lost, new ones joined: coordinator status $s3, new workers $sc1 / $sc2"
  grep "members\|lost\|error\|done\|resum" "$tmp/all.log" | tail -n 8
fi

# ... and when none joins within --join-timeout it stops (status 1),
# naming the checkpoint, which it left as it was
lose_all none2 --join-timeout 3
wait "$c"; s4=$?
if [ $s4 -eq 1 ] &&
   grep -q "only 0 of 2 workers joined within --join-timeout 3 s; joined: none; missing: 2 more; the run's last checkpoint, $tmp/none2.ck/last.safetensors, is whole: run the coordinator again with --resume" "$tmp/none2.log" &&
   cmp -s "$tmp/none2.ck/last.safetensors" "$tmp/none2.kept" && ! grep -q "^ragtag: done" "$tmp/none2.log"; then
  ok "every worker lost, none joined within --join-timeout: stopped (status 1), checkpoint named and unchanged"
else
  bad "every worker lost, none joined: coordinator status $s4"
  tail -n 4 "$tmp/none2.log"
fi

# ... with fewer than --workers back it starts with those once no other
# came for 5 s (at least training's floor, --min-workers, default 1; not
# after --join-timeout, 60 s), and when those too are lost while they set
# up, it goes on from the checkpoint again
lose_all few
worker c1 "$tmp/few.c1.log" --stall-setup 60; c1=$! # in its set-up however fast that is
until_there "joined run" "$tmp/few.c1.log"
kill -STOP "$c1"
kill -9 "$c1"
until_there "lost while setting up: .*; instead the run goes on from that checkpoint" "$tmp/few.log"
worker c2 "$tmp/few.c2.log"; c2=$!
wait "$c"; s6=$?
wait "$c2"; sc2=$?
if [ $s6 -eq 0 ] && [ $sc2 -eq 0 ] &&
   grep -q "worker c1 (rank 0, [^)]*) was lost while setting up: its connection closed [0-9.]* s ago (the process died or its host cut it); 0 left, fewer than --min-workers 1; its last checkpoint, .* is whole: .*; instead the run goes on from that checkpoint" "$tmp/few.log" &&
   [ "$(grep -c "starting with the 1 of 2 workers back (no other came for 5 s); others join during training" "$tmp/few.log")" -eq 2 ] &&
   ! grep -q "join-timeout 60 s: starting" "$tmp/few.log" &&
   grep -q "^epoch 4/4: " "$tmp/few.log" && samples_exact "$tmp/few.jsonl" 4; then
  ok "every worker lost, then the one that came lost while setting up: the run went on from its checkpoint twice and finished with the one after it, samples exact"
else
  bad "every worker lost, one back and lost in set-up: coordinator status $s6, the last worker's $sc2"
  grep "members\|lost\|error\|done\|starting" "$tmp/few.log" | tail -n 8
fi

# ... and before its first checkpoint (both killed as soon as their ring
# formed) it starts again from its beginning with the workers that join
port=$((port + 1))
"$RAGTAG" coord "$model" --workers 2 --listen "tcp://127.0.0.1:$port" $run --epochs 4 \
  --checkpoint "$tmp/early.ck" --metrics "$tmp/early.jsonl" >"$tmp/early.log" 2>&1 & c=$!
pids="$pids $c"; echo $c >>"$tmp/pids"
# (both hang at step 1, however fast the machine: no epoch, no checkpoint
# can be done when they are killed)
worker a1 "$tmp/early.a1.log" --stall-at 1:60; a1=$!
worker a2 "$tmp/early.a2.log" --stall-at 1:60; a2=$!
until_there "ring formed" "$tmp/early.a2.log"
kill -9 "$a1" "$a2"
until_there "instead the run starts again from its beginning" "$tmp/early.log"
had=$(ls "$tmp/early.ck" 2>/dev/null | grep -c safetensors)
worker c1 "$tmp/early.c1.log"; c1=$!
worker c2 "$tmp/early.c2.log"; c2=$!
wait "$c"; s7=$?
wait "$c1"; sc1=$?
wait "$c2"; sc2=$?
if [ $s7 -eq 0 ] && [ $sc1 -eq 0 ] && [ $sc2 -eq 0 ] && [ "$had" -eq 0 ] &&
   grep -q "every worker was lost (the last: a[12], .*); no checkpoint to go on from (no --checkpoint DIR, or none written yet); instead the run starts again from its beginning on tcp://127.0.0.1:$port with the workers that join within --join-timeout" "$tmp/early.log" &&
   grep -q "no checkpoint at $tmp/early.ck/last.safetensors yet: starting from scratch" "$tmp/early.log" &&
   grep -q "^epoch 4/4: " "$tmp/early.log" && samples_exact "$tmp/early.jsonl" 4 &&
   grep -q "\"event\": \"restart\", \"from\": \"beginning\", \"reason\": \"every worker was lost" "$tmp/early.jsonl"; then
  ok "every worker lost before the first checkpoint: the run started again from its beginning with two new workers, 4 epochs, samples exact"
else
  bad "every worker lost before the first checkpoint: coordinator status $s7, new workers $sc1 / $sc2, checkpoints then $had"
  grep "members\|lost\|error\|done\|scratch" "$tmp/early.log" | tail -n 6
fi

# ... and Ctrl-C as soon as it says so (a launcher whose workers are all
# gone: ragtag_spark) stops it, the checkpoint as it was, not after the
# --join-timeout's wait (the signal came between the two runs)
lose_all int
kill -INT "$c"
wait "$c"; s5=$?
if [ $s5 -ne 0 ] && grep -q "interrupted while waiting for workers" "$tmp/int.log" &&
   ! grep -q "workers joined within --join-timeout" "$tmp/int.log" &&
   cmp -s "$tmp/int.ck/last.safetensors" "$tmp/int.kept"; then
  ok "every worker lost, then Ctrl-C: stopped (status $s5), the checkpoint unchanged"
else
  bad "every worker lost, then Ctrl-C: coordinator status $s5"
  tail -n 4 "$tmp/int.log"
fi
wait_all
kill "$watchdog" 2>/dev/null

[ $fails -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all checks of a lost state passed"
