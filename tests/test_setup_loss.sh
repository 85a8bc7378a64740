#!/bin/sh
# A worker that dies while it sets up (real processes on 127.0.0.1): three
# workers join, one of them is paused (SIGSTOP) as soon as it has the job,
# in its set-up (the three set up at once: nobody is ready, so training
# cannot have begun), and killed there. The coordinator must not
# wait out --setup-timeout (300 s) for it: it says the worker was lost
# while setting up, starts with the other two, which regroup without it,
# and the run finishes, every epoch's samples used once. With --min-workers
# 3 the same loss stops the run at once, saying why. A worker that says
# hello while the run sets up, with room for it, waits and joins once
# training begins (it used to be turned away). A joiner still setting up
# when the run ends is told so and ends 0; so is one admitted just after
# the members' last step, whose generation never forms.
set -u
RAGTAG=${RAGTAG:-./src/ragtag}
top_srcdir=${top_srcdir:-.}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${RAGTAG_DATA_DIR:-}" ]; then
  echo "SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"
  exit 77
fi
. "$top_srcdir/tests/elastic-lib.sh"
model="$top_srcdir/examples/lenet.cfg"
ntrain=5400
run="--data fashion-mnist --limit 6000 --val 0.1 --batch 48 --epochs 2 --progress lines"
# Ports: 19000-19299, this test's own block (below Linux's ephemeral range).
port=$((19000 + ($$ % 60) * 5))
worker() { # name log [flags]
  n=$1 l=$2
  shift 2
  "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --name "$n" --threads 1 \
    --connect-timeout 60 "$@" >"$l" 2>&1 &
  pids="$pids $!"
}

# lose_in_setup TAG COORD-FLAGS...: the coordinator ($c), w1 and w2, and w3
# killed while it hangs in its set-up
lose_in_setup() {
  tag=$1
  shift
  t0=$(date +%s)
  "$RAGTAG" coord "$model" --workers 3 --listen "tcp://127.0.0.1:$port" $run \
    --metrics "$tmp/$tag.jsonl" "$@" >"$tmp/$tag.log" 2>&1 & c=$!
  pids="$pids $c"
  worker w1 "$tmp/$tag.w1.log"
  worker w2 "$tmp/$tag.w2.log"
  worker w3 "$tmp/$tag.w3.log" --stall-setup 60; w3=$! # in its set-up however fast that is
  until_there "joined run" "$tmp/$tag.w3.log"
  kill -STOP "$w3"
  if [ -n "${joiner:-}" ]; then # one more says hello while the run sets up
    worker w4 "$tmp/$tag.w4.log"; w4=$!
    until_there "worker w4 from .* waits: the run sets up" "$tmp/$tag.log"
  fi
  sleep 1
  kill -9 "$w3"
  wait "$c"; s=$?
  secs=$(($(date +%s) - t0))
}

lose_in_setup go
wait_all
if [ $s -eq 0 ] && [ "$secs" -lt 60 ] &&
   grep -q "worker w3 (rank 2, [^)]*) lost while setting up: its connection closed [0-9.]* s ago (the process died or its host cut it); the run starts with the 2 others" "$tmp/go.log" &&
   grep -q "generation 2: lost rank 2 (w3, [^)]*): its connection closed while it set up; 2 workers continue" "$tmp/go.log" &&
   grep -q "^epoch 2/2: " "$tmp/go.log" && samples_exact "$tmp/go.jsonl" 2; then
  ok "a worker killed while setting up: the run started with the other two and finished in $secs s, samples exact"
else
  bad "lost in set-up: coordinator status $s after $secs s"
  tail -n 8 "$tmp/go.log"
fi

port=$((port + 1))
lose_in_setup stop --min-workers 3
wait_all
if [ $s -eq 1 ] && [ "$secs" -lt 60 ] &&
   grep -q "worker w3 (rank 2, [^)]*) was lost while setting up: its connection closed [0-9.]* s ago (the process died or its host cut it); 2 left, fewer than --min-workers 3" "$tmp/stop.log"; then
  ok "with --min-workers 3 the same loss stopped the run at once (status 1, $secs s), saying why"
else
  bad "lost in set-up, --min-workers 3: coordinator status $s after $secs s"
  tail -n 5 "$tmp/stop.log"
fi

# a worker that says hello while the run sets up (room for it: --max-workers
# 4) is not turned away: it waits, then joins once training begins
port=$((port + 1))
joiner=yes lose_in_setup held --max-workers 4 --epochs 8
wait "$w4"; s4=$?
wait_all
if [ $s -eq 0 ] && [ $s4 -eq 0 ] &&
   grep -q "worker w4 from [^ ]* waits: the run sets up with its 3 workers; it joins once training begins (room for 1 more)" "$tmp/held.log" &&
   ! grep -q "turned away" "$tmp/held.log" && grep -q "admitted w4" "$tmp/held.log" &&
   grep -q "^epoch 8/8: " "$tmp/held.log" && samples_exact "$tmp/held.jsonl" 8; then
  ok "a worker that came while the run set up waited and joined in training ($(grep -o "generation [0-9]*: admitted w4" "$tmp/held.log")), samples exact"
else
  bad "a joiner during set-up: coordinator status $s, the joiner's $s4"
  grep "w4\|turned" "$tmp/held.log" | tail -n 5
fi

# a joiner still setting up when the run ends is told so and ends 0 at
# once: its control socket drops what it holds unread when the
# coordinator's end closes, so the coordinator waits (a few seconds at
# most) until it read "finished" (it used to wait out its 60 s and fail)
port=$((port + 1))
"$RAGTAG" coord "$model" --workers 1 --max-workers 2 --listen "tcp://127.0.0.1:$port" $run \
  --epochs 6 --metrics "$tmp/end.jsonl" >"$tmp/end.log" 2>&1 & c=$!
pids="$pids $c"
worker e1 "$tmp/end.e1.log" --throttle 0.5 # 6 epochs of ~0.3 s
started "$tmp/end.log"
worker e2 "$tmp/end.e2.log" --stall-setup 8; e2=$! # its set-up outlasts the run
wait "$c"; s=$?
wait "$e2"; se2=$?
wait_all
if [ $s -eq 0 ] && [ $se2 -eq 0 ] && grep -q "^epoch 6/6: " "$tmp/end.log" &&
   grep -q "worker e2 joining" "$tmp/end.log" &&
   grep -q "the run ended before this worker was admitted: done" "$tmp/end.e2.log"; then
  ok "a joiner setting up past the run's end was told so and ended 0"
else
  bad "a joiner setting up at the run's end: coordinator status $s, the joiner's $se2"
  tail -n 3 "$tmp/end.e2.log"
fi

# late_joiner LABEL MODE FLAGS1 FLAGS2: a run of 2 members (m1, m2, with
# those worker flags), and a joiner j started once a member says its end
# is reported late (--stall-end); s: the coordinator's status, sj: the
# joiner's
late_joiner() {
  label=$1 mode=$2
  port=$((port + 1))
  "$RAGTAG" coord "$model" --workers 2 --max-workers 3 --listen "tcp://127.0.0.1:$port" $run \
    --mode "$mode" >"$tmp/$label.log" 2>&1 & c=$!
  pids="$pids $c"
  worker m1 "$tmp/$label.m1.log" $3
  worker m2 "$tmp/$label.m2.log" $4
  for i in $(seq 600); do cat "$tmp/$label".m?.log | grep -q "reported late" && break; sleep 0.05; done
  worker j "$tmp/$label.j.log"; jp=$!
  wait "$c"; s=$?
  wait "$jp"; sj=$?
  wait_all
  told=$(grep -c "the run ended before this worker was admitted: done" "$tmp/$label.j.log")
}

# a joiner admitted just after the members' last step (--stall-end: they
# report their end 6 s late) finds members that never form its
# generation: the run ends with them, the joiner not admitted after all,
# told so, ending 0 (it waited 10 s for their ring, then 30 s for a next
# generation, and ended 1; the coordinator waited on)
for mode in sync gossip; do
  late_joiner "late-$mode" $mode "--stall-end 6" "--stall-end 6"
  if [ $s -eq 0 ] && [ $sj -eq 0 ] && [ "$told" = 1 ] &&
     grep -q "generation 2: admitted j " "$tmp/late-$mode.log" &&
     grep -q "generation 2 never formed: its members ended first; j was not admitted after all" "$tmp/late-$mode.log"; then
    ok "$mode: a joiner admitted as the members ended was told the run ended, all ended 0"
  elif [ $s -eq 0 ] && [ $sj -eq 0 ] && ! grep -q "admitted j " "$tmp/late-$mode.log"; then
    echo "SKIP (part): $mode: the joiner set up after the members' end reached the coordinator"
  else
    bad "$mode: a joiner admitted as the members ended: coordinator status $s, the joiner's $sj"
    grep "members" "$tmp/late-$mode.log" | tail -n 3
    tail -n 3 "$tmp/late-$mode.j.log"
  fi
done

# one member ended (reported), the other not yet: the run is ending, and
# a joiner is not admitted (the ended member would never form the ring
# the other would wait for); it is told the run ended
late_joiner half sync "" "--stall-end 6"
if [ $s -eq 0 ] && [ $sj -eq 0 ] && [ "$told" = 1 ] && grep -q "worker j joining" "$tmp/half.log" &&
   ! grep -q "admitted j " "$tmp/half.log"; then
  ok "a joiner ready after a member ended was not admitted, told the run ended, all ended 0"
else
  bad "a joiner after a member ended: coordinator status $s, the joiner's $sj"
  grep "members" "$tmp/half.log" | tail -n 3
  tail -n 3 "$tmp/half.j.log"
fi

[ $fails -eq 0 ] || { echo "$fails check(s) failed"; exit 1; }
echo "all checks of a loss in set-up passed"
