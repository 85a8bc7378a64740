#!/bin/sh
# A worker in a small container (issue 18), as root in memory-limited
# cgroups (bench/mem-limit.sh; cgroup v1 here, v2 read too):
#   - in 256 MB, a worker trains seedcnn on the full Fashion-MNIST served by
#     the coordinator to the end of an epoch; the cluster table shows its
#     need and its 256 MB limit, and the metrics its peak (max RSS);
#   - in 64 MB, a worker is turned away at join with its estimated need and
#     its limit, and the run goes on with the other worker (--min-workers).
# Skipped, saying why, when no memory cgroup can be made (not root).
set -u
RAGTAG=${RAGTAG:-./src/ragtag}
top_srcdir=${top_srcdir:-.}
LIMIT="$top_srcdir/bench/mem-limit.sh"
if [ ! -f /usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz ] && [ -z "${RAGTAG_DATA_DIR:-}" ]; then
  echo "SKIP: Fashion-MNIST not installed (apt-get install dataset-fashion-mnist)"
  exit 77
fi
if [ "$(id -u)" != 0 ]; then
  echo "SKIP: memory-limited cgroups need root (this test runs workers in 256 MB and 64 MB)"
  exit 77
fi
if ! "$LIMIT" 64 -- true 2>/dev/null; then
  "$LIMIT" 64 -- true
  echo "SKIP: no memory-limited cgroup can be made here (see the line above)"
  exit 77
fi
tmp=$(mktemp -d)
pids=""
cleanup() { for p in $pids; do kill "$p" 2>/dev/null; done; rm -rf "$tmp"; }
trap cleanup EXIT
fails=0
ok() { echo "ok: $1"; }
bad() { echo "FAIL: $1"; fails=$((fails + 1)); }
# Ports: 24000-24999, this test's own block. Every test's listen ports lie
# below 32768, outside Linux's ephemeral range (32768-60999), so the kernel
# never hands one to another test's outgoing or port-0 socket meanwhile.
port=$((24000 + ($$ % 240) * 4))

# 1. seedcnn, full Fashion-MNIST served by the coordinator, 256 MB.
"$RAGTAG" coord "$top_srcdir/examples/seedcnn.cfg" --workers 1 --listen "tcp://127.0.0.1:$port" \
  --serve-data --epochs 1 --batch 64 --progress off --metrics "$tmp/m.jsonl" >"$tmp/c1.log" 2>&1 &
cpid=$!
pids="$pids $cpid"
"$LIMIT" 256 -- "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --name small --threads 2 \
  --cache "$tmp/cache" --connect-timeout 60 >"$tmp/w1.log" 2>&1
wrc=$?
wait "$cpid"
crc=$?
pids=""
rss=$(sed -n 's/.*"event": "memory".*"max_rss_mb": \([0-9.]*\).*/\1/p' "$tmp/m.jsonl")
if [ $wrc -eq 0 ] && [ $crc -eq 0 ] && grep -q "replicas identical" "$tmp/c1.log" &&
   grep -q "1 epochs, 844 steps" "$tmp/c1.log" && grep -Eq " small .* [0-9]+/256 " "$tmp/c1.log" &&
   grep -q '"max_rss_mb"' "$tmp/m.jsonl" && [ -n "$rss" ] &&
   [ "$(awk -v r="$rss" 'BEGIN { print (r > 0 && r < 256) }')" = 1 ]; then
  ok "seedcnn, full Fashion-MNIST served, one epoch in a 256 MB cgroup: max RSS $rss MB"
  grep -E "MB need/lim| small " "$tmp/c1.log"
else
  bad "seedcnn in 256 MB (worker $wrc, coordinator $crc)"
  tail -n 15 "$tmp/c1.log" "$tmp/w1.log"
  cat "$tmp/m.jsonl"
fi

# 2. a worker in 64 MB is turned away at join; the run goes on with the other.
port=$((port + 1))
"$RAGTAG" coord "$top_srcdir/examples/lenet.cfg" --workers 2 --min-workers 1 --join-timeout 8 \
  --listen "tcp://127.0.0.1:$port" --serve-data --limit 1280 --epochs 1 --progress off \
  >"$tmp/c2.log" 2>&1 &
cpid=$!
"$RAGTAG" worker --join "tcp://127.0.0.1:$port" --name big --threads 1 --cache "$tmp/cache" \
  --connect-timeout 60 >"$tmp/big.log" 2>&1 &
bpid=$!
pids="$cpid $bpid"
"$LIMIT" 64 -- "$RAGTAG" worker --join "tcp://127.0.0.1:$port" --name tiny --threads 1 \
  --cache "$tmp/cache" --connect-timeout 60 >"$tmp/tiny.log" 2>&1
trc=$?
wait "$cpid"
crc=$?
wait "$bpid"
brc=$?
pids=""
msg='needs about [0-9]+ MB .* but its memory limit is 64 MB'
if [ $trc -ne 0 ] && grep -Eq "refused this worker: it $msg" "$tmp/tiny.log" &&
   grep -Eq "turned away worker tiny from .*: it $msg" "$tmp/c2.log" &&
   [ $crc -eq 0 ] && [ $brc -eq 0 ] && grep -q "replicas identical: .* on all 1 worker" "$tmp/c2.log"; then
  ok "a worker in 64 MB is turned away at join, naming its need and its limit; the run went on"
  grep -h "refused this worker" "$tmp/tiny.log"
else
  bad "64 MB refusal (tiny $trc, coordinator $crc, big $brc)"
  tail -n 8 "$tmp/tiny.log" "$tmp/c2.log" "$tmp/big.log"
fi

[ $fails -eq 0 ] || exit 1
echo "all memory tests passed"
