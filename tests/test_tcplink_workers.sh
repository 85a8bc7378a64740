#!/bin/sh
# Raw TCP ring links between workers (net/tcplink.h), real processes on
# 127.0.0.1 with --no-shm so that every neighbour is "another host":
#  - token links (--link-security token) run the ring over raw TCP links
#    (the workers say "links tcp"), CurveZMQ keeps ZeroMQ ("links zmq"),
#    and both end with the same parameter hash: the same bits either way;
#  - kill -9 of one of 3 workers over raw links: the other 2 go on (the
#    lost link is a lost neighbour, not a failure of theirs), replicas
#    identical, every epoch's samples used once.
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
run="--data fashion-mnist --limit 6000 --val 0.1 --batch 48 --partition static --progress lines --no-shm"
# Ports: 29000-29999, this test's own block. Every test's listen ports lie
# below 32768, outside Linux's ephemeral range (32768-60999), so the kernel
# never hands one to another test's outgoing or port-0 socket meanwhile.
port=$((29000 + ($$ % 97) * 10))

worker() { # name log [extra flags]
  name=$1 log=$2
  shift 2
  "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --name "$name" --threads 1 \
    --connect-timeout 60 "$@" >"$log" 2>&1 &
  pids="$pids $!"
}
hash_of() { sed -n 's/.*replicas identical: parameter hash \([0-9a-f]*\) on all.*/\1/p' "$1" | tail -n 1; }

# ---- the same run with token links (raw TCP) and with CurveZMQ (ZeroMQ) ----------------
for sec in token curve; do
  port=$((port + 1))
  "$RAGTAG" coord "$model" --workers 3 --listen "tcp://127.0.0.1:$port" $run --epochs 1 \
    --link-security $sec >"$tmp/c-$sec.log" 2>&1 & c=$!
  for n in a b c; do worker $n "$tmp/$n-$sec.log"; done
  wait $c; eval "s_$sec=$?"; wait_all
done
ht=$(hash_of "$tmp/c-token.log"); hc=$(hash_of "$tmp/c-curve.log")
if [ "$s_token" -eq 0 ] && [ "$s_curve" -eq 0 ] && [ -n "$ht" ] && [ "$ht" = "$hc" ] &&
   [ "$(cat "$tmp"/?-token.log | grep -c "links tcp (left) / tcp (right)")" -eq 3 ] &&
   [ "$(cat "$tmp"/?-curve.log | grep -c "links zmq (left) / zmq (right)")" -eq 3 ]; then
  ok "token links over raw TCP and CurveZMQ over ZeroMQ: the same parameter hash ($ht)"
else bad "raw vs ZeroMQ links: status $s_token/$s_curve, hash '$ht' vs '$hc'"
  grep -h "links\|error" "$tmp"/?-token.log "$tmp"/?-curve.log | head -n 12; fi

# ---- kill -9 one of 3 workers over raw links ------------------------------------------
port=$((port + 1))
"$RAGTAG" coord "$model" --workers 3 --listen "tcp://127.0.0.1:$port" $run --epochs 4 \
  --link-security token --metrics "$tmp/m1.jsonl" >"$tmp/c1.log" 2>&1 & c=$!
for n in w1 w2 w3; do worker $n "$tmp/$n-1.log"; done
set -- $pids
victim=$(( ($$ % 3) + 1 )); vpid=$(eval echo \${$victim})
# an epoch here takes about 0.3 s: kill within the 0.2 s after epoch 1 ends
# so that the run (4 epochs) is still going, whatever the machine's speed
started "$tmp/c1.log"
sleep "0.$(($$ % 3))"
kill -9 "$vpid" || bad "w$victim had already exited: the run ended before the kill"
wait $c; s1=$?; wait_all
if [ $s1 -eq 0 ] && grep -q "lost rank [0-9] (w$victim, .*2 workers continue" "$tmp/c1.log" &&
   grep -q "replicas identical: parameter hash [0-9a-f]* on all 2 workers" "$tmp/c1.log" &&
   samples_exact "$tmp/m1.jsonl" 4; then
  ok "kill -9 of w$victim of 3 over raw links: 2 workers went on, replicas identical, samples exact$(grep -h "is lost" "$tmp"/w?-1.log | head -n 1 | sed 's/^/ (a survivor: /; s/$/)/')"
else bad "kill -9 of w$victim over raw links: status $s1"; grep -h "members\|samples\|error\|lost" "$tmp/c1.log" "$tmp"/w?-1.log | tail -n 10; fi

[ $fails -eq 0 ] && echo "all raw link tests passed" || echo "$fails failed"
[ $fails -eq 0 ]
