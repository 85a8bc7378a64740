#!/bin/sh
# The gradient summed in place when every worker shares this machine
# (net/hostreduce.c), with real `ragtag coord` + `ragtag worker` processes:
#  - 2 workers on one host say they sum in place, and end with the very
#    parameters of the same run through the ring over TCP (--no-shm): with
#    two workers both sum a + b, so the bits must agree;
#  - and they keep one copy of the weights and optimiser state for both
#    (src/host_replica.c), which the ring's run does not: the same bits
#    prove that each updating its half of it is one whole update;
#  - 3 workers: in place, replicas identical; with SGD and momentum, one
#    shared copy ends with the bits of one copy each (--host-replica=off);
#  - as root, a third worker with a /dev/shm of its own (a private mount
#    namespace: another "host" for ragtag) turns every worker back to the
#    ring, all together, and the run completes with identical replicas.
#    Skipped, saying so, when not root or without unshare.
set -u
RAGTAG=${RAGTAG:-./src/ragtag}
top_srcdir=${top_srcdir:-.}
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${RAGTAG_DATA_DIR:-}" ]; then
  echo "SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"
  exit 77
fi
if "$RAGTAG" coord 2>&1 | grep -q "built without multi-machine training"; then
  echo "SKIP: ragtag was built without ZeroMQ/msgpack-c"
  exit 77
fi
if [ ! -d /dev/shm ] || [ ! -w /dev/shm ] || [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -lt 40000 ]; then
  echo "SKIP: no /dev/shm with 40 MB free here: workers of one host sum through the ring"
  exit 77
fi
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
# Ports: 31000-31999, this test's own block (below Linux's ephemeral range).
port=$((31000 + ($$ % 97) * 10))
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails + 1)); }

worker() { # name [wrapper...]: a worker joining this run's coordinator
  name=$1
  shift
  "$@" "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --name "$name" --threads 1 \
    --connect-timeout 60 >"$tmp/$name.log" 2>&1 &
  pids="$pids $!"
}

run() { # label workers [coord flags]: the coordinator of one run, its workers started first
  label=$1 n=$2
  shift 2
  "$RAGTAG" coord "$top_srcdir/examples/lenet.cfg" --listen "tcp://127.0.0.1:$port" --workers "$n" \
    --join-timeout 60 --data fashion-mnist --limit 3200 --val 0 --epochs 2 --batch 64 --seed 5 \
    --partition static --progress off "$@" >"$tmp/$label.coord" 2>&1
  rc=$?
  for p in $pids; do wait "$p" 2>/dev/null || true; done
  pids=""
  port=$((port + 1))
  return $rc
}

hash_of() { sed -n 's/.*replicas identical: parameter hash \([0-9a-f]*\).*/\1/p' "$tmp/$1.coord"; }
in_place() { grep -l "gradient sums: in place, in this host's shared memory, by all $2 workers" "$tmp"/$1*.log | wc -l; }
one_copy() { grep -l "weights and optimiser state: one copy in this host's shared memory for all $2 workers" "$tmp"/$1*.log | wc -l; }

# 2 workers: in place, and the bits of the ring's run
worker a1
worker a2
run two 2 || bad "2 workers in place: the run failed: $(tail -n 3 "$tmp/two.coord")"
[ "$(in_place a 2)" = 2 ] && ok "2 workers of one host sum in place" ||
  bad "2 workers did not both say they sum in place: $(grep -h 'gradient sums' "$tmp"/a*.log)"
[ "$(one_copy a 2)" = 1 ] && ok "2 workers of one host keep one copy of the weights" ||
  bad "rank 0 did not say the host keeps one copy: $(cat "$tmp"/a*.log)"
worker b1
worker b2
run ring 2 --no-shm || bad "2 workers through the ring: the run failed: $(tail -n 3 "$tmp/ring.coord")"
grep -q "gradient sums" "$tmp"/b*.log && bad "--no-shm workers summed in place"
h1=$(hash_of two) h2=$(hash_of ring)
[ -n "$h1" ] && [ "$h1" = "$h2" ] && ok "in place and through the ring: the same parameters ($h1)" ||
  bad "in place $h1, through the ring $h2: not the same parameters"

# 3 workers in place
worker c1
worker c2
worker c3
run three 3 || bad "3 workers in place: the run failed: $(tail -n 3 "$tmp/three.coord")"
[ "$(in_place c 3)" = 3 ] && [ -n "$(hash_of three)" ] &&
  ok "3 workers sum in place, replicas identical" ||
  bad "3 workers: $(grep -h 'gradient sums' "$tmp"/c*.log; grep -h 'replicas' "$tmp/three.coord")"

# 3 workers with SGD: one shared copy against one each, the same bits
# (the shared copy's sum and update in one pass, rt_hostreduce_sum_apply;
# its logged norm is summed from the workers' slices)
for w in e1 e2 e3; do worker $w; done
run sgd-shared 3 --optimizer sgd --momentum 0.9 --nesterov --log-every 5 \
  --metrics "$tmp/sgd-shared.jsonl" ||
  bad "3 workers, SGD, shared: the run failed: $(tail -n 3 "$tmp/sgd-shared.coord")"
for w in f1 f2 f3; do worker $w; done
run sgd-own 3 --optimizer sgd --momentum 0.9 --nesterov --host-replica=off --log-every 5 \
  --metrics "$tmp/sgd-own.jsonl" ||
  bad "3 workers, SGD, one copy each: the run failed: $(tail -n 3 "$tmp/sgd-own.coord")"
h1=$(hash_of sgd-shared) h2=$(hash_of sgd-own)
[ "$(one_copy e 3)" = 1 ] && [ "$(one_copy f 3)" = 0 ] && [ -n "$h1" ] && [ "$h1" = "$h2" ] &&
  ok "3 workers, SGD: one shared copy and one copy each end with the same parameters ($h1)" ||
  bad "3 workers, SGD: shared $h1 ($(one_copy e 3) said so), one each $h2 ($(one_copy f 3))"
norms() { sed -n 's/.*"grad_norm": \([0-9.e+-]*\).*/\1/p' "$1"; }
paste "$(norms "$tmp/sgd-shared.jsonl" > "$tmp/n1"; echo "$tmp/n1")" \
  "$(norms "$tmp/sgd-own.jsonl" > "$tmp/n2"; echo "$tmp/n2")" > "$tmp/norms"
if [ "$(wc -l < "$tmp/n1")" -ge 10 ] && [ "$(wc -l < "$tmp/n2")" = "$(wc -l < "$tmp/n1")" ] &&
  awk '{ d = $1 - $2; if (d < 0) d = -d; if (!($2 > 0) || d > 1e-5 * $2) bad = 1 } END { exit bad }' "$tmp/norms"; then
  ok "3 workers, SGD: the logged gradient norms agree ($(wc -l < "$tmp/n1") steps, within 1e-5)"
else
  bad "3 workers, SGD: gradient norms shared / own differ: $(head -n 3 "$tmp/norms" | tr '\n' ' ')"
fi
# with clipping (the norm before any update: the sum, then the update)
for w in g1 g2 g3; do worker $w; done
run clip-shared 3 --optimizer sgd --momentum 0.9 --clip-norm 0.5 ||
  bad "3 workers, clipped, shared: the run failed: $(tail -n 3 "$tmp/clip-shared.coord")"
for w in i1 i2 i3; do worker $w; done
run clip-own 3 --optimizer sgd --momentum 0.9 --clip-norm 0.5 --host-replica=off ||
  bad "3 workers, clipped, one copy each: the run failed: $(tail -n 3 "$tmp/clip-own.coord")"
h1=$(hash_of clip-shared) h2=$(hash_of clip-own)
[ "$(one_copy g 3)" = 1 ] && [ -n "$h1" ] && [ "$h1" = "$h2" ] &&
  ok "3 workers, clipped: shared and own end with the same parameters ($h1)" ||
  bad "3 workers, clipped: shared $h1, one each $h2"

# a worker on another "host": everybody on the ring
if [ "$(id -u)" != 0 ] || ! command -v unshare >/dev/null 2>&1 ||
  ! unshare -m sh -c 'mount -t tmpfs -o size=1m tmpfs /dev/shm' 2>/dev/null; then
  echo "SKIP (part): a worker with its own /dev/shm needs root, unshare and a tmpfs mount" \
    "in a private mount namespace"
else
  worker d1
  worker d2
  worker d3 unshare -m sh -c 'mount -t tmpfs -o size=64m tmpfs /dev/shm && exec "$@"' sh
  run apart 3 || bad "a worker of another host: the run failed: $(tail -n 3 "$tmp/apart.coord")"
  n=$(grep -l "gradient sums: through the ring (3 workers)" "$tmp"/d*.log | wc -l)
  [ "$n" = 3 ] && [ "$(in_place d 3)" = 0 ] && [ -n "$(hash_of apart)" ] &&
    ok "with a worker on another host all 3 sum through the ring, replicas identical" ||
    bad "another host: $(grep -h 'gradient sums\|ring formed' "$tmp"/d*.log; tail -n 2 "$tmp/apart.coord")"
fi
[ $fails = 0 ] || exit 1
